// Pushes read in place are the protobuf messages: every field as protobuf parses it, the values
// the bytes sent, however gRPC cut the request into slices; a truncated or malformed request is
// INVALID_ARGUMENT at every length, never a read past the buffer.
#include "server/internal/push_request.h"

#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

namespace ps {
namespace {

grpc::ByteBuffer Pieces(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    slices.emplace_back(bytes.data() + at, std::min(piece, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Values(const ScatteredValues& v) {
  std::string s(v.bytes(), '\0');
  v.CopyTo(s.data());
  return s;
}

v1::PushRequest Request() {
  v1::PushRequest req;
  req.set_job_id("job-7");
  req.set_worker_id(3);
  req.set_request_id(1ull << 40);
  req.set_clock(-1);
  req.set_shard_epoch(9);
  req.set_lr_scale(0.5f);
  for (uint32_t t : {1u, 2u}) {
    v1::KeyBlock* b = req.add_blocks();
    b->set_table_id(t);
    std::vector<uint64_t> keys{5, 6, 7 + t};
    b->set_keys(std::string(reinterpret_cast<const char*>(keys.data()), 24));
    std::vector<float> grads(3 * 100 * t);
    std::iota(grads.begin(), grads.end(), 0.25f * t);
    b->set_values(std::string(reinterpret_cast<const char*>(grads.data()), grads.size() * 4));
    if (t == 2) {  // the codec fields (the reader does not decode values)
      b->set_codec(v1::CODEC_TOPK);
      b->set_momentum(0.9f);
    }
  }
  return req;
}

// What protobuf parsed, with the in-place values put back into the blocks.
v1::PushRequest WithValues(v1::PushRequest req, const std::deque<ScatteredValues>& values) {
  EXPECT_EQ(values.size(), static_cast<size_t>(req.blocks_size()));
  for (int i = 0; i < req.blocks_size(); ++i) {
    EXPECT_TRUE(req.blocks(i).values().empty());
    req.mutable_blocks(i)->set_values(Values(values[i]));
  }
  return req;
}

TEST(PushRequestTest, ReadsWhatProtobufWritesHoweverItIsSliced) {
  const v1::PushRequest sent = Request();
  const std::string bytes = sent.SerializeAsString();
  for (size_t piece : {size_t{1}, size_t{3}, size_t{7}, size_t{4096}, bytes.size()}) {
    grpc::ByteBuffer buffer = Pieces(bytes, piece);
    wire::SliceReader reader;
    ASSERT_TRUE(reader.Reset(&buffer));
    v1::PushRequest got;
    std::deque<ScatteredValues> values;
    ASSERT_TRUE(ReadPushRequest(&reader, &got, &values).ok()) << piece;
    EXPECT_EQ(WithValues(got, values).SerializeAsString(), bytes) << piece;
  }
}

TEST(PushRequestTest, PushPullMergesRepeatedPushFieldsAndSkipsUnknownOnes) {
  v1::PushPullRequest sent;
  *sent.mutable_push() = Request();
  sent.set_advance_clock(true);
  sent.set_clock_parts(4);
  sent.add_pull_blocks()->set_table_id(2);
  sent.mutable_pull_blocks(0)->set_keys(std::string(8, '\1'));
  // A second occurrence of `push` (protobuf merges it into the first), an unknown field, and a
  // known field number with the wrong wire type (also unknown to protobuf).
  v1::PushPullRequest second;
  v1::KeyBlock* extra = second.mutable_push()->add_blocks();
  extra->set_table_id(9);
  extra->set_values("abcd");
  second.mutable_push()->set_worker_id(4);
  std::string bytes = sent.SerializeAsString() + second.SerializeAsString();
  bytes += std::string("\x98\x06\x01", 3);          // field 99, varint 1
  bytes += std::string("\x15\x01\x02\x03\x04", 5);  // field 2 as fixed32
  v1::PushPullRequest expect;
  ASSERT_TRUE(expect.ParseFromString(bytes));
  ASSERT_EQ(expect.push().blocks_size(), 3);
  for (size_t piece : {size_t{1}, size_t{5}, bytes.size()}) {
    grpc::ByteBuffer buffer = Pieces(bytes, piece);
    wire::SliceReader reader;
    ASSERT_TRUE(reader.Reset(&buffer));
    v1::PushPullRequest got;
    std::deque<ScatteredValues> values;
    ASSERT_TRUE(ReadPushPullRequest(&reader, &got, &values).ok()) << piece;
    *got.mutable_push() = WithValues(got.push(), values);
    expect.DiscardUnknownFields();
    EXPECT_EQ(got.SerializeAsString(), expect.SerializeAsString()) << piece;
    EXPECT_EQ(got.push().worker_id(), 4u);
    EXPECT_TRUE(got.advance_clock());
  }
}

TEST(PushRequestTest, TruncatedOrMalformedRequestsAreInvalidArgument) {
  const std::string bytes = Request().SerializeAsString();
  v1::PushRequest probe;
  for (size_t len = 1; len < bytes.size(); ++len) {
    const std::string cut = bytes.substr(0, len);
    if (probe.ParseFromString(cut)) continue;  // a cut between fields is a valid message
    grpc::ByteBuffer buffer = Pieces(cut, 5);
    wire::SliceReader reader;
    ASSERT_TRUE(reader.Reset(&buffer));
    v1::PushRequest got;
    std::deque<ScatteredValues> values;
    const absl::Status s = ReadPushRequest(&reader, &got, &values);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << len;
    EXPECT_NE(s.message().find("malformed ps.v1.PushRequest"), std::string::npos) << s;
  }
  for (const std::string& bad : {std::string("\x07", 1),
                                 std::string("\x0a\x05"
                                             "ab",
                                             4),
                                 std::string("\x32\x03\x1a\x09"
                                             "x",
                                             5),
                                 std::string("\x0a\x02\xc3\xa9", 4)}) {
    grpc::ByteBuffer buffer = Pieces(bad, 2);
    wire::SliceReader reader;
    ASSERT_TRUE(reader.Reset(&buffer));
    v1::PushRequest got;
    std::deque<ScatteredValues> values;
    EXPECT_EQ(ReadPushRequest(&reader, &got, &values).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(PushRequestTest, TinyPiecesAreCoalescedNormalOnesLeftInPlace) {
  const std::string bytes = Request().SerializeAsString();  // about 3.7 KiB
  auto count = [](grpc::ByteBuffer* b) {
    std::vector<grpc::Slice> slices;
    EXPECT_TRUE(b->Dump(&slices).ok());
    return slices.size();
  };
  grpc::ByteBuffer tiny = Pieces(bytes, 7);  // hundreds of 7-byte pieces
  ASSERT_GT(count(&tiny), 64u);
  ASSERT_TRUE(CoalesceIfFragmented(&tiny));
  EXPECT_EQ(count(&tiny), 1u);
  wire::SliceReader reader;
  ASSERT_TRUE(reader.Reset(&tiny));
  v1::PushRequest got;
  std::deque<ScatteredValues> values;
  ASSERT_TRUE(ReadPushRequest(&reader, &got, &values).ok());
  EXPECT_EQ(WithValues(got, values).SerializeAsString(), bytes);
  grpc::ByteBuffer few = Pieces(bytes, 100);  // 38 pieces: left alone
  ASSERT_TRUE(CoalesceIfFragmented(&few));
  EXPECT_EQ(count(&few), (bytes.size() + 99) / 100);
}

// The reader takes each field with the wire type of its declared type (KeyBlock's fields:
// PullAnswerTest.WireTypesAreTheDeclaredOnes); the static_asserts beside it check the C++ types.
TEST(PushRequestTest, WireTypesAreTheDeclaredOnes) {
  using google::protobuf::FieldDescriptor;
  const auto type = [](const google::protobuf::Descriptor* d, int number) {
    const FieldDescriptor* f = d->FindFieldByNumber(number);
    return f == nullptr ? FieldDescriptor::Type(0) : f->type();
  };
  const google::protobuf::Descriptor* push = v1::PushRequest::descriptor();
  EXPECT_EQ(type(push, v1::PushRequest::kJobIdFieldNumber), FieldDescriptor::TYPE_STRING);
  EXPECT_EQ(type(push, v1::PushRequest::kWorkerIdFieldNumber), FieldDescriptor::TYPE_UINT32);
  EXPECT_EQ(type(push, v1::PushRequest::kRequestIdFieldNumber), FieldDescriptor::TYPE_UINT64);
  EXPECT_EQ(type(push, v1::PushRequest::kClockFieldNumber), FieldDescriptor::TYPE_INT64);
  EXPECT_EQ(type(push, v1::PushRequest::kShardEpochFieldNumber), FieldDescriptor::TYPE_UINT64);
  EXPECT_EQ(type(push, v1::PushRequest::kBlocksFieldNumber), FieldDescriptor::TYPE_MESSAGE);
  EXPECT_EQ(type(push, v1::PushRequest::kLrScaleFieldNumber), FieldDescriptor::TYPE_FLOAT);
  const google::protobuf::Descriptor* push_pull = v1::PushPullRequest::descriptor();
  EXPECT_EQ(type(push_pull, v1::PushPullRequest::kPushFieldNumber), FieldDescriptor::TYPE_MESSAGE);
  EXPECT_EQ(type(push_pull, v1::PushPullRequest::kAdvanceClockFieldNumber),
            FieldDescriptor::TYPE_BOOL);
  EXPECT_EQ(type(push_pull, v1::PushPullRequest::kClockPartsFieldNumber),
            FieldDescriptor::TYPE_UINT32);
  EXPECT_EQ(type(push_pull, v1::PushPullRequest::kPullBlocksFieldNumber),
            FieldDescriptor::TYPE_MESSAGE);
  const google::protobuf::Descriptor* answer = v1::PushResponse::descriptor();
  EXPECT_EQ(type(answer, v1::PushResponse::kDuplicateFieldNumber), FieldDescriptor::TYPE_BOOL);
}

}  // namespace
}  // namespace ps
