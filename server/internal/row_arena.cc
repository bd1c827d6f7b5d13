#include "server/internal/row_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <new>

namespace ps {
namespace {

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// `bytes` (a multiple of kHugeChunkBytes) aligned to kHugeChunkBytes and marked for huge pages;
// null if the system refuses a mapping.
char* MapHuge(size_t bytes) {
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
  madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);  // a hint: may be refused
#endif
  return reinterpret_cast<char*>(aligned);
#else
  (void)bytes;
  return nullptr;
#endif
}

}  // namespace

RowArena::RowArena(size_t row_floats)
    : stride_([&] {
        const size_t bytes = std::max<size_t>(row_floats, 1) * sizeof(float);
        return bytes % 64 == 0 ? bytes : RoundUp(bytes, 16);
      }()) {}

RowArena::~RowArena() {
  absl::MutexLock l(&mu_);
  for (const Chunk& c : chunks_) {
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
    c.data = MapHuge(c.bytes);
    c.mapped = c.data != nullptr;
  }
  if (c.data == nullptr) {  // small, or no mapping to be had (e.g. vm.max_map_count reached)
    c.data = static_cast<char*>(::operator new (c.bytes, std::align_val_t{64}));
  }
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
    return row;
  }
  if (static_cast<size_t>(end_ - next_) < stride_) NewChunk();
  float* row = reinterpret_cast<float*>(next_);
  next_ += stride_;
  return row;
}

void RowArena::Free(float* row) {
  if (row == nullptr) return;
  absl::MutexLock l(&mu_);
  free_.push_back(row);
}

size_t RowArena::reserved_bytes() const {
  absl::MutexLock l(&mu_);
  return reserved_;
}

}  // namespace ps
