#include "server/internal/bulk_allocator.h"

#include <sys/mman.h>

#include <cstdint>
#include <new>

namespace ps {
namespace {

// A header before each block says how it was obtained; 64 bytes keep any alignment.
constexpr size_t kHeader = 64;
constexpr uint64_t kMapped = 0x6d617070'65640000;  // "mapped"
constexpr uint64_t kHeap = 0x68656170'00000000;    // "heap"

}  // namespace

void* BulkAllocate(size_t bytes) {
  if (bytes < kBulkBytes) return ::operator new(bytes);
  void* p = MAP_FAILED;
#if defined(__linux__)
  p = mmap(nullptr, bytes + kHeader, PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
#endif
  uint64_t tag = kMapped;
  if (p == MAP_FAILED) {  // e.g. vm.max_map_count reached
    p = ::operator new(bytes + kHeader);
    tag = kHeap;
  }
  *static_cast<uint64_t*>(p) = tag;
  return static_cast<char*>(p) + kHeader;
}

void BulkFree(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (bytes < kBulkBytes) {
    ::operator delete(p);
    return;
  }
  char* block = static_cast<char*>(p) - kHeader;
  if (*reinterpret_cast<uint64_t*>(block) == kMapped) {
    munmap(block, bytes + kHeader);
  } else {
    ::operator delete(block);
  }
}

}  // namespace ps
