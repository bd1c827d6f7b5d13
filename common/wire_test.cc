#include "common/wire.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace ps::wire {
namespace {

TEST(WireTest, VarintsRoundTripAtEveryLength) {
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{127}, uint64_t{128}, uint64_t{300},
                     uint64_t{1} << 35, std::numeric_limits<uint64_t>::max()}) {
    std::string s;
    PutVarint(v, &s);
    EXPECT_EQ(s.size(), VarintSize(v));
    SliceReader r;
    r.Reset(s);
    uint64_t back = 0;
    ASSERT_TRUE(r.ReadVarint(&back));
    EXPECT_EQ(back, v);
    EXPECT_TRUE(r.done());
  }
}

TEST(WireTest, ReaderChecksBoundsAndLimits) {
  std::string s;
  PutLengthPrefix(2, 3, &s);
  s += "abc";
  PutVarintField(3, 42, &s);
  SliceReader r;
  r.Reset(s);
  uint32_t field;
  WireType type;
  ASSERT_TRUE(r.ReadTag(&field, &type));
  EXPECT_EQ(field, 2u);
  EXPECT_EQ(type, kLengthDelimited);
  size_t len;
  ASSERT_TRUE(r.ReadLength(&len));
  const size_t outer = r.PushLimit(len);
  std::string got;
  EXPECT_FALSE(r.ReadString(4, &got));  // past the limit
  ASSERT_TRUE(r.ReadString(3, &got));
  EXPECT_EQ(got, "abc");
  EXPECT_TRUE(r.done());
  r.PopLimit(outer);
  ASSERT_TRUE(r.ReadTag(&field, &type));
  uint64_t v;
  ASSERT_TRUE(r.ReadVarint(&v));
  EXPECT_EQ(v, 42u);
  EXPECT_FALSE(r.ReadVarint(&v));  // nothing left
  EXPECT_FALSE(r.Skip(1));
}

TEST(WireTest, BuilderCopiesSmallSpansAndBorrowsLargeOnes) {
  std::string big(MessageBuilder::kMinBorrowBytes, 'x');
  int released = 0;
  {
    MessageBuilder b([&] { ++released; });
    b.out()->append("head");
    b.Append("small", 5);
    EXPECT_FALSE(b.borrowed());
    b.Append(big.data(), big.size());
    EXPECT_TRUE(b.borrowed());
    b.out()->append("tail");
    EXPECT_EQ(b.size(), 4 + 5 + big.size() + 4);
    grpc::ByteBuffer buffer = b.Finish();
    EXPECT_EQ(buffer.Length(), 4 + 5 + big.size() + 4);
    SliceReader r;
    ASSERT_TRUE(r.Reset(&buffer));
    std::string all;
    ASSERT_TRUE(r.ReadString(r.remaining(), &all));
    EXPECT_EQ(all, "headsmall" + big + "tail");
    grpc::ByteBuffer copy = buffer;  // a copy shares the borrowed slice
    buffer.Clear();
    EXPECT_EQ(released, 0);
  }
  EXPECT_EQ(released, 1);
}

}  // namespace
}  // namespace ps::wire
