// CRC-32C (Castagnoli), the checksum of checkpoint slots: Crc32c("123456789") == 0xE3069283.
#ifndef PS_SERVER_INTERNAL_CRC32C_H_
#define PS_SERVER_INTERNAL_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace ps {

// The CRC-32C of `data[0, n)` appended to data whose CRC-32C is `crc` (0 for none):
// Crc32cExtend(Crc32cExtend(0, a), b) == CRC-32C of a followed by b. Uses the SSE4.2 crc32
// instruction where the CPU has it (several GB/s), else a table. Thread-safe.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

}  // namespace ps

#endif  // PS_SERVER_INTERNAL_CRC32C_H_
