#include "server/internal/row_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <new>

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

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// `bytes` (a multiple of kHugeChunkBytes) aligned to kHugeChunkBytes, marked for huge pages if
// `huge`; null if the system refuses a mapping.
char* MapAligned(size_t bytes, bool huge) {
#if defined(__linux__)
  const size_t align = RowArena::kHugeChunkBytes;
  void* p =
      mmap(nullptr, bytes + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = RoundUp(start, align);
  // Unmap the unaligned head and the tail beyond the chunk.
  if (aligned > start) munmap(p, aligned - start);
  munmap(reinterpret_cast<void*>(aligned + bytes), align - (aligned - start));
#ifdef MADV_HUGEPAGE
  if (huge) madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);  // may be refused
#else
  (void)huge;
#endif
  return reinterpret_cast<char*>(aligned);
#else
  (void)bytes;
  (void)huge;
  return nullptr;
#endif
}

}  // namespace

RowArena::RowArena(size_t row_floats, bool huge_pages)
    : huge_pages_(huge_pages),
      row_bytes_(std::max<size_t>(row_floats, 1) * sizeof(float)),
      stride_([&] {
        const size_t bytes = row_bytes_ + kRedzone;
        return bytes % 64 == 0 ? bytes : RoundUp(bytes, 16);
      }()) {}

RowArena::~RowArena() {
  absl::MutexLock l(&mu_);
  for (const Chunk& c : chunks_) {
    PS_UNPOISON(c.data, c.bytes);  // the next owner of these addresses starts clean
    if (c.mapped) {
      munmap(c.data, c.bytes);
    } else {
      ::operator delete (c.data, std::align_val_t{64});
    }
  }
}

void RowArena::NewChunk() {
  // 64 KiB, 128 KiB, ... 2 MiB, then 2 MiB each (a row larger than that gets a chunk of its own,
  // a multiple of 2 MiB): at most one chunk's room is ever unused, and a small table stays small.
  size_t bytes =
      chunks_.empty() ? kFirstChunkBytes : std::min(chunks_.back().bytes * 2, kHugeChunkBytes);
  bytes = std::max(bytes, stride_);
  Chunk c{nullptr, bytes, false};
  if (bytes >= kHugeChunkBytes) {
    c.bytes = RoundUp(bytes, kHugeChunkBytes);
    c.data = MapAligned(c.bytes, huge_pages_);
    c.mapped = c.data != nullptr;
  }
  if (c.data == nullptr) {  // small, or no mapping to be had (e.g. vm.max_map_count reached)
    c.data = static_cast<char*>(::operator new (c.bytes, std::align_val_t{64}));
  }
  PS_POISON(c.data, c.bytes);  // rows are unpoisoned as they are handed out
  chunks_.push_back(c);
  reserved_ += c.bytes;
  next_ = c.data;
  end_ = c.data + c.bytes;
}

float* RowArena::Allocate() {
  absl::MutexLock l(&mu_);
  if (!free_.empty()) {
    float* row = free_.back();
    free_.pop_back();
    PS_UNPOISON(row, row_bytes_);
    return row;
  }
  if (static_cast<size_t>(end_ - next_) < stride_) NewChunk();
  float* row = reinterpret_cast<float*>(next_);
  next_ += stride_;
  PS_UNPOISON(row, row_bytes_);
  return row;
}

void RowArena::Free(float* row) {
  if (row == nullptr) return;
  absl::MutexLock l(&mu_);
  PS_POISON(row, row_bytes_);
  free_.push_back(row);
}

size_t RowArena::reserved_bytes() const {
  absl::MutexLock l(&mu_);
  return reserved_;
}

}  // namespace ps
