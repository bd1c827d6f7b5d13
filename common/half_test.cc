#include "common/half.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(HalfTest, Fp16RoundTripsEveryHalfExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Fp16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(f))));
      continue;
    }
    ASSERT_EQ(FloatToFp16(f), h) << std::hex << h;
  }
}

TEST(HalfTest, Fp16RoundsToNearestEven) {
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(1.0f)), 1.0f);
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(1.0f + 0x1.0p-11f)), 1.0f);  // a tie: to even
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(1.0f + 0x1.8p-11f)), 1.0f + 0x1.0p-10f);
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(65504.0f)), 65504.0f);
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(65519.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(Fp16ToFloat(FloatToFp16(65520.0f))));
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(0x1.0p-24f)), 0x1.0p-24f);  // smallest subnormal
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(0x1.0p-25f)), 0.0f);        // a tie: to even (zero)
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(0x1.8p-25f)), 0x1.0p-24f);
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(-0.3f)), -0.300048828125f);
  // Every float's half is the nearest half (checked on a sweep of magnitudes).
  for (float f = 1e-7f; f < 6e4f; f *= 1.0137f) {
    const float h = Fp16ToFloat(FloatToFp16(f));
    const float ulp = std::fabs(h) < 0x1.0p-14f ? 0x1.0p-24f : std::ldexp(1.0f, std::ilogb(h) - 10);
    ASSERT_LE(std::fabs(h - f), ulp / 2) << f;
  }
}

TEST(HalfTest, Bf16KeepsTheRangeAndRoundsToNearestEven) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToBf16(f), h) << std::hex << h;
  }
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 0x1.0p-8f)), 1.0f);  // a tie: to even
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 0x1.8p-8f)), 1.0f + 0x1.0p-7f);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-2.0f)), -2.0f);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
}

}  // namespace
}  // namespace ps
