#include "common/half_block.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/half.h"

namespace ps {
namespace {

uint32_t Bits(float f) { return FloatBits(f); }

// The floats of every 251st bit pattern (NaNs, infinities, subnormals, both signs), and the
// values around fp16's edges (its largest finite, its subnormals, the ties between them).
std::vector<float> EdgeAndStrideFloats() {
  std::vector<float> v;
  for (uint64_t u = 0; u <= UINT32_MAX; u += 251) v.push_back(BitsFloat(static_cast<uint32_t>(u)));
  for (float f : {65504.0f, 65519.0f, 65520.0f, 0x1.0p-24f, 0x1.0p-25f, 0x1.8p-25f, 0x1.0p-14f,
                  1.0f + 0x1.0p-11f, 1.0f + 0x1.0p-8f}) {
    for (uint32_t d = 0; d < 64; ++d) {
      v.push_back(BitsFloat(Bits(f) + d));
      v.push_back(BitsFloat(Bits(f) - d));
      v.push_back(-BitsFloat(Bits(f) + d));
    }
  }
  return v;
}

TEST(HalfBlockTest, EncodesBitExactlyAsHalfH) {
  const std::vector<float> v = EdgeAndStrideFloats();
  for (HalfKind kind : {HalfKind::kFp16, HalfKind::kBf16}) {
    // One byte off alignment, and a length that leaves a tail after the blocks of eight.
    std::string out(1 + 2 * v.size(), '\0');
    std::vector<float> residual(v.size());
    FloatsToHalves(kind, v.data(), v.size(), out.data() + 1, residual.data());
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t want = kind == HalfKind::kFp16 ? FloatToFp16(v[i]) : FloatToBf16(v[i]);
      uint16_t got;
      std::memcpy(&got, out.data() + 1 + 2 * i, 2);
      ASSERT_EQ(got, want) << std::hex << Bits(v[i])
                           << (kind == HalfKind::kFp16 ? " fp16" : " bf16");
      const float decoded = kind == HalfKind::kFp16 ? Fp16ToFloat(want) : Bf16ToFloat(want);
      const float want_residual = v[i] - decoded;
      if (want_residual == want_residual) {
        ASSERT_EQ(Bits(residual[i]), Bits(want_residual)) << std::hex << Bits(v[i]);
      } else {
        ASSERT_NE(residual[i], residual[i]) << std::hex << Bits(v[i]);  // NaN
      }
    }
  }
}

TEST(HalfBlockTest, ResidualMayBeTheInputItself) {
  std::vector<float> v(1003);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.001f * static_cast<float>(i) - 0.3f;
  for (HalfKind kind : {HalfKind::kFp16, HalfKind::kBf16}) {
    std::vector<float> in_place = v, apart(v.size());
    std::string a(2 * v.size(), '\0'), b(2 * v.size(), '\0');
    FloatsToHalves(kind, v.data(), v.size(), a.data(), apart.data());
    FloatsToHalves(kind, in_place.data(), in_place.size(), b.data(), in_place.data());
    EXPECT_EQ(a, b);
    EXPECT_EQ(in_place, apart);
  }
}

TEST(HalfBlockTest, DecodesEveryHalfBitExactlyAsHalfH) {
  std::string in(1 + 2 * 0x10000 + 2 * 5, '\0');  // every half, then 5 more: a tail
  for (uint32_t h = 0; h < 0x10000 + 5; ++h) {
    const uint16_t x = static_cast<uint16_t>(h);
    std::memcpy(in.data() + 1 + 2 * h, &x, 2);
  }
  const size_t n = 0x10000 + 5;
  for (HalfKind kind : {HalfKind::kFp16, HalfKind::kBf16}) {
    std::vector<float> out(n);
    HalvesToFloats(kind, in.data() + 1, n, out.data());
    for (uint32_t h = 0; h < n; ++h) {
      const uint16_t x = static_cast<uint16_t>(h);
      const float want = kind == HalfKind::kFp16 ? Fp16ToFloat(x) : Bf16ToFloat(x);
      ASSERT_EQ(Bits(out[h]), Bits(want)) << std::hex << h;
    }
  }
}

}  // namespace
}  // namespace ps
