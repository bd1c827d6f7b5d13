// Cache prefetches that the compiler keeps. GCC 12 drops some __builtin_prefetch calls at -O2
// and -O3 (seen on the row index's bucket prefetch: none was emitted), so on x86-64 the
// instruction is written out.
#ifndef PS_SERVER_INTERNAL_PREFETCH_H_
#define PS_SERVER_INTERNAL_PREFETCH_H_

namespace ps {

// Fetches the cache line holding `p` for reading.
inline void PrefetchRead(const void* p) {
#if defined(__x86_64__)
  asm volatile("prefetcht0 (%0)" : : "r"(p));
#else
  __builtin_prefetch(p, 0);
#endif
}

// Fetches the cache line holding `p` to be written (prefetchw where the CPU has it; on x86-64
// it decodes as a no-op elsewhere, so prefetcht0 is used).
inline void PrefetchWrite(const void* p) {
#if defined(__x86_64__)
  asm volatile("prefetcht0 (%0)" : : "r"(p));
#else
  __builtin_prefetch(p, 1);
#endif
}

}  // namespace ps

#endif  // PS_SERVER_INTERNAL_PREFETCH_H_
