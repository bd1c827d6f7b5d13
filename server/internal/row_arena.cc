#include "server/internal/row_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>

#if defined(__SANITIZE_ADDRESS__)
#define PS_ROW_ARENA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PS_ROW_ARENA_ASAN 1
#endif
#endif

#ifdef PS_ROW_ARENA_ASAN
#include <sanitizer/asan_interface.h>
#define PS_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define PS_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define PS_POISON(p, n) ((void)(p), (void)(n))
#define PS_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace ps {
namespace {

#ifdef PS_ROW_ARENA_ASAN
constexpr size_t kRedzone = 32;  // poisoned bytes after each row
#else
constexpr size_t kRedzone = 0;
#endif
constexpr size_t kPage = 4096;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

size_t RoundedRow(size_t bytes) { return bytes % 64 == 0 ? bytes : RoundUp(bytes, 16); }

size_t StrideOf(size_t row_bytes) { return RoundedRow(std::max<size_t>(row_bytes, 1) + kRedzone); }

// log2 of the rows per chunk: the largest power of two whose rows fit in kChunkBytes (1 for a
// row larger than that).
uint32_t ShiftOf(size_t stride) {
  uint32_t shift = 0;
  while ((stride << (shift + 1)) <= RowArena::kChunkBytes && shift < 31) ++shift;
  return shift;
}

// An anonymous private mapping of `bytes`, aligned to `align` (a power of two >= the page);
// null if the system refuses it.
char* MapAligned(size_t bytes, size_t align) {
  void* p = mmap(nullptr, bytes + align, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = RoundUp(start, align);
  if (aligned > start) munmap(p, aligned - start);
  const uintptr_t end = aligned + bytes;
  if (start + bytes + align > end)
    munmap(reinterpret_cast<void*>(end), start + bytes + align - end);
  return reinterpret_cast<char*>(aligned);
}

}  // namespace

RowArena::RowArena(size_t row_bytes, bool huge_pages)
    : huge_pages_(huge_pages),
      row_bytes_(std::max<size_t>(row_bytes, 1)),
      stride_(StrideOf(row_bytes)),
      row_bytes_rounded_(RoundedRow(std::max<size_t>(row_bytes, 1))),
      shift_(ShiftOf(stride_)),
      mask_((uint32_t{1} << shift_) - 1),
      chunk_bytes_(RoundUp(stride_ << shift_, huge_pages ? kChunkBytes : kPage)),
      max_rows_(std::min<uint64_t>(uint64_t{RowArena::kNoRow}, kMaxArenaBytes / stride_)),
      max_chunks_(static_cast<size_t>((max_rows_ + mask_) >> shift_)),
      chunks_(reinterpret_cast<std::atomic<char*>*>(
          MapAligned(RoundUp(max_chunks_ * sizeof(std::atomic<char*>), kPage), kPage))) {
  // An untouched anonymous page reads as zeros: every chunk pointer starts null.
  static_assert(sizeof(std::atomic<char*>) == sizeof(char*));
}

RowArena::~RowArena() {
  absl::MutexLock l(&mu_);
  if (chunks_ == nullptr) return;
  for (size_t i = 0; i < num_chunks_; ++i) {
    char* c = chunks_[i].load(std::memory_order_relaxed);
    PS_UNPOISON(c, chunk_bytes_);  // the next owner of these addresses starts clean
    munmap(c, chunk_bytes_);
  }
  munmap(chunks_, RoundUp(max_chunks_ * sizeof(std::atomic<char*>), kPage));
}

char* RowArena::MapChunk() {
  char* c = MapAligned(chunk_bytes_, huge_pages_ ? kChunkBytes : kPage);
  if (c == nullptr) return nullptr;
#ifdef MADV_HUGEPAGE
  if (huge_pages_) madvise(c, chunk_bytes_, MADV_HUGEPAGE);  // may be refused
#endif
  PS_POISON(c, chunk_bytes_);  // rows are unpoisoned as they are handed out
  return c;
}

uint32_t RowArena::Allocate() {
  absl::MutexLock l(&mu_);
  return AllocateLocked();
}

size_t RowArena::AllocateMany(uint32_t* out, size_t n) {
  absl::MutexLock l(&mu_);
  for (size_t i = 0; i < n; ++i) {
    out[i] = AllocateLocked();
    if (out[i] == kNoRow) return i;
  }
  return n;
}

uint32_t RowArena::AllocateLocked() {
  if (!free_.empty()) {
    const uint32_t row = free_.back();
    free_.pop_back();
    PS_UNPOISON(At(row), row_bytes_);
    return row;
  }
  if (chunks_ == nullptr || carved_ >= max_rows_) return kNoRow;
  const uint32_t row = static_cast<uint32_t>(carved_);
  if ((row >> shift_) >= num_chunks_) {
    char* c = MapChunk();
    if (c == nullptr) return kNoRow;
    chunks_[num_chunks_++].store(c, std::memory_order_release);
  }
  ++carved_;
  PS_UNPOISON(At(row), row_bytes_);
  return row;
}

void RowArena::Free(uint32_t row) { FreeMany(&row, 1); }

void RowArena::FreeMany(const uint32_t* rows, size_t n) {
  absl::MutexLock l(&mu_);
  for (size_t i = 0; i < n; ++i) {
    if (rows[i] == kNoRow) continue;
    PS_POISON(At(rows[i]), row_bytes_);
    free_.push_back(rows[i]);
  }
}

size_t RowArena::carved_bytes() const {
  absl::MutexLock l(&mu_);
  return carved_ * stride_;
}

size_t RowArena::rows_in_use() const {
  absl::MutexLock l(&mu_);
  return carved_ - free_.size();
}

}  // namespace ps
