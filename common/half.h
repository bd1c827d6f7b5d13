// Half-precision floats (IEEE fp16 and bfloat16) to and from float32, bit-exact and portable
// (no F16C or AVX-512 instructions needed): rows stored in half precision, values on the wire.
#ifndef PS_COMMON_HALF_H_
#define PS_COMMON_HALF_H_

#include <cstdint>
#include <cstring>

namespace ps {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// float32 -> bfloat16, rounded to nearest (ties to even). NaN stays NaN (quiet).
inline uint16_t FloatToBf16(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

inline float Bf16ToFloat(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

// float32 -> IEEE half, rounded to nearest (ties to even); beyond 65504 rounds to +-Inf as IEEE
// does, below 2^-24 to a signed zero, with subnormals in between. NaN stays NaN (quiet).
inline uint16_t FloatToFp16(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: Inf
  if (abs >= 0x38800000u) {                       // normal half (>= 2^-14)
    // Rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits.
    const uint32_t rounding = 0xfffu + ((abs >> 13) & 1u);
    return sign | static_cast<uint16_t>((abs - 0x38000000u + rounding) >> 13);
  }
  if (abs < 0x33000000u) return sign;  // below half of the smallest subnormal (2^-25): zero
  // Subnormal half: the value in units of 2^-24, rounded to nearest even.
  const uint32_t exponent = abs >> 23;  // 102..112
  const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - exponent;  // 14..24
  uint32_t half = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u);
  const uint32_t midpoint = 1u << (shift - 1u);
  if (rest > midpoint || (rest == midpoint && (half & 1u))) ++half;
  return sign | static_cast<uint16_t>(half);
}

inline float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return BitsFloat(sign | 0x7f800000u | (mantissa << 13));  // Inf, NaN
  if (exponent != 0) return BitsFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return BitsFloat(sign);
  // Subnormal: mantissa x 2^-24, exact in float32.
  const float magnitude = static_cast<float>(mantissa) * 0x1.0p-24f;
  return sign != 0 ? -magnitude : magnitude;
}

}  // namespace ps

#endif  // PS_COMMON_HALF_H_
