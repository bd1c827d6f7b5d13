#include "common/half_block.h"

#include <cstdint>
#include <cstring>

#include "common/half.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define PS_HALF_BLOCK_X86 1
#endif

namespace ps {
namespace {

uint16_t ToHalf(HalfKind kind, float f) {
  return kind == HalfKind::kFp16 ? FloatToFp16(f) : FloatToBf16(f);
}

float FromHalf(HalfKind kind, uint16_t h) {
  return kind == HalfKind::kFp16 ? Fp16ToFloat(h) : Bf16ToFloat(h);
}

// One at a time, with half.h's conversions: the reference, and the tails of the wide paths.
void ToHalvesScalar(HalfKind kind, const float* in, size_t n, char* out, float* residual) {
  for (size_t i = 0; i < n; ++i) {
    const float f = in[i];
    const uint16_t h = ToHalf(kind, f);
    std::memcpy(out + i * sizeof(h), &h, sizeof(h));
    if (residual != nullptr) residual[i] = f - FromHalf(kind, h);
  }
}

void FromHalvesScalar(HalfKind kind, const char* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + i * sizeof(h), sizeof(h));
    out[i] = FromHalf(kind, h);
  }
}

#ifdef PS_HALF_BLOCK_X86

// CPUID's F16C, AVX and AVX2 bits, and the OS saving the YMM registers (XCR0). Read directly:
// clang's __builtin_cpu_supports does not know "f16c".
bool CpuHasAvx2F16c() {
  unsigned a, b, c, d;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
  const unsigned osxsave = 1u << 27, avx = 1u << 28, f16c = 1u << 29;
  if ((c & (osxsave | avx | f16c)) != (osxsave | avx | f16c)) return false;
  unsigned xcr0_low, xcr0_high;
  __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  if ((xcr0_low & 6u) != 6u) return false;  // XMM and YMM state
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  return (b & (1u << 5)) != 0;  // AVX2
}

// F16C rounds to nearest even as half.h does, subnormals and overflow included; it keeps a NaN's
// payload where half.h writes one quiet NaN, so eight values with a NaN among them go the scalar
// way (a NaN is refused anyway; this keeps the bytes identical).
__attribute__((target("avx2,f16c"))) void ToFp16Wide(const float* in, size_t n, char* out,
                                                     float* residual) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(in + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) {
      ToHalvesScalar(HalfKind::kFp16, in + i, 8, out + 2 * i,
                     residual == nullptr ? nullptr : residual + i);
      continue;
    }
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
    if (residual != nullptr) _mm256_storeu_ps(residual + i, _mm256_sub_ps(x, _mm256_cvtph_ps(h)));
  }
  ToHalvesScalar(HalfKind::kFp16, in + i, n - i, out + 2 * i,
                 residual == nullptr ? nullptr : residual + i);
}

// Halves with an all-ones exponent (Inf, NaN) go the scalar way: F16C quiets a signaling NaN.
__attribute__((target("avx2,f16c"))) void FromFp16Wide(const char* in, size_t n, float* out) {
  const __m128i exponent = _mm_set1_epi16(0x7c00);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, exponent), exponent)) != 0) {
      FromHalvesScalar(HalfKind::kFp16, in + 2 * i, 8, out + i);
      continue;
    }
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  FromHalvesScalar(HalfKind::kFp16, in + 2 * i, n - i, out + i);
}

// half.h's FloatToBf16 on eight lanes: add 0x7fff plus the lowest kept bit, keep the top 16
// bits; a NaN keeps its top bits with the quiet bit set.
__attribute__((target("avx2"))) void ToBf16Wide(const float* in, size_t n, char* out,
                                                float* residual) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  const __m256i bias = _mm256_set1_epi32(0x7fff);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i quiet = _mm256_set1_epi32(0x00400000);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(bias, lsb));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    const __m256i top =
        _mm256_srli_epi32(_mm256_blendv_epi8(rounded, _mm256_or_si256(u, quiet), nan), 16);
    const __m128i h =
        _mm_packus_epi32(_mm256_castsi256_si128(top), _mm256_extracti128_si256(top, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
    if (residual != nullptr) {
      const __m256 decoded = _mm256_castsi256_ps(_mm256_slli_epi32(top, 16));
      _mm256_storeu_ps(residual + i, _mm256_sub_ps(_mm256_castsi256_ps(u), decoded));
    }
  }
  ToHalvesScalar(HalfKind::kBf16, in + i, n - i, out + 2 * i,
                 residual == nullptr ? nullptr : residual + i);
}

__attribute__((target("avx2"))) void FromBf16Wide(const char* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    const __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(u));
  }
  FromHalvesScalar(HalfKind::kBf16, in + 2 * i, n - i, out + i);
}

#endif  // PS_HALF_BLOCK_X86

}  // namespace

bool HalfBlocksVectorized() {
#ifdef PS_HALF_BLOCK_X86
  static const bool wide = CpuHasAvx2F16c();
  return wide;
#else
  return false;
#endif
}

void FloatsToHalves(HalfKind kind, const float* in, size_t n, char* out, float* residual) {
#ifdef PS_HALF_BLOCK_X86
  if (HalfBlocksVectorized()) {
    return kind == HalfKind::kFp16 ? ToFp16Wide(in, n, out, residual)
                                   : ToBf16Wide(in, n, out, residual);
  }
#endif
  ToHalvesScalar(kind, in, n, out, residual);
}

void HalvesToFloats(HalfKind kind, const char* in, size_t n, float* out) {
#ifdef PS_HALF_BLOCK_X86
  if (HalfBlocksVectorized()) {
    return kind == HalfKind::kFp16 ? FromFp16Wide(in, n, out) : FromBf16Wide(in, n, out);
  }
#endif
  FromHalvesScalar(kind, in, n, out);
}

}  // namespace ps
