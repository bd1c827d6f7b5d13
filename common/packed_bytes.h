// KeyBlock bytes as packed little-endian keys (uint64) and float32 values, the layout of a
// block without a value codec (the value codecs are common/value_codec.h); finiteness checks.
#ifndef PS_COMMON_PACKED_BYTES_H_
#define PS_COMMON_PACKED_BYTES_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace ps {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the wire format is little-endian; add byte swapping for this host");

// Views `bytes` as packed keys. INVALID_ARGUMENT if its length is not a multiple of 8.
absl::Status DecodeKeys(const std::string& bytes, absl::Span<const uint64_t>* keys);
// Views `bytes` as packed floats. INVALID_ARGUMENT if its length is not a multiple of 4.
absl::Status DecodeValues(const std::string& bytes, absl::Span<const float>* values);

inline void AppendKeys(absl::Span<const uint64_t> keys, std::string* out) {
  out->append(reinterpret_cast<const char*>(keys.data()), keys.size() * sizeof(uint64_t));
}
inline void AppendValues(const float* values, size_t n, std::string* out) {
  out->append(reinterpret_cast<const char*>(values), n * sizeof(float));
}

// The i-th of the packed floats at `data`, at any alignment (a pushed row read where it arrived):
// a memcpy load, which compilers turn into one (vectorizable, unaligned) load, where reading a
// misaligned `const float*` would be undefined.
inline float FloatAt(const void* data, size_t i) {
  float f;
  std::memcpy(&f, static_cast<const char*>(data) + i * sizeof(float), sizeof(f));
  return f;
}

// True if every value is finite (no NaN, no Inf).
bool AllFinite(absl::Span<const float> values);
// Non-zero if one of the `n` floats at `data` (any alignment) is a NaN or an Inf.
uint32_t NonFiniteBits(const void* data, size_t n);

}  // namespace ps

#endif  // PS_COMMON_PACKED_BYTES_H_
