// Tables with a push_codec or pull_codec (common/value_codec.h) through a real server and a plain
// protobuf stub: encoded blocks are decoded before they apply, pulls answer encoded, and a block
// in the wrong encoding or a corrupted one is refused with nothing applied.
#include <grpcpp/grpcpp.h>

#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/half.h"
#include "common/testing/key_blocks.h"
#include "common/value_codec.h"
#include "gtest/gtest.h"
#include "ps/v1/parameter_server.grpc.pb.h"
#include "server/parameter_server.h"
#include "server/testing/service_fixture.h"

namespace ps::parameter_service_codec_test {
namespace {

using testing::Block;
using testing::CallContext;
using testing::Floats;
using v1::KeyBlock;

constexpr char kJob[] = "job";
constexpr uint32_t kFp16 = 1;    // DENSE dim 4, 8 rows of 0.25, sgd lr 1; fp16 both ways
constexpr uint32_t kTopk = 2;    // the same, pushes topk 0.25
constexpr uint32_t kSign = 3;    // the same, pushes sign
constexpr uint32_t kSparse = 4;  // SPARSE dim 2, bf16 both ways
const std::vector<uint64_t> kRows = {0, 1, 2, 3, 4, 5, 6, 7};

v1::CodecSpec Codec(v1::ValueCodec codec, float ratio = 0) {
  v1::CodecSpec c;
  c.set_codec(codec);
  c.set_ratio(ratio);
  return c;
}

v1::TableSpec Spec(uint32_t id, v1::TableKind kind, v1::CodecSpec push, v1::CodecSpec pull) {
  v1::TableSpec spec;
  spec.set_table_id(id);
  spec.set_job_id(kJob);
  spec.set_kind(kind);
  spec.set_dim(kind == v1::DENSE ? 4 : 2);
  if (kind == v1::DENSE) spec.set_num_rows(8);
  spec.mutable_initializer()->set_kind(v1::InitializerSpec::CONSTANT);
  spec.mutable_initializer()->set_value(0.25f);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  *spec.mutable_push_codec() = push;
  *spec.mutable_pull_codec() = pull;
  return spec;
}

// A dense table with delta set on its push_codec or its pull_codec.
v1::TableSpec Delta(uint32_t id, bool push, bool sparse) {
  v1::TableSpec spec = Spec(id, sparse ? v1::SPARSE : v1::DENSE, {}, {});
  (push ? spec.mutable_push_codec() : spec.mutable_pull_codec())->set_delta(true);
  return spec;
}

// A block of `keys` whose values are `values` encoded with `codec`.
KeyBlock Encoded(uint32_t table, const std::vector<uint64_t>& keys, const v1::CodecSpec& codec,
                 const std::vector<float>& values) {
  KeyBlock b = Block(table, keys);
  EncodeValueBlock(codec, values, b.mutable_values());
  b.set_codec(codec.codec());
  return b;
}

class ParameterServiceCodecTest : public testing::ServiceFixture {
 protected:
  void SetUp() override {
    ParameterServerOptions options;
    options.max_pull_wait = absl::Seconds(10);
    ASSERT_NO_FATAL_FAILURE(StartServer(options));
    v1::ConfigureJobRequest req;
    req.set_job_id(kJob);
    req.mutable_consistency()->set_mode(v1::ConsistencySpec::ASYNC);
    req.add_worker_ids(1);
    req.set_membership_epoch(1);
    v1::ConfigureJobResponse resp;
    CallContext c;
    ASSERT_TRUE(stub_->ConfigureJob(&c.ctx, req, &resp).ok());
    const v1::CodecSpec fp16 = Codec(v1::CODEC_FP16), bf16 = Codec(v1::CODEC_BF16);
    ASSERT_TRUE(CreateTable(Spec(kFp16, v1::DENSE, fp16, fp16)).ok());
    ASSERT_TRUE(CreateTable(Spec(kTopk, v1::DENSE, Codec(v1::CODEC_TOPK, 0.25f), {})).ok());
    ASSERT_TRUE(CreateTable(Spec(kSign, v1::DENSE, Codec(v1::CODEC_SIGN), {})).ok());
    ASSERT_TRUE(CreateTable(Spec(kSparse, v1::SPARSE, bf16, bf16)).ok());
  }
  grpc::Status Push(const KeyBlock& block) { return Push(std::vector<KeyBlock>{block}); }
  grpc::Status Push(const std::vector<KeyBlock>& blocks, uint64_t request_id = 0,
                    bool* duplicate = nullptr) {
    v1::PushRequest req;
    req.set_job_id(kJob);
    req.set_worker_id(1);
    req.set_request_id(request_id != 0 ? request_id : ++request_id_);
    for (const KeyBlock& block : blocks) *req.add_blocks() = block;
    v1::PushResponse resp;
    CallContext c;
    const grpc::Status s = stub_->Push(&c.ctx, req, &resp);
    if (duplicate != nullptr) *duplicate = resp.duplicate();
    return s;
  }
  // The table's push bytes as this server counted them: float32, encoded.
  std::pair<uint64_t, uint64_t> PushBytes(uint32_t table) {
    v1::DescribeTableRequest req;
    req.set_table_id(table);
    v1::DescribeTableResponse resp;
    CallContext c;
    const grpc::Status s = stub_->DescribeTable(&c.ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return {resp.stats().push_raw_bytes(), resp.stats().push_wire_bytes()};
  }
  grpc::Status Pull(const KeyBlock& block, v1::PullResponse* resp) {
    v1::PullRequest req;
    req.set_job_id(kJob);
    req.set_worker_id(1);
    *req.add_blocks() = block;
    CallContext c;
    return stub_->Pull(&c.ctx, req, resp);
  }
  // The table's values, pulled in the table's pull codec and decoded.
  std::vector<float> Values(uint32_t table, const std::vector<uint64_t>& keys,
                            v1::ValueCodec codec = v1::CODEC_NONE) {
    KeyBlock b = Block(table, keys);
    b.set_codec(codec);
    v1::PullResponse resp;
    const grpc::Status s = Pull(b, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    if (!s.ok() || resp.blocks_size() != 1) return {};
    EXPECT_EQ(resp.blocks(0).codec(), codec);
    std::vector<float> out(keys.size() * (table == kSparse ? 2 : 4));
    EXPECT_TRUE(DecodeValueBlock(codec, resp.blocks(0).values(), out.size(), out.data()).ok());
    return out;
  }
  // Every stored value (also proves the server still serves).
  std::vector<float> Snapshot() {
    std::vector<float> all = Values(kFp16, kRows, v1::CODEC_FP16);
    for (uint32_t t : {kTopk, kSign}) {
      for (float v : Values(t, kRows)) all.push_back(v);
    }
    for (float v : Values(kSparse, {5, 6}, v1::CODEC_BF16)) all.push_back(v);
    return all;
  }

  uint64_t request_id_ = 0;
};

TEST_F(ParameterServiceCodecTest, Fp16PushesAreDecodedAndPullsAnswerFp16) {
  std::vector<float> g(8);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.001f * static_cast<float>(i + 1) - 0.003f;
  ASSERT_TRUE(Push(Encoded(kFp16, {2, 5}, Codec(v1::CODEC_FP16), g)).ok());
  const std::vector<float> got = Values(kFp16, {2, 5}, v1::CODEC_FP16);
  ASSERT_EQ(got.size(), 8u);
  for (size_t i = 0; i < g.size(); ++i) {
    const float applied = 0.25f - Fp16ToFloat(FloatToFp16(g[i]));
    EXPECT_EQ(got[i], Fp16ToFloat(FloatToFp16(applied))) << i;
  }
}

TEST_F(ParameterServiceCodecTest, Bf16SparsePushesAndPulls) {
  ASSERT_TRUE(Push(Encoded(kSparse, {5, 6}, Codec(v1::CODEC_BF16), {1, 2, 3, 4})).ok());
  EXPECT_EQ(Values(kSparse, {5, 6}, v1::CODEC_BF16),
            (std::vector<float>{-0.75f, -1.75f, -2.75f, -3.75f}));
}

TEST_F(ParameterServiceCodecTest, TopkAndSignPushesApplyWhatWasSent) {
  std::vector<float> g(8, 0.0f);
  g[1] = -2.0f;
  g[6] = 1.0f;
  g[7] = 0.5f;
  ASSERT_TRUE(Push(Encoded(kTopk, {3, 4}, Codec(v1::CODEC_TOPK, 0.25f), g)).ok());  // k = 2
  std::vector<float> want(8, 0.25f);
  want[1] = 2.25f;
  want[6] = -0.75f;
  EXPECT_EQ(Values(kTopk, {3, 4}), want);

  const std::vector<float> s = {1, -1, 3, -3};  // mean |g| = 2
  ASSERT_TRUE(Push(Encoded(kSign, {0}, Codec(v1::CODEC_SIGN), s)).ok());
  EXPECT_EQ(Values(kSign, {0}), (std::vector<float>{-1.75f, 2.25f, -1.75f, 2.25f}));
}

TEST_F(ParameterServiceCodecTest, Int8PullsAnswerAByteAValueDenseAndSparse) {
  constexpr uint32_t kInt8Dense = 5, kInt8Sparse = 6;
  ASSERT_TRUE(CreateTable(Spec(kInt8Dense, v1::DENSE, {}, Codec(v1::CODEC_INT8))).ok());
  ASSERT_TRUE(CreateTable(Spec(kInt8Sparse, v1::SPARSE, {}, Codec(v1::CODEC_INT8))).ok());
  const std::vector<float> g = {0.5f, -1.0f, 0.01f, 0.0f, -0.3f, 0.2f, 0.125f, 1.0f};
  KeyBlock dense = Block(kInt8Dense, {2, 5});
  dense.set_values(std::string(reinterpret_cast<const char*>(g.data()), g.size() * 4));
  ASSERT_TRUE(Push(dense).ok());  // float32 pushes (no push_codec)
  KeyBlock sparse = Block(kInt8Sparse, {9, 10, 11, 12});
  sparse.set_values(dense.values());
  ASSERT_TRUE(Push(sparse).ok());
  for (uint32_t table : {kInt8Dense, kInt8Sparse}) {
    const std::vector<uint64_t> keys =
        table == kInt8Dense ? std::vector<uint64_t>{2, 5} : std::vector<uint64_t>{9, 10, 11, 12};
    KeyBlock b = Block(table, keys);
    b.set_codec(v1::CODEC_INT8);
    v1::PullResponse resp;
    const grpc::Status st = Pull(b, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(resp.blocks(0).codec(), v1::CODEC_INT8);
    EXPECT_EQ(resp.blocks(0).values().size(), 4 + g.size());  // one chunk: its scale, 8 bytes
    std::vector<float> got(g.size());
    ASSERT_TRUE(
        DecodeValueBlock(v1::CODEC_INT8, resp.blocks(0).values(), got.size(), got.data()).ok());
    const float scale = 1.25f / 127.0f;  // the largest stored |value|: 0.25 - (-1.0)
    for (size_t i = 0; i < g.size(); ++i) {
      EXPECT_NEAR(got[i], 0.25f - g[i], 0.5f * scale * 1.0001f) << table << " " << i;
    }
    // A float32 pull of an int8 table is refused naming the codec.
    v1::PullResponse plain;
    const grpc::Status refused = Pull(Block(table, keys), &plain);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(refused.error_message().find("answers pulls encoded as int8"), std::string::npos)
        << refused.error_message();
  }
}

// A client that does not know the table's codec (a plain protobuf client sends and asks for
// float32) is told which codec the table wants; nothing is applied.
TEST_F(ParameterServiceCodecTest, BlocksInAnotherEncodingAreRefusedNamingTheCodec) {
  const std::vector<float> before = Snapshot();
  KeyBlock plain = Block(kFp16, {1});
  const std::vector<float> g = {1, 1, 1, 1};
  plain.set_values(std::string(reinterpret_cast<const char*>(g.data()), 16));
  grpc::Status s = Push(plain);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("takes pushes encoded as fp16 (its push_codec)"),
            std::string::npos)
      << s.error_message();
  v1::PullResponse resp;
  s = Pull(Block(kFp16, {1}), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("answers pulls encoded as fp16 (its pull_codec)"),
            std::string::npos)
      << s.error_message();
  s = Push(Encoded(kTopk, {1}, Codec(v1::CODEC_SIGN), g));  // sign to a topk table
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  s = Push(Encoded(kFp16, {1}, Codec(v1::CODEC_INT8), g));  // int8 is never a push codec
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("fp16 (its push_codec)"), std::string::npos)
      << s.error_message();
  EXPECT_EQ(Snapshot(), before);
}

// A client older than KeyBlock.momentum sends topk blocks without it and would train without the
// table's momentum correction: it is told, and nothing applies, until a block says the table's.
TEST_F(ParameterServiceCodecTest, MomentumTablesRefuseBlocksThatDoNotApplyTheirMomentum) {
  constexpr uint32_t kDgc = 5;
  v1::CodecSpec dgc = Codec(v1::CODEC_TOPK, 0.25f);
  dgc.set_momentum(0.9f);
  ASSERT_TRUE(CreateTable(Spec(kDgc, v1::DENSE, dgc, {})).ok());
  const std::vector<float> before = Snapshot(), dgc_before = Values(kDgc, kRows);
  const std::vector<float> g = {0, 0, -2, 0};  // k = 1
  KeyBlock old = Encoded(kDgc, {3}, dgc, g);   // no momentum field
  grpc::Status s = Push(old);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("with momentum correction 0.9 (its push_codec.momentum"),
            std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("this client does not say that it applies it"),
            std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("nothing was applied"), std::string::npos) << s.error_message();
  KeyBlock other = old;
  other.set_momentum(0.5f);
  s = Push(other);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("block says 0.5; nothing was applied"), std::string::npos)
      << s.error_message();
  KeyBlock to_topk = Encoded(kTopk, {3}, Codec(v1::CODEC_TOPK, 0.25f), g);
  to_topk.set_momentum(0.9f);  // momentum to a table without it
  EXPECT_EQ(Push(to_topk).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Values(kDgc, kRows), dgc_before);
  EXPECT_EQ(Snapshot(), before);

  old.set_momentum(0.9f);
  ASSERT_TRUE(Push(old).ok());
  EXPECT_EQ(Values(kDgc, {3}), (std::vector<float>{0.25f, 0.25f, 2.25f, 0.25f}));
}

TEST_F(ParameterServiceCodecTest, BadBlocksAreRefusedWithNothingApplied) {
  const std::vector<float> before = Snapshot();
  const std::vector<float> g = {1, -1, 3, -3, 1, 2, 3, 4};
  std::vector<KeyBlock> bad;
  KeyBlock b = Encoded(kFp16, {1, 2}, Codec(v1::CODEC_FP16), g);
  b.mutable_values()->pop_back();  // wrong length
  bad.push_back(b);
  b = Encoded(kTopk, {1, 2}, Codec(v1::CODEC_TOPK, 0.25f), g);
  const uint32_t past = 8;
  std::memcpy(&(*b.mutable_values())[8], &past, 4);  // index out of range
  bad.push_back(b);
  b = Encoded(kTopk, {1}, Codec(v1::CODEC_TOPK, 0.25f), {1, 2, 3, 4});
  b.set_keys(Block(kTopk, {1, 2}).keys());  // encoded for 4 values, the keys have 8
  bad.push_back(b);
  b = Encoded(kSign, {1, 2}, Codec(v1::CODEC_SIGN), g);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(b.mutable_values()->data(), &nan, 4);  // NaN scale
  bad.push_back(b);
  b = Encoded(kSign, {1, 2}, Codec(v1::CODEC_SIGN), g);
  b.set_codec(static_cast<v1::ValueCodec>(9));  // unknown codec
  bad.push_back(b);
  for (size_t i = 0; i < bad.size(); ++i) {
    grpc::Status s = Push(bad[i]);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << i;
    EXPECT_NE(s.error_message().find("nothing was applied"), std::string::npos)
        << i << ": " << s.error_message();
  }
  EXPECT_EQ(Snapshot(), before);
}

// Encoded blocks are counted before anything is decoded: a request whose small blocks stand
// for more values together than the cap (here 2 x 40M, a topk block with k = 0 being 8 bytes) is
// refused without the server allocating them.
TEST_F(ParameterServiceCodecTest, TheValuesOfARequestsEncodedBlocksAreCappedTogether) {
  constexpr uint32_t kWide = 6;
  v1::TableSpec wide = Spec(kWide, v1::DENSE, Codec(v1::CODEC_TOPK, 0.25f), {});
  wide.set_dim(1 << 20);
  wide.set_num_rows(1);
  ASSERT_TRUE(CreateTable(wide).ok());
  KeyBlock block = Block(kWide, std::vector<uint64_t>(40, 0));
  block.set_codec(v1::CODEC_TOPK);
  block.set_values(std::string(8, '\0'));
  const std::vector<float> before = Snapshot();
  const grpc::Status s = Push(std::vector<KeyBlock>{block, block});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("encoded blocks stand for 83886080 values or more; at most "
                                   "67108864 a request"),
            std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("nothing was applied"), std::string::npos);
  EXPECT_EQ(Snapshot(), before);
  EXPECT_EQ(PushBytes(kWide), std::make_pair(uint64_t{0}, uint64_t{0}));
}

// The codec's byte counts (psctl status' ratios) count what was applied: not a retry that the
// server had applied, nor a push refused after its blocks were decoded.
TEST_F(ParameterServiceCodecTest, CodecBytesCountAppliedPushesOnly) {
  const std::vector<float> g = {0, 0, -2, 0, 1, 0, 0, 0};
  const KeyBlock block = Encoded(kTopk, {3, 4}, Codec(v1::CODEC_TOPK, 0.25f), g);
  bool duplicate = true;
  ASSERT_TRUE(Push({block}, 1000, &duplicate).ok());
  EXPECT_FALSE(duplicate);
  const std::pair<uint64_t, uint64_t> once = PushBytes(kTopk);
  EXPECT_EQ(once.first, 8 * sizeof(float));
  EXPECT_EQ(once.second, block.values().size());
  ASSERT_TRUE(Push({block}, 1000, &duplicate).ok());  // a retry
  EXPECT_TRUE(duplicate);
  EXPECT_EQ(PushBytes(kTopk), once);
  KeyBlock past = Encoded(kTopk, {3, 8}, Codec(v1::CODEC_TOPK, 0.25f), g);  // row 8 of 0..7
  EXPECT_EQ(Push(past).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(PushBytes(kTopk), once);
}

// Delta pulls through the wire, as a plain protobuf client sees them: KeyBlock.since in,
// KeyBlock.since and KeyBlock.delta out.
TEST_F(ParameterServiceCodecTest, DeltaPullsAnswerTheValuesChangedSinceTheToken) {
  for (const v1::ValueCodec codec : {v1::CODEC_NONE, v1::CODEC_INT8}) {
    SCOPED_TRACE(CodecName(codec));
    const uint32_t id = codec == v1::CODEC_NONE ? 20 : 21;
    v1::TableSpec spec = Spec(id, v1::DENSE, {}, Codec(codec));
    spec.mutable_pull_codec()->set_delta(true);
    ASSERT_TRUE(CreateTable(spec).ok());
    auto pull = [&](uint64_t since) {
      KeyBlock b = Block(id, kRows);
      b.set_codec(codec);
      b.set_since(since);
      v1::PullResponse resp;
      const grpc::Status s = Pull(b, &resp);
      EXPECT_TRUE(s.ok()) << s.error_message();
      EXPECT_EQ(resp.blocks_size(), 1);
      return resp.blocks_size() == 1 ? resp.blocks(0) : KeyBlock();
    };
    // No token (a plain client): every value, with a token for next time.
    const KeyBlock whole = pull(0);
    EXPECT_FALSE(whole.delta());
    ASSERT_NE(whole.since(), 0u);
    std::vector<float> values(32);
    ASSERT_TRUE(DecodeValueBlock(codec, whole.values(), 32, values.data()).ok());
    EXPECT_EQ(values, std::vector<float>(32, 0.25f));
    // Two values change (a plain float32 push; its zeros change nothing).
    std::vector<float> g(8, 0.0f);
    g[1] = 0.5f;
    g[6] = 0.5f;
    ASSERT_TRUE(Push(Block(id, {2, 5}, g)).ok());
    const KeyBlock delta = pull(whole.since());
    ASSERT_TRUE(delta.delta());
    EXPECT_EQ(delta.codec(), codec);
    EXPECT_GT(delta.since(), whole.since());
    std::vector<uint32_t> indices;
    std::vector<float> changed;
    ASSERT_TRUE(DecodeDeltaBlock(codec, delta.values(), 32, &indices, &changed).ok());
    EXPECT_EQ(indices, (std::vector<uint32_t>{9, 22}));
    EXPECT_EQ(changed, (std::vector<float>{-0.25f, -0.25f}));  // exact in int8 too
    EXPECT_EQ(delta.values().size(), DeltaBlockBytes(Codec(codec), 2));
    // Nothing since: an empty delta (8 bytes).
    const KeyBlock nothing = pull(delta.since());
    EXPECT_TRUE(nothing.delta());
    EXPECT_EQ(nothing.values().size(), 8u);
    // A token of another table object, or not answered yet: in full.
    EXPECT_FALSE(pull(delta.since() ^ (uint64_t{1} << 33)).delta());
    EXPECT_FALSE(pull(delta.since() + 100).delta());
    // Where most values changed, the whole block is smaller than the delta: in full.
    ASSERT_TRUE(Push(Block(id, kRows, std::vector<float>(32, 0.125f))).ok());
    const KeyBlock most = pull(nothing.since());
    EXPECT_FALSE(most.delta());
    EXPECT_EQ(most.values().size(), EncodedBytes(Codec(codec), 32));
  }
  // A token sent to a table without delta pulls (a confused or hostile client) changes nothing:
  // every value, no token back.
  KeyBlock plain = Block(kTopk, kRows);
  plain.set_since((uint64_t{5} << 32) | 3);
  v1::PullResponse answer;
  ASSERT_TRUE(Pull(plain, &answer).ok());
  ASSERT_EQ(answer.blocks_size(), 1);
  EXPECT_FALSE(answer.blocks(0).delta());
  EXPECT_EQ(answer.blocks(0).since(), 0u);
  EXPECT_EQ(Floats(answer.blocks(0).values()), std::vector<float>(32, 0.25f));
  // The server counted the answers' bytes against float32.
  v1::DescribeTableRequest req;
  req.set_table_id(20);
  v1::DescribeTableResponse resp;
  CallContext c;
  ASSERT_TRUE(stub_->DescribeTable(&c.ctx, req, &resp).ok());
  EXPECT_EQ(resp.stats().pull_raw_bytes(), 6u * 32 * sizeof(float));  // 6 pulls, 4 in full
  EXPECT_EQ(resp.stats().pull_wire_bytes(),
            4 * 32 * sizeof(float) + DeltaBlockBytes(Codec(v1::CODEC_NONE), 2) + 8);
}

TEST_F(ParameterServiceCodecTest, CreateTableRefusesBadCodecs) {
  for (const v1::TableSpec& spec : {Spec(10, v1::DENSE, Codec(v1::CODEC_TOPK, 0.0f), {}),
                                    Spec(11, v1::DENSE, Codec(v1::CODEC_TOPK, 1.5f), {}),
                                    Spec(12, v1::SPARSE, Codec(v1::CODEC_TOPK, 0.1f), {}),
                                    Spec(13, v1::DENSE, {}, Codec(v1::CODEC_SIGN)),
                                    Spec(15, v1::DENSE, Codec(v1::CODEC_INT8), {}),
                                    Spec(14, v1::DENSE, Codec(static_cast<v1::ValueCodec>(7)), {}),
                                    Delta(16, true, false), Delta(17, false, true)}) {
    grpc::Status s = CreateTable(spec);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << spec.table_id();
    EXPECT_NE(s.error_message().find("_codec"), std::string::npos) << s.error_message();
  }
}

}  // namespace
}  // namespace ps::parameter_service_codec_test
