// Memory for the rows of one table, carved from large chunks instead of one allocation per row,
// and named by 32-bit handles (an index holds 4 bytes per row, not an 8-byte pointer).
#ifndef PS_SERVER_INTERNAL_ROW_ARENA_H_
#define PS_SERVER_INTERNAL_ROW_ARENA_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ps {

// Rows of `row_bytes` bytes, handle h at chunk h / rows_per_chunk(), each chunk a private
// anonymous mapping of about 2 MiB (rows_per_chunk() is a power of two), so that a row is found
// from its handle with a shift, a mask and one load. Pages are touched only as rows are carved,
// in order: a small table costs a page or two of memory, not a chunk. With `huge_pages`, chunks
// are 2 MiB-aligned and marked for transparent huge pages (madvise). Rows given back are reused
// before new ones are carved; memory goes back to the system when the arena is destroyed. Rows
// start 16-byte aligned (64 where their stride is a multiple of 64). Under AddressSanitizer,
// rows are fenced by poisoned bytes and memory not handed out (or given back) is poisoned.
// Thread-safe: At() takes no lock (a handle obtained from Allocate, through any
// synchronization, finds its chunk).
class RowArena {
 public:
  static constexpr uint32_t kNoRow = UINT32_MAX;
  // The most bytes of rows one arena holds (handles are 32 bits as well).
  static constexpr uint64_t kMaxArenaBytes = uint64_t{1} << 40;
  static constexpr size_t kChunkBytes = size_t{2} << 20;

  explicit RowArena(size_t row_bytes, bool huge_pages = false);
  ~RowArena();
  RowArena(const RowArena&) = delete;
  RowArena& operator=(const RowArena&) = delete;

  // Uninitialized room for one row; kNoRow when the arena is full (max_rows()) or the system
  // refuses memory for a new chunk.
  uint32_t Allocate();
  // Up to `n` rows at once (one lock for all): writes their handles to `out`, returns how many
  // (fewer only where Allocate would say kNoRow).
  size_t AllocateMany(uint32_t* out, size_t n);
  // Gives back a row from Allocate() (it may be handed out again).
  void Free(uint32_t row);
  void FreeMany(const uint32_t* rows, size_t n);
  // The row's bytes.
  char* At(uint32_t row) const {
    return chunks_[row >> shift_].load(std::memory_order_acquire) +
           static_cast<size_t>(row & mask_) * stride_;
  }

  // Bytes of chunk memory carved into rows so far (rows in use and given back); what the rows
  // cost in resident memory, to the page.
  size_t carved_bytes() const;
  // Rows in use (allocated, not given back).
  size_t rows_in_use() const;
  // Bytes from one row to the next: the row's size rounded up (plus a fence under ASan).
  size_t stride() const { return stride_; }
  // A row's bytes as counted (memory caps, metrics): its size rounded up as its stride is, the
  // same with or without ASan's fence.
  size_t row_bytes() const { return row_bytes_rounded_; }
  size_t rows_per_chunk() const { return size_t{1} << shift_; }
  uint64_t max_rows() const { return max_rows_; }

 private:
  char* MapChunk();
  uint32_t AllocateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const bool huge_pages_;
  const size_t row_bytes_;
  const size_t stride_;
  const size_t row_bytes_rounded_;
  const uint32_t shift_;  // log2(rows per chunk)
  const uint32_t mask_;   // rows per chunk - 1
  const size_t chunk_bytes_;
  const uint64_t max_rows_;
  const size_t max_chunks_;
  // max_chunks_ entries in one mapping whose pages are touched as chunks are added.
  std::atomic<char*>* const chunks_;
  mutable absl::Mutex mu_;
  size_t num_chunks_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t carved_ ABSL_GUARDED_BY(mu_) = 0;  // rows carved: handles [0, carved_)
  std::vector<uint32_t> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_SERVER_INTERNAL_ROW_ARENA_H_
