// The hand-encoded data-plane messages are the protobuf messages of parameter_server.proto:
// what we encode parses with protobuf, what protobuf serializes we decode, however gRPC cuts it
// into slices; malformed answers are errors, never reads past the buffer.
#include "client/data_plane_wire.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "client/pull_cache.h"
#include "client/push_encoder.h"
#include "client/rpc_client.h"
#include "common/half.h"
#include "common/value_codec.h"
#include "ps/v1/parameter_server.pb.h"

namespace ps {
namespace {

std::string Flatten(grpc::ByteBuffer* buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer->Dump(&slices).ok());
  std::string s;
  for (const auto& slice : slices)
    s.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  return s;
}

// `bytes` as a ByteBuffer of pieces of `piece` bytes (the last shorter).
grpc::ByteBuffer Pieces(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    slices.emplace_back(bytes.data() + at, std::min(piece, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

RequestHeader Header() {
  RequestHeader h;
  h.job_id = "job-7";
  h.worker_id = 3;
  h.request_id = 1ull << 40;
  h.clock = -1;  // negative int64: ten bytes on the wire
  h.shard_epoch = 9;
  h.lr_scale = 0.5f;
  return h;
}

struct Fixture {
  // Two tables: dim 1024 (4 KiB rows: borrowed) and dim 3 (12-byte rows: copied).
  std::vector<uint64_t> keys0{5, 6, 7, 9}, keys1{100, 2, 300};
  std::vector<float> grads0 = Iota(4 * 1024, 0.5f), grads1 = Iota(3 * 3, -4.0f);
  std::vector<TableOp> ops;
  std::vector<int> dims{1024, 3};
  // Part: keys 0,1,3 of op 0 (runs 0-1 and 3) and keys 2,0 of op 1.
  std::vector<KeySegment> segments{KeySegment{0, {0, 1, 3}, v1::CODEC_NONE, {}},
                                   KeySegment{1, {2, 0}, v1::CODEC_NONE, {}}};

  static std::vector<float> Iota(size_t n, float first) {
    std::vector<float> v(n);
    std::iota(v.begin(), v.end(), first);
    return v;
  }
  Fixture() {
    ops.push_back(TableOp{1, keys0, grads0.data(), nullptr});
    ops.push_back(TableOp{2, keys1, grads1.data(), nullptr});
  }
  void ExpectBlocks(const google::protobuf::RepeatedPtrField<v1::KeyBlock>& blocks,
                    bool with_values) const {
    ASSERT_EQ(blocks.size(), 2);
    for (int j = 0; j < 2; ++j) {
      const KeySegment& seg = segments[j];
      const TableOp& op = ops[seg.op];
      EXPECT_EQ(blocks[j].table_id(), op.table_id);
      std::string keys, values;
      for (uint32_t i : seg.idx) {
        keys.append(reinterpret_cast<const char*>(&op.keys[i]), 8);
        values.append(reinterpret_cast<const char*>(op.grads + i * dims[seg.op]),
                      dims[seg.op] * sizeof(float));
      }
      EXPECT_EQ(blocks[j].keys(), keys);
      EXPECT_EQ(blocks[j].values(), with_values ? values : "");
    }
  }
};

TEST(DataPlaneWireTest, PushRequestParsesWithProtobufAndBorrowsLargeRuns) {
  Fixture f;
  std::atomic<int> released{0};
  v1::PushRequest parsed;
  {
    grpc::ByteBuffer buffer;
    {
      wire::MessageBuilder b([&] { released++; });
      EncodePushRequest(Header(), f.ops, f.dims, f.segments, &b);
      EXPECT_TRUE(b.borrowed());  // the 8 KiB and 4 KiB runs of table 1
      buffer = b.Finish();
    }
    EXPECT_EQ(released.load(), 0);  // the buffer still points at the gradients
    ASSERT_TRUE(parsed.ParseFromString(Flatten(&buffer)));
    // gRPC sends the caller's memory: a change before the send would be sent.
    EXPECT_EQ(released.load(), 0);
  }
  EXPECT_EQ(released.load(), 1);
  EXPECT_EQ(parsed.job_id(), "job-7");
  EXPECT_EQ(parsed.worker_id(), 3u);
  EXPECT_EQ(parsed.request_id(), 1ull << 40);
  EXPECT_EQ(parsed.clock(), -1);
  EXPECT_EQ(parsed.shard_epoch(), 9u);
  EXPECT_EQ(parsed.lr_scale(), 0.5f);
  f.ExpectBlocks(parsed.blocks(), /*with_values=*/true);
}

// The fixture's segments pushed and pulled in one PushPullRequest, as protobuf parses it.
v1::PushPullRequest ExpectPushPull(const Fixture& f) {
  wire::MessageBuilder b([] {});
  EncodePushPullRequest(Header(), 4, f.ops, f.dims, f.segments, f.ops, f.dims, f.segments, &b);
  grpc::ByteBuffer buffer = b.Finish();
  v1::PushPullRequest pp;
  EXPECT_TRUE(pp.ParseFromString(Flatten(&buffer)));
  EXPECT_TRUE(pp.advance_clock());
  EXPECT_EQ(pp.clock_parts(), 4u);
  EXPECT_EQ(pp.push().request_id(), 1ull << 40);
  EXPECT_EQ(pp.push().lr_scale(), 0.5f);  // after the blocks: their lengths were right
  f.ExpectBlocks(pp.push().blocks(), /*with_values=*/true);
  f.ExpectBlocks(pp.pull_blocks(), /*with_values=*/false);
  return pp;
}

TEST(DataPlaneWireTest, PullAndPushPullRequestsParseWithProtobuf) {
  Fixture f;
  wire::MessageBuilder pull_builder(nullptr);
  EncodePullRequest(Header(), f.ops, f.dims, f.segments, &pull_builder);
  EXPECT_FALSE(pull_builder.borrowed());
  grpc::ByteBuffer pull_buffer = pull_builder.Finish();
  v1::PullRequest pull;
  ASSERT_TRUE(pull.ParseFromString(Flatten(&pull_buffer)));
  EXPECT_EQ(pull.job_id(), "job-7");
  EXPECT_EQ(pull.worker_id(), 3u);
  EXPECT_EQ(pull.clock(), -1);
  EXPECT_EQ(pull.shard_epoch(), 9u);
  f.ExpectBlocks(pull.blocks(), /*with_values=*/false);

  ExpectPushPull(f);
}

// The wire type of a field of a given declared type.
wire::WireType WireTypeOf(google::protobuf::FieldDescriptor::Type type) {
  using FD = google::protobuf::FieldDescriptor;
  switch (type) {
    case FD::TYPE_FIXED64:
    case FD::TYPE_SFIXED64:
    case FD::TYPE_DOUBLE:
      return wire::kFixed64;
    case FD::TYPE_FIXED32:
    case FD::TYPE_SFIXED32:
    case FD::TYPE_FLOAT:
      return wire::kFixed32;
    case FD::TYPE_STRING:
    case FD::TYPE_BYTES:
    case FD::TYPE_MESSAGE:
      return wire::kLengthDelimited;
    default:
      return wire::kVarint;
  }
}

// The codec writes and reads each field with the wire type of its type in the .proto (by its
// generated number; the build checks the C++ types, this the declared ones: a uint64 turned
// fixed64 keeps its C++ type).
TEST(DataPlaneWireTest, FieldsAreWrittenWithTheirDeclaredWireTypes) {
  struct Field {
    const google::protobuf::Descriptor* message;
    int number;
    wire::WireType type;
  };
  const Field fields[] = {
      {v1::KeyBlock::descriptor(), v1::KeyBlock::kTableIdFieldNumber, wire::kVarint},
      {v1::KeyBlock::descriptor(), v1::KeyBlock::kKeysFieldNumber, wire::kLengthDelimited},
      {v1::KeyBlock::descriptor(), v1::KeyBlock::kValuesFieldNumber, wire::kLengthDelimited},
      {v1::KeyBlock::descriptor(), v1::KeyBlock::kCodecFieldNumber, wire::kVarint},
      {v1::KeyBlock::descriptor(), v1::KeyBlock::kMomentumFieldNumber, wire::kFixed32},
      {v1::KeyBlock::descriptor(), v1::KeyBlock::kSinceFieldNumber, wire::kFixed64},
      {v1::KeyBlock::descriptor(), v1::KeyBlock::kDeltaFieldNumber, wire::kVarint},
      {v1::PullRequest::descriptor(), v1::PullRequest::kJobIdFieldNumber, wire::kLengthDelimited},
      {v1::PullRequest::descriptor(), v1::PullRequest::kWorkerIdFieldNumber, wire::kVarint},
      {v1::PullRequest::descriptor(), v1::PullRequest::kClockFieldNumber, wire::kVarint},
      {v1::PullRequest::descriptor(), v1::PullRequest::kShardEpochFieldNumber, wire::kVarint},
      {v1::PullRequest::descriptor(), v1::PullRequest::kBlocksFieldNumber, wire::kLengthDelimited},
      {v1::PushRequest::descriptor(), v1::PushRequest::kJobIdFieldNumber, wire::kLengthDelimited},
      {v1::PushRequest::descriptor(), v1::PushRequest::kWorkerIdFieldNumber, wire::kVarint},
      {v1::PushRequest::descriptor(), v1::PushRequest::kRequestIdFieldNumber, wire::kVarint},
      {v1::PushRequest::descriptor(), v1::PushRequest::kClockFieldNumber, wire::kVarint},
      {v1::PushRequest::descriptor(), v1::PushRequest::kShardEpochFieldNumber, wire::kVarint},
      {v1::PushRequest::descriptor(), v1::PushRequest::kBlocksFieldNumber, wire::kLengthDelimited},
      {v1::PushRequest::descriptor(), v1::PushRequest::kLrScaleFieldNumber, wire::kFixed32},
      {v1::PushPullRequest::descriptor(), v1::PushPullRequest::kPushFieldNumber,
       wire::kLengthDelimited},
      {v1::PushPullRequest::descriptor(), v1::PushPullRequest::kAdvanceClockFieldNumber,
       wire::kVarint},
      {v1::PushPullRequest::descriptor(), v1::PushPullRequest::kClockPartsFieldNumber,
       wire::kVarint},
      {v1::PushPullRequest::descriptor(), v1::PushPullRequest::kPullBlocksFieldNumber,
       wire::kLengthDelimited},
      {v1::PullResponse::descriptor(), v1::PullResponse::kBlocksFieldNumber,
       wire::kLengthDelimited},
      {v1::PullResponse::descriptor(), v1::PullResponse::kMinClockFieldNumber, wire::kVarint},
      {v1::PullResponse::descriptor(), v1::PullResponse::kWaitMicrosFieldNumber, wire::kVarint},
  };
  for (const Field& f : fields) {
    const google::protobuf::FieldDescriptor* d = f.message->FindFieldByNumber(f.number);
    ASSERT_NE(d, nullptr) << f.message->name() << " " << f.number;
    EXPECT_EQ(WireTypeOf(d->type()), f.type) << d->full_name();
    // Repeated scalars would be packed; only messages are repeated here.
    EXPECT_TRUE(!d->is_repeated() || d->type() == d->TYPE_MESSAGE) << d->full_name();
  }
}

// A push block says the momentum it applied (KeyBlock.momentum), -0 too (as protobuf writes
// it), and the lengths around it stay right: the PushPull's lr_scale after the blocks is read.
TEST(DataPlaneWireTest, PushBlocksSayTheirMomentumMinusZeroToo) {
  Fixture f;
  f.segments[0].momentum = 0.9f;
  f.segments[1].momentum = -0.0f;
  const v1::PushPullRequest pp = ExpectPushPull(f);
  ASSERT_EQ(pp.push().blocks_size(), 2);
  EXPECT_EQ(pp.push().blocks(0).momentum(), 0.9f);
  EXPECT_EQ(pp.push().blocks(1).momentum(), 0.0f);
  EXPECT_TRUE(std::signbit(pp.push().blocks(1).momentum()));
  for (const v1::KeyBlock& block : pp.pull_blocks()) {
    EXPECT_EQ(block.momentum(), 0.0f);  // pulls: never
    EXPECT_FALSE(std::signbit(block.momentum()));
  }
}

v1::PullResponse Answer(const Fixture& f) {
  v1::PullResponse r;
  for (const KeySegment& seg : f.segments) {
    v1::KeyBlock* b = r.add_blocks();
    b->set_table_id(f.ops[seg.op].table_id);
    for (uint32_t i : seg.idx) {
      for (int d = 0; d < f.dims[seg.op]; ++d) {
        const float v = 1000.0f * seg.op + 10.0f * i + 0.001f * d;
        b->mutable_values()->append(reinterpret_cast<const char*>(&v), 4);
      }
    }
  }
  r.set_min_clock(-5);
  r.set_wait_micros(1234);
  return r;
}

TEST(DataPlaneWireTest, PullAnswersAreCopiedIntoTheCallersRowsHoweverTheyAreSliced) {
  Fixture f;
  const std::string bytes = Answer(f).SerializeAsString();
  for (size_t piece : {size_t{1}, size_t{3}, size_t{7}, size_t{4096}, bytes.size()}) {
    std::vector<float> out0(4 * 1024, -1.0f), out1(3 * 3, -1.0f);
    std::vector<TableOp> ops = f.ops;
    ops[0].out = out0.data();
    ops[1].out = out1.data();
    grpc::ByteBuffer buffer = Pieces(bytes, piece);
    int64_t min_clock = 0, wait = 0;
    ASSERT_TRUE(
        DecodePullResponse(&buffer, ops, f.dims, f.segments, nullptr, &min_clock, &wait).ok())
        << piece;
    EXPECT_EQ(min_clock, -5);
    EXPECT_EQ(wait, 1234);
    for (const KeySegment& seg : f.segments) {
      float* out = seg.op == 0 ? out0.data() : out1.data();
      for (uint32_t i : seg.idx) {
        for (int d = 0; d < f.dims[seg.op]; ++d) {
          ASSERT_EQ(out[i * f.dims[seg.op] + d], 1000.0f * seg.op + 10.0f * i + 0.001f * d);
        }
      }
    }
    EXPECT_EQ(out0[2 * 1024], -1.0f);  // key index 2 of table 1 was not asked: untouched
    EXPECT_EQ(out1[1 * 3], -1.0f);
  }
}

TEST(DataPlaneWireTest, MalformedOrMismatchedAnswersAreInternalErrors) {
  Fixture f;
  std::vector<float> out0(4 * 1024), out1(3 * 3);
  std::vector<TableOp> ops = f.ops;
  ops[0].out = out0.data();
  ops[1].out = out1.data();
  auto decode = [&](const std::string& bytes) {
    grpc::ByteBuffer buffer = Pieces(bytes, 5);
    int64_t min_clock, wait;
    return DecodePullResponse(&buffer, ops, f.dims, f.segments, nullptr, &min_clock, &wait);
  };
  const v1::PullResponse good = Answer(f);
  ASSERT_TRUE(decode(good.SerializeAsString()).ok());

  const std::string bytes = good.SerializeAsString();
  // Every truncation is an error (never a read past the end).
  for (size_t n = 0; n < bytes.size(); n += 97) {
    EXPECT_EQ(decode(bytes.substr(0, n)).code(), absl::StatusCode::kInternal) << n;
  }
  v1::PullResponse fewer = good;
  fewer.mutable_blocks()->RemoveLast();
  EXPECT_EQ(decode(fewer.SerializeAsString()).code(), absl::StatusCode::kInternal);
  v1::PullResponse more = good;
  *more.add_blocks() = good.blocks(1);
  EXPECT_EQ(decode(more.SerializeAsString()).code(), absl::StatusCode::kInternal);
  v1::PullResponse short_values = good;
  short_values.mutable_blocks(1)->mutable_values()->resize(8);
  EXPECT_EQ(decode(short_values.SerializeAsString()).code(), absl::StatusCode::kInternal);
  // Garbage: a tag of field 0, an end-group wire type, a varint of eleven bytes.
  EXPECT_FALSE(decode(std::string("\x00\x01", 2)).ok());
  EXPECT_FALSE(decode("\x0c").ok());
  EXPECT_FALSE(decode(std::string(11, '\xff')).ok());
  // A length that runs past the message.
  EXPECT_FALSE(decode("\x0a\xff\xff\x03").ok());
  // Unknown fields are skipped, as protobuf does.
  std::string extended = good.SerializeAsString() + std::string("\xa0\x06\x07", 3);
  EXPECT_TRUE(decode(extended).ok());
}

float Half(float v) { return Fp16ToFloat(FloatToFp16(v)); }

// A push segment with a codec sends its encoded bytes and names the codec; a pull segment with
// one asks for it and decodes the answer into the caller's rows. Both parse with protobuf.
TEST(DataPlaneWireTest, EncodedBlocksCarryTheirCodecBothWays) {
  Fixture f;
  PushEncoder encoder;
  v1::CodecSpec fp16;
  fp16.set_codec(v1::CODEC_FP16);
  for (KeySegment& seg : f.segments) encoder.Encode(fp16, f.ops[seg.op], f.dims[seg.op], 0, &seg);
  wire::MessageBuilder b(nullptr);
  EncodePushRequest(Header(), f.ops, f.dims, f.segments, &b);
  grpc::ByteBuffer buffer = b.Finish();
  v1::PushRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(&buffer)));
  ASSERT_EQ(parsed.blocks_size(), 2);
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(parsed.blocks(j).codec(), v1::CODEC_FP16);
    EXPECT_EQ(parsed.blocks(j).values(), f.segments[j].encoded);
    EXPECT_EQ(f.segments[j].encoded.size(),
              f.segments[j].idx.size() * f.dims[f.segments[j].op] * 2);
  }

  // The answer: each segment's rows as fp16 (the grads, rounded).
  v1::PullResponse answer;
  for (const KeySegment& seg : f.segments) {
    v1::KeyBlock* block = answer.add_blocks();
    block->set_values(seg.encoded);
    block->set_codec(v1::CODEC_FP16);
  }
  std::vector<float> out0(f.grads0.size(), -1.0f), out1(f.grads1.size(), -1.0f);
  std::vector<TableOp> ops = f.ops;
  ops[0].out = out0.data();
  ops[1].out = out1.data();
  grpc::ByteBuffer response = Pieces(answer.SerializeAsString(), 7);
  int64_t min_clock, wait;
  ASSERT_TRUE(
      DecodePullResponse(&response, ops, f.dims, f.segments, nullptr, &min_clock, &wait).ok());
  for (uint32_t i : f.segments[0].idx) {
    for (int d = 0; d < 1024; ++d) EXPECT_EQ(out0[i * 1024 + d], Half(f.grads0[i * 1024 + d]));
  }
  for (uint32_t i : f.segments[1].idx) {
    for (int d = 0; d < 3; ++d) EXPECT_EQ(out1[i * 3 + d], Half(f.grads1[i * 3 + d]));
  }
  answer.mutable_blocks(1)->mutable_values()->pop_back();  // a short fp16 block
  response = Pieces(answer.SerializeAsString(), 7);
  EXPECT_EQ(
      DecodePullResponse(&response, ops, f.dims, f.segments, nullptr, &min_clock, &wait).code(),
      absl::StatusCode::kInternal);
}

// A pull segment whose rows are one run decodes straight into them; the other rows stay.
TEST(DataPlaneWireTest, AnEncodedPullOfOneRunFillsJustItsRows) {
  Fixture f;
  std::vector<KeySegment> segments{KeySegment{0, {1, 2}, v1::CODEC_INT8, {}}};
  std::vector<float> values(2 * 1024);
  for (size_t i = 0; i < values.size(); ++i) values[i] = f.grads0[1024 + i] / 4096.0f;
  v1::CodecSpec int8;
  int8.set_codec(v1::CODEC_INT8);
  v1::PullResponse answer;
  v1::KeyBlock* block = answer.add_blocks();
  EncodeValueBlock(int8, values, block->mutable_values());
  block->set_codec(v1::CODEC_INT8);
  std::vector<float> want(values.size());
  ASSERT_TRUE(DecodeValueBlock(v1::CODEC_INT8, block->values(), want.size(), want.data()).ok());
  std::vector<float> out(f.grads0.size(), -1.0f);
  std::vector<TableOp> ops = {f.ops[0]};
  ops[0].out = out.data();
  grpc::ByteBuffer response = Pieces(answer.SerializeAsString(), 7);
  int64_t min_clock, wait;
  ASSERT_TRUE(
      DecodePullResponse(&response, ops, {1024}, segments, nullptr, &min_clock, &wait).ok());
  for (size_t i = 0; i < out.size(); ++i) {
    const bool in_run = i >= 1024 && i < 3 * 1024;
    ASSERT_EQ(out[i], in_run ? want[i - 1024] : -1.0f) << i;
  }
}

// Delta pulls through DecodePullResponse and a PullCache: a whole answer is kept with its token,
// a delta answer is applied to the copy and the rows go to `out`; a bad delta block or one that
// answers a block sent without a token is an INTERNAL error that changes nothing.
TEST(DataPlaneWireTest, DeltaAnswersAreAppliedToTheClientsCopy) {
  const std::vector<uint64_t> keys = {3, 0, 2};  // rows of a dense table of 4 rows of dim 2
  std::vector<float> out(6, -1.0f);
  TableOp op;
  op.table_id = 5;
  op.keys = keys;
  op.out = out.data();
  KeySegment seg{0, {0, 1, 2}, v1::CODEC_NONE, {}};
  seg.delta = true;
  seg.num_rows = 4;
  PullCache cache;
  int64_t min_clock, wait;
  auto decode = [&](const v1::PullResponse& answer) {
    grpc::ByteBuffer response = Pieces(answer.SerializeAsString(), 5);
    return DecodePullResponse(&response, {op}, {2}, {seg}, &cache, &min_clock, &wait);
  };
  const uint64_t token = (uint64_t{77} << 32) | 9;
  v1::PullResponse whole;
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  whole.add_blocks()->set_values(std::string(reinterpret_cast<const char*>(values.data()), 24));
  whole.mutable_blocks(0)->set_since(token);
  ASSERT_TRUE(decode(whole).ok());
  EXPECT_EQ(out, values);
  EXPECT_EQ(cache.Since(op, seg, 2, 4), token);
  // A pull of fewer rows, one of them never pulled: no token.
  KeySegment some{0, {0, 2}, v1::CODEC_NONE, {}};
  EXPECT_EQ(cache.Since(op, some, 2, 4), token);
  const std::vector<uint64_t> other_keys = {1};
  TableOp other = op;
  other.keys = other_keys;
  EXPECT_EQ(cache.Since(other, KeySegment{0, {0}, v1::CODEC_NONE, {}}, 2, 4), 0u);

  seg.since = token;
  auto delta = [&](const std::vector<uint32_t>& idx, const std::vector<float>& v, size_t n = 6,
                   uint64_t answer_token = 0) {
    v1::PullResponse answer;
    v1::KeyBlock* b = answer.add_blocks();
    v1::CodecSpec none;
    std::string bytes(DeltaBlockBytes(none, idx.size()), '\0');
    EncodeDeltaBlock(none, n, idx, v, bytes.data());
    b->set_values(bytes);
    b->set_delta(true);
    b->set_since(answer_token != 0 ? answer_token : token + 1);
    return answer;
  };
  std::fill(out.begin(), out.end(), -1.0f);
  ASSERT_TRUE(decode(delta({1, 4}, {20, 50})).ok());
  EXPECT_EQ(out, (std::vector<float>{1, 20, 3, 4, 50, 6}));
  EXPECT_EQ(cache.Since(op, seg, 2, 4), token + 1);
  // Bad ones change nothing.
  std::fill(out.begin(), out.end(), -1.0f);
  EXPECT_EQ(decode(delta({6}, {1})).code(), absl::StatusCode::kInternal);     // out of range
  EXPECT_EQ(decode(delta({1}, {1}, 8)).code(), absl::StatusCode::kInternal);  // wrong n
  seg.since = 0;
  EXPECT_EQ(decode(delta({1}, {1})).code(), absl::StatusCode::kInternal);  // no token sent
  EXPECT_EQ(out, std::vector<float>(6, -1.0f));
  EXPECT_EQ(cache.Since(op, KeySegment{0, {0, 1, 2}, v1::CODEC_NONE, {}}, 2, 4), token + 1);

  // Answers of overlapping pulls, out of order: an older answer arriving after a newer one
  // gives the newer values and leaves the copy and its token as they were.
  v1::PullResponse newer = whole;
  const std::vector<float> newest = {7, 8, 9, 10, 11, 12};
  newer.mutable_blocks(0)->set_values(
      std::string(reinterpret_cast<const char*>(newest.data()), 24));
  newer.mutable_blocks(0)->set_since(token + 5);
  seg.since = 0;
  ASSERT_TRUE(decode(newer).ok());
  EXPECT_EQ(out, newest);
  seg.since = token;  // sent before `newer` arrived
  ASSERT_TRUE(decode(delta({1}, {77}, 6, token + 2)).ok());
  EXPECT_EQ(out, newest);
  seg.since = 0;
  ASSERT_TRUE(decode(whole).ok());  // the first answer (token), once more
  EXPECT_EQ(out, newest);
  EXPECT_EQ(cache.Since(op, KeySegment{0, {0, 1, 2}, v1::CODEC_NONE, {}}, 2, 4), token + 5);
  // Another server table's answer replaces the rows (they moved); a delta of the old one that
  // arrives later keeps them, and they are pulled whole next time.
  v1::PullResponse moved = newer;
  moved.mutable_blocks(0)->set_since((uint64_t{78} << 32) | 3);
  ASSERT_TRUE(decode(moved).ok());
  seg.since = token + 5;
  ASSERT_TRUE(decode(delta({1}, {77}, 6, token + 6)).ok());
  EXPECT_EQ(out, newest);
  EXPECT_EQ(cache.Since(op, KeySegment{0, {0, 1, 2}, v1::CODEC_NONE, {}}, 2, 4), 0u);
}

}  // namespace
}  // namespace ps
