#include "server/initializer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

using v1::InitializerSpec;

std::vector<float> Row(const InitializerSpec& spec, uint32_t table_id, uint64_t key, int dim) {
  std::vector<float> out(dim + 1, -777.0f);
  InitializeRow(spec, table_id, key, out.data(), dim);
  EXPECT_EQ(out.back(), -777.0f) << "wrote past the row";
  out.pop_back();
  return out;
}

InitializerSpec Uniform(float low, float high, uint64_t seed) {
  InitializerSpec spec;
  spec.set_kind(InitializerSpec::UNIFORM);
  spec.set_low(low);
  spec.set_high(high);
  spec.set_seed(seed);
  return spec;
}

InitializerSpec Normal(float stddev, uint64_t seed) {
  InitializerSpec spec;
  spec.set_kind(InitializerSpec::NORMAL);
  spec.set_stddev(stddev);
  spec.set_seed(seed);
  return spec;
}

TEST(InitializerTest, ZerosAndConstant) {
  InitializerSpec spec;  // ZEROS
  ASSERT_TRUE(ValidateInitializer(spec).ok());
  EXPECT_EQ(Row(spec, 1, 5, 4), std::vector<float>(4, 0.0f));
  spec.set_kind(InitializerSpec::CONSTANT);
  spec.set_value(-2.5f);
  ASSERT_TRUE(ValidateInitializer(spec).ok());
  EXPECT_EQ(Row(spec, 1, 5, 3), std::vector<float>(3, -2.5f));
}

TEST(InitializerTest, SameSpecTableAndKeyGiveTheSameValues) {
  for (const InitializerSpec& spec : {Uniform(-1, 1, 42), Normal(0.5f, 42)}) {
    SCOPED_TRACE(spec.ShortDebugString());
    const std::vector<float> a = Row(spec, 3, 123456789, 64);
    EXPECT_EQ(Row(spec, 3, 123456789, 64), a);
    // A copy of the spec (another server) agrees too.
    InitializerSpec copy;
    copy.CopyFrom(spec);
    EXPECT_EQ(Row(copy, 3, 123456789, 64), a);
    // A shorter row is a prefix of a longer one: value i depends only on i.
    const std::vector<float> prefix = Row(spec, 3, 123456789, 10);
    EXPECT_EQ(prefix, std::vector<float>(a.begin(), a.begin() + 10));
  }
}

TEST(InitializerTest, AnotherKeyTableOrSeedGivesOtherValues) {
  for (const InitializerSpec& spec : {Uniform(-1, 1, 42), Normal(0.5f, 42)}) {
    SCOPED_TRACE(spec.ShortDebugString());
    const std::vector<float> a = Row(spec, 3, 100, 16);
    EXPECT_NE(Row(spec, 3, 101, 16), a);
    EXPECT_NE(Row(spec, 4, 100, 16), a);
    InitializerSpec reseeded = spec;
    reseeded.set_seed(43);
    EXPECT_NE(Row(reseeded, 3, 100, 16), a);
    // Within one row the values differ from each other as well.
    int equal_neighbours = 0;
    for (size_t i = 1; i < a.size(); ++i) equal_neighbours += a[i] == a[i - 1];
    EXPECT_EQ(equal_neighbours, 0);
  }
}

TEST(InitializerTest, UniformStaysInLowHighAndCoversIt) {
  const InitializerSpec spec = Uniform(-0.25f, 0.75f, 7);
  ASSERT_TRUE(ValidateInitializer(spec).ok());
  double sum = 0;
  float lo = 1, hi = 0;
  int n = 0;
  for (uint64_t key = 0; key < 200; ++key) {
    for (float v : Row(spec, 9, key, 50)) {
      ASSERT_GE(v, -0.25f);
      ASSERT_LT(v, 0.75f);
      sum += v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      ++n;
    }
  }
  // 10000 values: the mean is within a few standard errors (0.0029) of 0.25, and the extremes
  // come near both ends. Loose bounds; the generator is deterministic.
  EXPECT_NEAR(sum / n, 0.25, 0.02);
  EXPECT_LT(lo, -0.24f);
  EXPECT_GT(hi, 0.74f);
}

// low + (high - low) * u rounds up to exactly `high` for u close to 1 (found by a search over
// keys: seed 7, table 1, key 1718590, value 12 has u = 1 - 2^-24).
TEST(InitializerTest, UniformNeverReturnsHighEvenWhenTheSumRoundsUp) {
  for (auto [low, high] : {std::pair<float, float>{1.0f, 3.0f}, {0.1f, 0.3f}}) {
    const std::vector<float> row = Row(Uniform(low, high, 7), 1, 1718590, 16);
    for (float v : row) {
      EXPECT_GE(v, low);
      EXPECT_LT(v, high);
    }
    EXPECT_EQ(row[12], std::nextafter(high, low));  // the largest float below high
  }
}

// Rows are created wherever a key is first used, by whichever server version: the values of a
// (seed, table, key) must not change. Pinned from the release before the uniform loop was made
// faster (it computed nextafter and fmin per value).
TEST(InitializerTest, UniformValuesArePinned) {
  EXPECT_EQ(Row(Uniform(-0.1f, 0.1f, 7), 3, 42, 4),
            (std::vector<float>{0x1.88e066p-4f, -0x1.4aa406p-5f, -0x1.cbbecp-5f, -0x1.eb0d3p-6f}));
}

TEST(InitializerTest, NormalHasRoughlyTheRequestedMeanAndStddev) {
  const InitializerSpec spec = Normal(0.1f, 11);
  ASSERT_TRUE(ValidateInitializer(spec).ok());
  double sum = 0, sum_sq = 0;
  int n = 0, beyond_3_sigma = 0;
  for (uint64_t key = 0; key < 100; ++key) {
    for (float v : Row(spec, 2, key * 7919, 100)) {
      ASSERT_TRUE(std::isfinite(v));
      sum += v;
      sum_sq += static_cast<double>(v) * v;
      beyond_3_sigma += std::abs(v) > 0.3f;
      ++n;
    }
  }
  const double mean = sum / n;
  const double stddev = std::sqrt(sum_sq / n - mean * mean);
  // 10000 values: standard error of the mean 0.001, of the stddev ~0.0007. Bounds are 5x that.
  EXPECT_NEAR(mean, 0.0, 0.005);
  EXPECT_NEAR(stddev, 0.1, 0.005);
  // About 0.27% of a normal lies beyond 3 sigma: some, but few.
  EXPECT_GT(beyond_3_sigma, 0);
  EXPECT_LT(beyond_3_sigma, 100);
}

TEST(InitializerTest, NormalWithZeroStddevIsZero) {
  const InitializerSpec spec = Normal(0.0f, 1);
  ASSERT_TRUE(ValidateInitializer(spec).ok());
  for (float v : Row(spec, 1, 1, 32)) EXPECT_EQ(v, 0.0f);
}

TEST(InitializerTest, ValidateRejectsBadSpecs) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float big = std::numeric_limits<float>::max();
  InitializerSpec constant_nan;
  constant_nan.set_kind(InitializerSpec::CONSTANT);
  constant_nan.set_value(nan);
  InitializerSpec constant_inf = constant_nan;
  constant_inf.set_value(-inf);
  InitializerSpec unknown;
  unknown.set_kind(static_cast<InitializerSpec::Kind>(9));
  struct Case {
    std::string name;
    InitializerSpec spec;
    std::string want;  // in the message
  };
  const std::vector<Case> cases = {
      {"constant NaN", constant_nan, "value"},
      {"constant -Inf", constant_inf, "value"},
      {"uniform low == high", Uniform(1, 1, 0), "low < high"},
      {"uniform low > high", Uniform(2, 1, 0), "low < high"},
      {"uniform NaN low", Uniform(nan, 1, 0), "low"},
      {"uniform Inf high", Uniform(0, inf, 0), "high"},
      // Both ends finite but high - low overflows: every value would be Inf or NaN.
      {"uniform span overflows", Uniform(-big, big, 0), "high - low"},
      {"normal negative stddev", Normal(-0.1f, 0), "stddev"},
      {"normal NaN stddev", Normal(nan, 0), "stddev"},
      {"normal Inf stddev", Normal(inf, 0), "stddev"},
      {"unknown kind", unknown, "kind 9"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const absl::Status s = ValidateInitializer(c.spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(c.want), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// Two jobs' tables of the same name (other ids) start from the same rows; other names, or
// unnamed tables with other ids, from other rows.
TEST(InitializerTest, StreamFollowsTheTableNameNotItsId) {
  v1::TableSpec a, b, c, unnamed1, unnamed2;
  a.set_table_id(1001);
  a.set_name("weights0");
  b.set_table_id(2001);
  b.set_name("weights0");
  c.set_table_id(1001);
  c.set_name("weights1");
  unnamed1.set_table_id(7);
  unnamed2.set_table_id(8);
  EXPECT_EQ(InitializerStream(a), InitializerStream(b));
  EXPECT_NE(InitializerStream(a), InitializerStream(c));
  EXPECT_EQ(InitializerStream(unnamed1), 7u);
  EXPECT_NE(InitializerStream(unnamed1), InitializerStream(unnamed2));
}

}  // namespace
}  // namespace ps
