#include "common/codec.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(CodecTest, KeysRoundTrip) {
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

TEST(CodecTest, RejectsTruncatedBytes) {
  absl::Span<const uint64_t> keys;
  absl::Status s = DecodeKeys(std::string(12, '\0'), &keys);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("multiple of 8"), std::string::npos);
  absl::Span<const float> values;
  EXPECT_EQ(DecodeValues(std::string(7, '\0'), &values).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CodecTest, AllFiniteSpotsNanAndInf) {
  std::vector<float> v(1000, 1.5f);
  EXPECT_TRUE(AllFinite(v));
  v[777] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(AllFinite(v));
  v[777] = -std::numeric_limits<float>::infinity();
  EXPECT_FALSE(AllFinite(v));
  v[777] = std::numeric_limits<float>::max();
  EXPECT_TRUE(AllFinite(v));
}

}  // namespace
}  // namespace ps
