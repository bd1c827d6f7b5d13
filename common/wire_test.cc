#include "common/wire.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "ps/v1/parameter_server.pb.h"

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

// Tags and lengths are read as protobuf reads them: a fuzzer found a 6-byte tag (its value
// small) that the reader took and protobuf's parser refused. Each case is also parsed by
// protobuf, as a message whose field 2 is a varint and field 4 a string (ClockRequest's
// worker_id; CheckpointRequest's path).
TEST(WireTest, TagsAndLengthsFollowProtobufsLimits) {
  struct Case {
    std::string bytes;  // a tag of field 2 (varint), then the value 5
    bool ok;
    uint32_t field;
  };
  const Case tags[] = {
      {std::string("\x10\x05", 2), true, 2},
      {std::string("\x90\x80\x80\x80\x00\x05", 6), true, 2},       // 5 bytes, over-long
      {std::string("\x90\x80\x80\x80\x80\x00\x05", 7), false, 0},  // 6 bytes
      {std::string("\x90\x80\x80\x80\x70\x05", 6), true, 2},       // 0x70 << 28 is past 32 bits
  };
  for (const Case& c : tags) {
    SCOPED_TRACE(::testing::PrintToString(c.bytes));
    v1::ClockRequest parsed;
    EXPECT_EQ(parsed.ParseFromString(c.bytes), c.ok);
    if (c.ok) EXPECT_EQ(parsed.worker_id(), 5u);
    SliceReader r;
    r.Reset(c.bytes);
    uint32_t field = 0;
    WireType type;
    EXPECT_EQ(r.ReadTag(&field, &type), c.ok);
    if (c.ok) EXPECT_EQ(field, c.field);
  }
  struct Length {
    std::string bytes;  // a tag of field 4 (length-delimited), a length, "xyz"
    bool ok;
  };
  const Length lengths[] = {
      {std::string("\x22\x03xyz", 5), true},
      {std::string("\x22\x83\x80\x80\x80\x00xyz", 9), true},        // 5 bytes, over-long
      {std::string("\x22\x83\x80\x80\x80\x80\x00xyz", 10), false},  // 6 bytes
      {std::string("\x22\x83\x80\x80\x80\x08xyz", 9), false},       // 2 GiB + 3
  };
  for (const Length& c : lengths) {
    SCOPED_TRACE(::testing::PrintToString(c.bytes));
    v1::CheckpointRequest parsed;
    EXPECT_EQ(parsed.ParseFromString(c.bytes), c.ok);
    if (c.ok) EXPECT_EQ(parsed.path(), "xyz");
    SliceReader r;
    r.Reset(c.bytes);
    uint32_t field = 0;
    WireType type;
    ASSERT_TRUE(r.ReadTag(&field, &type));
    size_t len = 0;
    EXPECT_EQ(r.ReadLength(&len), c.ok);
    if (c.ok) EXPECT_EQ(len, 3u);
  }
}

TEST(WireTest, FloatFieldSizeIsWhatPutFloatFieldWrites) {
  for (uint32_t field : {1u, 5u, 16u, 2048u}) {
    for (float v : {0.0f, -0.0f, 0.9f, -1.5f}) {
      std::string out;
      PutFloatField(field, v, &out);
      EXPECT_EQ(FloatFieldSize(field, v), out.size()) << field << " " << v;
    }
  }
  std::string out;
  // As protobuf writes it: -0 is not the default.
  PutFloatField(v1::KeyBlock::kMomentumFieldNumber, -0.0f, &out);
  v1::KeyBlock parsed;
  ASSERT_TRUE(parsed.ParseFromString(out));
  EXPECT_TRUE(std::signbit(parsed.momentum()));
}

TEST(WireTest, Fixed64FieldsAreProtobufsAndLeaveZeroOut) {
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{7} << 32 | 5, ~uint64_t{0}}) {
    std::string out;
    PutFixed64Field(v1::KeyBlock::kSinceFieldNumber, v, &out);
    EXPECT_EQ(Fixed64FieldSize(v1::KeyBlock::kSinceFieldNumber, v), out.size()) << v;
    v1::KeyBlock want;
    want.set_since(v);
    EXPECT_EQ(out, want.SerializeAsString()) << v;
  }
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
