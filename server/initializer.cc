#include "server/initializer.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

using v1::InitializerSpec;

inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The i-th 64 random bits of a row: a counter-based generator (splitmix64 over the counter).
class RowRandom {
 public:
  RowRandom(uint64_t seed, uint32_t table_id, uint64_t key)
      : base_(Mix64(Mix64(seed ^ 0x6a09e667f3bcc909ULL) + table_id) ^ Mix64(key + 0x3c6ef372ULL)) {}
  uint64_t Bits(uint64_t i) const { return Mix64(base_ + 0x9e3779b97f4a7c15ULL * (i + 1)); }
  // Uniform in [0, 1) with 24 bits of precision (exactly representable in float).
  float Uniform(uint64_t i) const { return static_cast<float>(Bits(i) >> 40) * 0x1.0p-24f; }

 private:
  const uint64_t base_;
};

}  // namespace

absl::Status ValidateInitializer(const InitializerSpec& spec) {
  switch (spec.kind()) {
    case InitializerSpec::ZEROS:
      return absl::OkStatus();
    case InitializerSpec::CONSTANT:
      if (!std::isfinite(spec.value())) {
        return absl::InvalidArgumentError(absl::StrCat("value ", spec.value(), " is not finite"));
      }
      return absl::OkStatus();
    case InitializerSpec::UNIFORM:
      if (!std::isfinite(spec.high() - spec.low()) || spec.low() >= spec.high()) {
        return absl::InvalidArgumentError(
            absl::StrCat("uniform needs finite low < high (and high - low); got low ", spec.low(),
                         ", high ", spec.high()));
      }
      return absl::OkStatus();
    case InitializerSpec::NORMAL:
      if (!std::isfinite(spec.stddev()) || spec.stddev() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("normal needs a finite stddev >= 0; got ", spec.stddev()));
      }
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("kind ", static_cast<int>(spec.kind()), " is unknown"));
  }
}

void InitializeRow(const InitializerSpec& spec, uint32_t table_id, uint64_t key, float* out,
                   int dim) {
  const RowRandom rnd(spec.seed(), table_id, key);
  switch (spec.kind()) {
    case InitializerSpec::CONSTANT:
      for (int i = 0; i < dim; ++i) out[i] = spec.value();
      return;
    case InitializerSpec::UNIFORM: {
      const float low = spec.low();
      const float span = spec.high() - low;
      // low + span * u can round up to high; clamped to keep the interval half-open. (Computed
      // once: per value, these calls cost more than the random bits. No value is NaN, so the
      // comparison picks what fmin would.)
      const float below_high = std::nextafter(spec.high(), low);
      for (int i = 0; i < dim; ++i) {
        const float v = low + span * rnd.Uniform(i);
        out[i] = v < below_high ? v : below_high;
      }
      return;
    }
    case InitializerSpec::NORMAL:
      // Box-Muller: two uniforms per value (the second of each pair is dropped for simplicity).
      for (int i = 0; i < dim; ++i) {
        const double u1 = 1.0 - rnd.Uniform(2 * static_cast<uint64_t>(i));  // (0, 1]
        const double u2 = rnd.Uniform(2 * static_cast<uint64_t>(i) + 1);
        out[i] = static_cast<float>(spec.stddev() * std::sqrt(-2.0 * std::log(u1)) *
                                    std::cos(2.0 * M_PI * u2));
      }
      return;
    default:
      for (int i = 0; i < dim; ++i) out[i] = 0.0f;
      return;
  }
}

uint32_t InitializerStream(const v1::TableSpec& table) {
  if (table.name().empty()) return table.table_id();
  uint32_t h = 2166136261u;  // FNV-1a: stable across builds and platforms
  for (unsigned char c : table.name()) h = (h ^ c) * 16777619u;
  return h;
}

}  // namespace ps
