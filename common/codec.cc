#include "common/codec.h"

#include <cmath>

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

bool AllFinite(absl::Span<const float> values) {
  // Summing x - x is 0 for finite x and NaN otherwise; vectorizes well.
  float acc = 0.0f;
  for (float v : values) acc += v - v;
  return acc == 0.0f;
}

}  // namespace ps
