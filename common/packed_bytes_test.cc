#include "common/packed_bytes.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(PackedBytesTest, KeysRoundTrip) {
  std::vector<uint64_t> keys = {0, 1, 42, std::numeric_limits<uint64_t>::max()};
  std::string bytes;
  AppendKeys(keys, &bytes);
  ASSERT_EQ(bytes.size(), 32u);
  absl::Span<const uint64_t> decoded;
  ASSERT_TRUE(DecodeKeys(bytes, &decoded).ok());
  EXPECT_EQ(std::vector<uint64_t>(decoded.begin(), decoded.end()), keys);
  // Little-endian on the wire: the first byte of key 1 is 1.
  EXPECT_EQ(bytes[8], 1);
}

TEST(PackedBytesTest, RejectsTruncatedBytes) {
  absl::Span<const uint64_t> keys;
  absl::Status s = DecodeKeys(std::string(12, '\0'), &keys);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("multiple of 8"), std::string::npos);
  absl::Span<const float> values;
  EXPECT_EQ(DecodeValues(std::string(7, '\0'), &values).code(), absl::StatusCode::kInvalidArgument);
}

TEST(PackedBytesTest, AllFiniteSpotsNanAndInf) {
  std::vector<float> v(1000, 1.5f);
  EXPECT_TRUE(AllFinite(v));
  v[777] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(AllFinite(v));
  v[777] = -std::numeric_limits<float>::infinity();
  EXPECT_FALSE(AllFinite(v));
  v[777] = std::numeric_limits<float>::max();
  EXPECT_TRUE(AllFinite(v));
  // Every position (vector body and tail), every special value, any alignment.
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::signaling_NaN()}) {
    for (size_t at = 0; at < 11; ++at) {
      std::vector<float> w(11, -0.0f);
      w[5] = std::numeric_limits<float>::denorm_min();
      w[at] = bad;
      EXPECT_FALSE(AllFinite(w)) << at;
      std::string bytes(1, 'x');  // misaligned by one byte
      bytes.append(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float));
      EXPECT_NE(NonFiniteBits(bytes.data() + 1, w.size()), 0u) << at;
      w[at] = -std::numeric_limits<float>::max();
      EXPECT_TRUE(AllFinite(w)) << at;
    }
  }
}

}  // namespace
}  // namespace ps
