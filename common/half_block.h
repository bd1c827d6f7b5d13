// Blocks of floats to and from half precision (IEEE fp16, bfloat16): the wire codecs' inner loops
// (common/value_codec.cc). Bit-exact with half.h's scalar conversions, value by value, NaN
// included; eight values at a time where the CPU has AVX2 and F16C (checked once, at run time),
// one at a time elsewhere.
#ifndef PS_COMMON_HALF_BLOCK_H_
#define PS_COMMON_HALF_BLOCK_H_

#include <cstddef>

namespace ps {

enum class HalfKind { kFp16, kBf16 };

// Writes the n halves of in[0, n) to out (2n bytes, any alignment, little-endian). With
// `residual` (room for n floats; it may be `in` itself), stores there in[i] - decoded(out[i]).
void FloatsToHalves(HalfKind kind, const float* in, size_t n, char* out, float* residual);

// Reads n halves from `in` (2n bytes, any alignment) into out[0, n).
void HalvesToFloats(HalfKind kind, const char* in, size_t n, float* out);

// Whether this process takes the eight-at-a-time paths (for the tests and benchmarks).
bool HalfBlocksVectorized();

}  // namespace ps

#endif  // PS_COMMON_HALF_BLOCK_H_
