// DataPlane and DataCall in process, on a real TableStore and ConsistencyGate: the steps gRPC's
// handlers run, with the stop where a call would block the thread that read it, and a push's
// resolution (encoded blocks decoded, codecs checked).
#include "server/data_plane.h"

#include <grpcpp/support/byte_buffer.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/shard_map.h"
#include "common/testing/key_blocks.h"
#include "common/value_codec.h"
#include "gtest/gtest.h"
#include "server/data_call.h"

namespace ps::data_plane_test {
namespace {

using testing::Block;
using v1::ConsistencySpec;
using v1::KeyBlock;

constexpr char kJob[] = "job";
constexpr uint32_t kSmall = 1, kBig = 2, kFp16 = 3;
constexpr uint32_t kBigDim = 1024, kBigRows = 2048;  // 8 MiB of values: over kServeHereBytes

v1::TableSpec Dense(uint32_t id, uint32_t dim, uint32_t rows) {
  v1::TableSpec spec;
  spec.set_table_id(id);
  spec.set_name(absl::StrCat("t", id));
  spec.set_job_id(kJob);
  spec.set_kind(v1::DENSE);
  spec.set_dim(dim);
  spec.set_num_rows(rows);
  spec.mutable_initializer()->set_kind(v1::InitializerSpec::CONSTANT);
  spec.mutable_initializer()->set_value(0.5f);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  return spec;
}

grpc::ByteBuffer Bytes(const google::protobuf::Message& message) {
  grpc::Slice slice(message.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

template <typename Message>
Message Parse(grpc::ByteBuffer& bytes) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(bytes.Dump(&slices).ok());
  std::string all;
  for (const grpc::Slice& s : slices) {
    all.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  Message m;
  EXPECT_TRUE(m.ParseFromString(all));
  return m;
}

class DataPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(store_.CreateTable(Dense(kSmall, 4, 8)).ok());
    ASSERT_TRUE(store_.CreateTable(Dense(kBig, kBigDim, kBigRows)).ok());
    v1::TableSpec fp16 = Dense(kFp16, 4, 8);
    fp16.mutable_push_codec()->set_codec(v1::CODEC_FP16);
    ASSERT_TRUE(store_.CreateTable(fp16).ok());
  }
  void Configure(ConsistencySpec::Mode mode) {
    ConsistencySpec spec;
    spec.set_mode(mode);
    ASSERT_TRUE(gate_.Configure(kJob, spec, {1, 2}, 1).ok());
  }
  v1::PullRequest Pull(uint32_t table, const std::vector<uint64_t>& keys, int64_t clock = 0) {
    v1::PullRequest req;
    req.set_job_id(kJob);
    req.set_worker_id(1);
    req.set_clock(clock);
    *req.add_blocks() = Block(table, keys);
    return req;
  }
  v1::PushRequest Push(const KeyBlock& block, uint64_t request_id) {
    v1::PushRequest req;
    req.set_job_id(kJob);
    req.set_worker_id(1);
    req.set_request_id(request_id);
    *req.add_blocks() = block;
    return req;
  }
  // A call as ParameterService's reactor makes it (no credential: any job).
  std::unique_ptr<DataCall> Call(ServerMethod method, const google::protobuf::Message& req,
                                 const std::string& scope = "") {
    return std::make_unique<DataCall>(&plane_, method, Bytes(req), &answer_,
                                      absl::Now() + absl::Seconds(10), scope);
  }
  std::vector<float> Values(uint32_t table, const std::vector<uint64_t>& keys) {
    auto call = Call(ServerMethod::kPull, Pull(table, keys));
    EXPECT_TRUE(call->Serve(/*may_block=*/true));
    EXPECT_TRUE(call->status().ok()) << call->status();
    const v1::PullResponse resp = Parse<v1::PullResponse>(answer_);
    return resp.blocks_size() == 1 ? testing::Floats(resp.blocks(0).values())
                                   : std::vector<float>();
  }

  TableStore store_{TableStoreOptions{}};
  ConsistencyGate gate_{[this](const std::string& job, int64_t from, int64_t to) {
    store_.ApplyAccumulated(job, from, to);
  }};
  RequestDeduper deduper_;
  DataPlane plane_{&store_, &gate_, &deduper_, /*metrics=*/nullptr};
  grpc::ByteBuffer answer_;
};

TEST_F(DataPlaneTest, APushIsServedWhereItWasReadAndAppliedOnce) {
  Configure(ConsistencySpec::ASYNC);
  const v1::PushRequest req = Push(Block(kSmall, {2}, {1, 2, 3, 4}), 7);
  for (bool duplicate : {false, true}) {
    auto call = Call(ServerMethod::kPush, req);
    ASSERT_TRUE(call->Serve(/*may_block=*/false));
    ASSERT_TRUE(call->status().ok()) << call->status();
    EXPECT_EQ(Parse<v1::PushResponse>(answer_).duplicate(), duplicate);
  }
  EXPECT_EQ(Values(kSmall, {2}), (std::vector<float>{-0.5f, -1.5f, -2.5f, -3.5f}));
}

// Failover: a server that took slots over applies each owing worker's re-sent push of the clock
// being caught up once (a retry, or another re-send of the same worker, changes nothing), and
// only to those slots.
TEST_F(DataPlaneTest, AResentPushIsAppliedOnceToTheSlotsTakenOver) {
  Configure(ConsistencySpec::SYNC);
  for (int64_t c : {1, 2}) {
    ASSERT_TRUE(gate_.AdvanceClock(kJob, 1, c).ok());
    ASSERT_TRUE(gate_.AdvanceClock(kJob, 2, c).ok());
  }
  const uint32_t taken = SlotOf(kSmall, 2);
  ASSERT_NE(SlotOf(kSmall, 3), taken);
  std::vector<bool> slots(kNumSlots, false);
  slots[taken] = true;
  ASSERT_TRUE(gate_.BeginCatchUp(kJob, 1, slots).ok());
  auto resend = [&](uint32_t worker, uint64_t request_id, const KeyBlock& block) {
    v1::PushRequest req = Push(block, request_id);
    req.set_worker_id(worker);
    req.set_clock(1);
    req.set_resend_parts(1);
    auto call = Call(ServerMethod::kPush, req);
    EXPECT_TRUE(call->Serve(/*may_block=*/true));
    return call->status().ok() ? absl::StatusOr<bool>(Parse<v1::PushResponse>(answer_).duplicate())
                               : absl::StatusOr<bool>(call->status());
  };
  EXPECT_EQ(*resend(1, 10, Block(kSmall, {2}, {1, 2, 3, 4})), false);
  EXPECT_EQ(*resend(1, 10, Block(kSmall, {2}, {1, 2, 3, 4})), true);  // a retry
  EXPECT_EQ(*resend(1, 11, Block(kSmall, {2}, {1, 2, 3, 4})), true);  // owes nothing now
  // A key of a slot not taken over: refused, nothing applied, worker 2 still owes its re-send.
  EXPECT_EQ(resend(2, 20, Block(kSmall, {2, 3}, {1, 1, 1, 1, 9, 9, 9, 9})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gate_.CatchUpClock(kJob), 1);
  EXPECT_EQ(Values(kSmall, {2, 3}), std::vector<float>(8, 0.5f));
  EXPECT_EQ(*resend(2, 21, Block(kSmall, {2}, {1, 1, 1, 1})), false);
  EXPECT_EQ(gate_.CatchUpClock(kJob), -1);
  // Applied once, summed: 0.5 - (g1 + g2) (SGD, learning rate 1).
  EXPECT_EQ(Values(kSmall, {2, 3}),
            (std::vector<float>{-1.5f, -2.5f, -3.5f, -4.5f, 0.5f, 0.5f, 0.5f, 0.5f}));
  // Nothing owed any more: a late re-send is ignored.
  EXPECT_EQ(*resend(2, 22, Block(kSmall, {2}, {1, 1, 1, 1})), true);
  EXPECT_EQ(Values(kSmall, {2})[0], -1.5f);
}

TEST_F(DataPlaneTest, APullThatMustWaitStopsThenGoesOnWhereItMayBlock) {
  Configure(ConsistencySpec::SYNC);
  auto call = Call(ServerMethod::kPull, Pull(kSmall, {0}, /*clock=*/1));
  EXPECT_FALSE(call->Serve(/*may_block=*/false));  // the workers are at clock 0
  ASSERT_TRUE(gate_.AdvanceClock(kJob, 1, 1).ok());
  ASSERT_TRUE(gate_.AdvanceClock(kJob, 2, 1).ok());
  ASSERT_TRUE(call->Serve(/*may_block=*/true));
  ASSERT_TRUE(call->status().ok()) << call->status();
  const v1::PullResponse resp = Parse<v1::PullResponse>(answer_);
  EXPECT_EQ(resp.min_clock(), 1);
  ASSERT_EQ(resp.blocks_size(), 1);
  EXPECT_EQ(testing::Floats(resp.blocks(0).values()), std::vector<float>(4, 0.5f));
}

TEST_F(DataPlaneTest, APullThatMustWaitWithABadBlockIsRefusedWithoutWaiting) {
  Configure(ConsistencySpec::SYNC);
  // Clock 1 while the workers are at 0: it would wait until its deadline (10 s) if its blocks
  // were resolved after the wait; an unknown table and a key past the table are refused at once.
  for (const v1::PullRequest& req : {Pull(99, {0}, /*clock=*/1), Pull(kSmall, {8}, /*clock=*/1)}) {
    auto call = Call(ServerMethod::kPull, req);
    EXPECT_FALSE(call->Serve(/*may_block=*/false));
    ASSERT_TRUE(call->Serve(/*may_block=*/true));
    // Not the gate's DEADLINE_EXCEEDED after a wait: what is wrong with the block.
    EXPECT_EQ(call->status().code(), absl::StatusCode::kInvalidArgument) << call->status();
  }
}

TEST_F(DataPlaneTest, ABigAnswerStopsThenIsWrittenWhereTheCallMayBlock) {
  Configure(ConsistencySpec::ASYNC);
  std::vector<uint64_t> keys(kBigRows);
  for (uint64_t k = 0; k < kBigRows; ++k) keys[k] = k;
  auto call = Call(ServerMethod::kPull, Pull(kBig, keys));
  EXPECT_FALSE(call->Serve(/*may_block=*/false));
  ASSERT_TRUE(call->Serve(/*may_block=*/true));
  ASSERT_TRUE(call->status().ok()) << call->status();
  EXPECT_GT(answer_.Length(), DataPlane::kServeHereBytes);
  const v1::PullResponse resp = Parse<v1::PullResponse>(answer_);
  ASSERT_EQ(resp.blocks_size(), 1);
  EXPECT_EQ(resp.blocks(0).values().size(), size_t{kBigRows} * kBigDim * sizeof(float));
}

TEST_F(DataPlaneTest, ABigRequestIsReadWhereTheCallMayBlock) {
  Configure(ConsistencySpec::ASYNC);
  constexpr uint64_t kRows = 1536;  // 6 MiB of gradients
  std::vector<uint64_t> keys(kRows);
  for (uint64_t k = 0; k < kRows; ++k) keys[k] = k;
  auto call = Call(ServerMethod::kPush,
                   Push(Block(kBig, keys, std::vector<float>(kRows * kBigDim, 0.25f)), 1));
  EXPECT_FALSE(call->Serve(/*may_block=*/false));
  EXPECT_EQ(Values(kBig, {0}), std::vector<float>(kBigDim, 0.5f));  // not applied yet
  ASSERT_TRUE(call->Serve(/*may_block=*/true));
  ASSERT_TRUE(call->status().ok()) << call->status();
  EXPECT_EQ(Values(kBig, {kRows - 1}), std::vector<float>(kBigDim, 0.25f));
}

TEST_F(DataPlaneTest, ACallScopedToAnotherJobIsRefusedAndChangesNothing) {
  Configure(ConsistencySpec::ASYNC);
  const v1::PushRequest push = Push(Block(kSmall, {2}, {1, 2, 3, 4}), 1);
  v1::PushPullRequest push_pull;
  *push_pull.mutable_push() = push;
  for (auto [method, req] : std::vector<std::pair<ServerMethod, const google::protobuf::Message*>>{
           {ServerMethod::kPush, &push},
           {ServerMethod::kPushPull, &push_pull},
           {ServerMethod::kPull, nullptr}}) {
    const v1::PullRequest pull = Pull(kSmall, {2});
    auto call = Call(method, req != nullptr ? *req : pull, /*scope=*/"other");
    ASSERT_TRUE(call->Serve(/*may_block=*/false));
    EXPECT_EQ(call->status().code(), absl::StatusCode::kPermissionDenied) << call->status();
  }
  EXPECT_EQ(Values(kSmall, {2}), std::vector<float>(4, 0.5f));
}

TEST_F(DataPlaneTest, AnEncodedBlockIsDecodedAndAPlainOneToAnEncodedTableRefused) {
  Configure(ConsistencySpec::ASYNC);
  KeyBlock encoded = Block(kFp16, {1, 3});
  encoded.set_codec(v1::CODEC_FP16);
  v1::CodecSpec fp16;
  fp16.set_codec(v1::CODEC_FP16);
  EncodeValueBlock(fp16, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, encoded.mutable_values());
  // Read in place, the values are the block's bytes; here they are moved there by hand.
  v1::PushRequest req = Push(encoded, 1);
  std::deque<ScatteredValues> values(1);
  const std::string bytes = req.blocks(0).values();
  values[0].Add(bytes.data(), bytes.size());
  req.mutable_blocks(0)->clear_values();

  ResolvedPush push;
  ASSERT_TRUE(plane_.ResolvePush(req, values, &push).ok());
  ASSERT_EQ(push.views.size(), 1u);
  EXPECT_EQ(push.keys, 2u);
  ASSERT_EQ(push.codec_bytes.size(), 1u);
  EXPECT_EQ(push.codec_bytes[0].raw, 8 * sizeof(float));
  EXPECT_EQ(push.codec_bytes[0].wire, bytes.size());
  std::vector<float> grads(8);
  for (size_t i = 0; i < 2; ++i) {
    float scratch[4];
    std::memcpy(&grads[i * 4], push.views[0].Grad(i, scratch), 4 * sizeof(float));
  }
  EXPECT_EQ(grads, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));

  // The same table sent float32: refused, naming the table's push_codec.
  v1::PushRequest plain = Push(Block(kFp16, {1}), 2);
  std::deque<ScatteredValues> plain_values(1);
  const std::vector<float> floats = {1, 2, 3, 4};
  plain_values[0].Add(reinterpret_cast<const char*>(floats.data()), 16);
  ResolvedPush refused;
  const absl::Status s = plane_.ResolvePush(plain, plain_values, &refused);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("its push_codec"), std::string::npos) << s;
}

// Prefetches (PullRequest.prefetch) through DataCall, as the reactors serve them.
v1::PullRequest Prefetch(v1::PullRequest req) {
  req.set_prefetch(true);
  return req;
}

TEST_F(DataPlaneTest, APrefetchOfATableWithoutATierIsAnsweredAtOnceWithNoValues) {
  Configure(ConsistencySpec::SYNC);
  // At clock 5, which a pull would wait for: a prefetch never waits on the gate.
  auto call = Call(ServerMethod::kPull, Prefetch(Pull(kSmall, {1, 2}, /*clock=*/5)));
  ASSERT_TRUE(call->Serve(/*may_block=*/false));
  ASSERT_TRUE(call->status().ok()) << call->status();
  EXPECT_EQ(Parse<v1::PullResponse>(answer_).blocks_size(), 0);
  // A bad block is refused as a pull's: an unknown table, a key past a dense table.
  for (const v1::PullRequest& req : {Prefetch(Pull(99, {0})), Prefetch(Pull(kSmall, {8}))}) {
    auto bad = Call(ServerMethod::kPull, req);
    ASSERT_TRUE(bad->Serve(/*may_block=*/false));
    EXPECT_EQ(bad->status().code(), absl::StatusCode::kInvalidArgument) << bad->status();
  }
}

TEST_F(DataPlaneTest, APrefetchScopedToAnotherJobOrOverTheKeyCapIsRefused) {
  Configure(ConsistencySpec::ASYNC);
  auto call = Call(ServerMethod::kPull, Prefetch(Pull(kSmall, {2})), /*scope=*/"other");
  ASSERT_TRUE(call->Serve(/*may_block=*/false));
  EXPECT_EQ(call->status().code(), absl::StatusCode::kPermissionDenied) << call->status();
  auto big =
      Call(ServerMethod::kPull,
           Prefetch(Pull(kSmall, std::vector<uint64_t>(DataPlane::kMaxPrefetchKeys + 1, 0))));
  ASSERT_TRUE(big->Serve(/*may_block=*/true));
  EXPECT_EQ(big->status().code(), absl::StatusCode::kInvalidArgument) << big->status();
  EXPECT_NE(big->status().message().find("at most 1048576"), std::string::npos) << big->status();
}

TEST(DataPlaneTierTest, APrefetchThatReadsTheDiskIsServedWhereTheCallMayBlock) {
  TableStoreOptions options;
  options.tier.dir = ::testing::TempDir() + "/data_plane_prefetch_" + std::to_string(getpid());
  {
    TableStore store(options);
    v1::TableSpec spec = Dense(kSmall, 4, 0);
    spec.set_kind(v1::SPARSE);
    spec.set_num_rows(0);
    spec.mutable_eviction()->set_max_rows(16);  // a prefetch pins 8 rows at most
    spec.mutable_tier()->set_disk(true);
    ASSERT_TRUE(store.CreateTable(spec).ok());
    ConsistencyGate gate([&](const std::string& job, int64_t from, int64_t to) {
      store.ApplyAccumulated(job, from, to);
    });
    ConsistencySpec mode;
    mode.set_mode(ConsistencySpec::ASYNC);
    ASSERT_TRUE(gate.Configure(kJob, mode, {1}, 1).ok());
    RequestDeduper deduper;
    DataPlane plane(&store, &gate, &deduper, nullptr);
    std::vector<uint64_t> keys(64);
    for (uint64_t k = 0; k < keys.size(); ++k) keys[k] = k;
    v1::PullRequest pull;
    pull.set_job_id(kJob);
    pull.set_worker_id(1);
    *pull.add_blocks() = Block(kSmall, keys);
    grpc::ByteBuffer answer;
    DataCall created(&plane, ServerMethod::kPull, Bytes(pull), &answer,
                     absl::Now() + absl::Seconds(10), "");
    ASSERT_TRUE(created.Serve(/*may_block=*/true));  // 64 rows, 48 of them on disk now
    ASSERT_TRUE(created.status().ok()) << created.status();
    const uint64_t reads = store.Stats(kSmall)->disk_reads();
    pull.clear_blocks();
    *pull.add_blocks() = Block(kSmall, {0, 1, 2, 3, 4, 5, 6, 7});
    DataCall prefetch(&plane, ServerMethod::kPull, Bytes(Prefetch(pull)), &answer,
                      absl::Now() + absl::Seconds(10), "");
    EXPECT_FALSE(prefetch.Serve(/*may_block=*/false));  // not on the thread that read it
    EXPECT_EQ(store.Stats(kSmall)->disk_reads(), reads);
    ASSERT_TRUE(prefetch.Serve(/*may_block=*/true));
    ASSERT_TRUE(prefetch.status().ok()) << prefetch.status();
    EXPECT_GT(store.Stats(kSmall)->disk_reads(), reads);
  }
  std::filesystem::remove_all(options.tier.dir);
}

// Rows a prefetch would read back take RAM as a pull's new rows do: over the job's cap
// (--max_job_bytes), the prefetch is refused as such a pull is, and reads nothing.
TEST(DataPlaneTierTest, APrefetchPastTheJobsByteCapIsRefused) {
  TableStoreOptions options;
  options.tier.dir = ::testing::TempDir() + "/data_plane_prefetch_cap_" + std::to_string(getpid());
  options.max_job_bytes = 1;
  {
    TableStore store(options);
    v1::TableSpec spec = Dense(kSmall, 4, 0);
    spec.set_kind(v1::SPARSE);
    spec.set_num_rows(0);
    spec.mutable_eviction()->set_max_rows(16);
    spec.mutable_tier()->set_disk(true);
    ASSERT_TRUE(store.CreateTable(spec).ok());
    ConsistencyGate gate([&](const std::string& job, int64_t from, int64_t to) {
      store.ApplyAccumulated(job, from, to);
    });
    ConsistencySpec mode;
    mode.set_mode(ConsistencySpec::ASYNC);
    ASSERT_TRUE(gate.Configure(kJob, mode, {1}, 1).ok());
    RequestDeduper deduper;
    DataPlane plane(&store, &gate, &deduper, nullptr);
    v1::PullRequest pull;
    pull.set_job_id(kJob);
    pull.set_worker_id(1);
    *pull.add_blocks() = Block(kSmall, {1, 2});
    grpc::ByteBuffer answer;
    DataCall prefetch(&plane, ServerMethod::kPull, Bytes(Prefetch(pull)), &answer,
                      absl::Now() + absl::Seconds(10), "");
    ASSERT_TRUE(prefetch.Serve(/*may_block=*/true));
    EXPECT_EQ(prefetch.status().code(), absl::StatusCode::kResourceExhausted) << prefetch.status();
    EXPECT_EQ(store.Stats(kSmall)->disk_lookups(), 0u);
  }
  std::filesystem::remove_all(options.tier.dir);
}

}  // namespace
}  // namespace ps::data_plane_test
