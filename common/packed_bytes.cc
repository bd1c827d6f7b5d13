#include "common/packed_bytes.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ps {

absl::Status DecodeKeys(const std::string& bytes, absl::Span<const uint64_t>* keys) {
  if (bytes.size() % sizeof(uint64_t) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("keys are ", bytes.size(), " bytes, not a multiple of 8 (packed uint64)"));
  }
  // std::string storage is suitably aligned for uint64 (operator new alignment).
  *keys = absl::MakeConstSpan(reinterpret_cast<const uint64_t*>(bytes.data()),
                              bytes.size() / sizeof(uint64_t));
  return absl::OkStatus();
}

absl::Status DecodeValues(const std::string& bytes, absl::Span<const float>* values) {
  if (bytes.size() % sizeof(float) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("values are ", bytes.size(), " bytes, not a multiple of 4 (packed float32)"));
  }
  *values = absl::MakeConstSpan(reinterpret_cast<const float*>(bytes.data()),
                                bytes.size() / sizeof(float));
  return absl::OkStatus();
}

uint32_t NonFiniteBits(const void* data, size_t n) {
  // Adding one exponent unit to a float's exponent bits carries into its sign bit only when they
  // are all ones (NaN, Inf). Integer ORs, four floats per vector operation (GCC's vector
  // extension: SSE2 on x86-64); memcpy loads, so `data` needs no alignment. A float sum of
  // x - x (the first version) cannot be vectorized without -ffast-math and ran at a quarter of
  // the speed: 15% of a server's cycles under 16 MiB pushes.
  typedef uint32_t U32x4 __attribute__((vector_size(16)));
  constexpr uint32_t kExponent = 0x7f800000u, kOne = 0x00800000u;
  const char* p = static_cast<const char*>(data);
  U32x4 bad = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    U32x4 w;
    std::memcpy(&w, p + i * sizeof(float), sizeof(w));
    bad |= (w & kExponent) + kOne;
  }
  uint32_t tail = 0;
  for (; i < n; ++i) {
    uint32_t w;
    std::memcpy(&w, p + i * sizeof(float), sizeof(w));
    tail |= (w & kExponent) + kOne;
  }
  return (bad[0] | bad[1] | bad[2] | bad[3] | tail) & 0x80000000u;
}

bool AllFinite(absl::Span<const float> values) {
  return NonFiniteBits(values.data(), values.size()) == 0;
}

}  // namespace ps
