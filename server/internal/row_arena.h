// Memory for the rows of one table, carved from large chunks instead of one allocation per row.
#ifndef PS_SERVER_INTERNAL_ROW_ARENA_H_
#define PS_SERVER_INTERNAL_ROW_ARENA_H_

#include <cstddef>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ps {

// Rows of `row_floats` floats. Chunks grow from 64 KiB to 2 MiB; the 2 MiB ones are aligned to
// 2 MiB and, with `huge_pages`, marked for transparent huge pages (madvise), so that a table of
// millions of rows is reached through few TLB entries and faulted in 2 MiB at a time: a random
// row's lookup then costs cache misses but rarely a page walk. (Where the kernel's huge pages are
// slow to fault in the first time, as on some VMs, creating rows then costs more.) Rows
// given back are reused before new memory is carved; memory goes back to the system when the arena
// is destroyed (its table dropped). Rows start 16-byte aligned, 64-byte aligned when their size is
// a multiple of 64 bytes. Under AddressSanitizer, rows are fenced by poisoned bytes and memory not
// handed out (or given back) is poisoned, so a row overrun is caught as it was with one allocation
// per row. Thread-safe.
class RowArena {
 public:
  // `huge_pages`: 2 MiB chunks are marked for transparent huge pages.
  explicit RowArena(size_t row_floats, bool huge_pages = false);
  ~RowArena();
  RowArena(const RowArena&) = delete;
  RowArena& operator=(const RowArena&) = delete;

  // Uninitialized room for one row. Throws std::bad_alloc if no memory is left, as `new` does.
  float* Allocate();
  // Gives back a row from Allocate() (it may be handed out again).
  void Free(float* row);

  // Bytes of the chunks taken from the system (rows in use, rows given back, room not carved).
  size_t reserved_bytes() const;
  // Bytes from one row to the next: the row's size rounded up (plus a fence under ASan).
  size_t stride() const { return stride_; }

  static constexpr size_t kFirstChunkBytes = size_t{64} << 10;
  static constexpr size_t kHugeChunkBytes = size_t{2} << 20;

 private:
  struct Chunk {
    char* data;
    size_t bytes;
    bool mapped;  // from mmap (else operator new)
  };
  void NewChunk() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const bool huge_pages_;
  const size_t row_bytes_;
  const size_t stride_;  // bytes from one row to the next
  mutable absl::Mutex mu_;
  std::vector<Chunk> chunks_ ABSL_GUARDED_BY(mu_);
  char* next_ ABSL_GUARDED_BY(mu_) = nullptr;  // room left in the last chunk: [next_, end_)
  char* end_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<float*> free_ ABSL_GUARDED_BY(mu_);
  size_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ps

#endif  // PS_SERVER_INTERNAL_ROW_ARENA_H_
