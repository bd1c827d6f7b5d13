// End-to-end tests of the ParameterServer gRPC service: a real server in-process on a free port,
// called through a real stub.
#include "server/parameter_service.h"

#include <grpcpp/grpcpp.h>

#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/packed_bytes.h"
#include "common/testing/key_blocks.h"
#include "gtest/gtest.h"
#include "ps/v1/parameter_server.grpc.pb.h"
#include "server/parameter_server.h"
#include "server/testing/service_fixture.h"

namespace ps::parameter_service_test {
namespace {

using testing::Block;
using testing::CallContext;
using testing::Floats;
using v1::KeyBlock;

constexpr char kJob[] = "job";
constexpr uint32_t kDense = 1;   // dim 4, 8 rows, all 0.25, sgd lr 1
constexpr uint32_t kSparse = 2;  // dim 2, uniform init
constexpr int kMaxMessageBytes = 1 << 20;
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

v1::TableSpec Spec(uint32_t id, v1::TableKind kind, uint32_t dim, const std::string& job) {
  v1::TableSpec spec;
  spec.set_table_id(id);
  spec.set_job_id(job);
  spec.set_kind(kind);
  spec.set_dim(dim);
  if (kind == v1::DENSE) {
    spec.set_num_rows(8);
    spec.mutable_initializer()->set_kind(v1::InitializerSpec::CONSTANT);
    spec.mutable_initializer()->set_value(0.25f);
  } else {
    spec.mutable_initializer()->set_kind(v1::InitializerSpec::UNIFORM);
    spec.mutable_initializer()->set_low(-1.0f);
    spec.mutable_initializer()->set_high(1.0f);
  }
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  return spec;
}

class ParameterServiceTest : public testing::ServiceFixture {
 protected:
  // Starts server_ with `options`, its stub (over a channel made with `args`), the job kJob
  // (async, worker 1) and its dense and sparse tables.
  void StartWith(const ParameterServerOptions& options,
                 const grpc::ChannelArguments& args = grpc::ChannelArguments()) {
    ASSERT_NO_FATAL_FAILURE(StartServer(options, /*registry=*/nullptr, args));
    ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC, {1}).ok());
    ASSERT_TRUE(CreateTable(Spec(kDense, v1::DENSE, 4, kJob)).ok());
    ASSERT_TRUE(CreateTable(Spec(kSparse, v1::SPARSE, 2, kJob)).ok());
  }

  void SetUp() override {
    ParameterServerOptions options;
    options.max_message_bytes = kMaxMessageBytes;
    options.max_pull_wait = absl::Seconds(10);
    StartWith(options);
    ASSERT_FALSE(HasFatalFailure());
    v1::PullResponse created;
    ASSERT_TRUE(Pull({Block(kSparse, {5, 6})}, &created).ok());  // creates two sparse rows
  }

  grpc::Status Configure(const std::string& job, v1::ConsistencySpec::Mode mode,
                         const std::vector<uint32_t>& workers) {
    v1::ConfigureJobRequest req;
    req.set_job_id(job);
    req.mutable_consistency()->set_mode(mode);
    for (uint32_t w : workers) req.add_worker_ids(w);
    req.set_membership_epoch(1);
    v1::ConfigureJobResponse resp;
    CallContext c;
    return stub_->ConfigureJob(&c.ctx, req, &resp);
  }
  grpc::Status Pull(const std::vector<KeyBlock>& blocks, v1::PullResponse* resp,
                    const std::string& job = kJob, int64_t clock = 0) {
    v1::PullRequest req;
    req.set_job_id(job);
    req.set_worker_id(1);
    req.set_clock(clock);
    for (const KeyBlock& b : blocks) *req.add_blocks() = b;
    CallContext c;
    return stub_->Pull(&c.ctx, req, resp);
  }
  v1::PushRequest PushRequest(const std::vector<KeyBlock>& blocks, uint64_t request_id,
                              int64_t clock = 0, const std::string& job = kJob,
                              uint32_t worker = 1) {
    v1::PushRequest req;
    req.set_job_id(job);
    req.set_worker_id(worker);
    req.set_request_id(request_id);
    req.set_clock(clock);
    for (const KeyBlock& b : blocks) *req.add_blocks() = b;
    return req;
  }
  grpc::Status Push(const v1::PushRequest& req, v1::PushResponse* resp) {
    CallContext c;
    return stub_->Push(&c.ctx, req, resp);
  }
  std::vector<float> Values(uint32_t table, const std::vector<uint64_t>& keys,
                            const std::string& job = kJob, int64_t clock = 0) {
    v1::PullResponse resp;
    const grpc::Status s = Pull({Block(table, keys)}, &resp, job, clock);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return s.ok() && resp.blocks_size() == 1 ? Floats(resp.blocks(0).values())
                                             : std::vector<float>();
  }
  uint64_t SparseRows() {
    v1::DescribeTableRequest req;
    req.set_table_id(kSparse);
    v1::DescribeTableResponse resp;
    CallContext c;
    EXPECT_TRUE(stub_->DescribeTable(&c.ctx, req, &resp).ok());
    return resp.rows_on_server();
  }
  // Every stored value, through a valid pull: also proves that the server still serves.
  std::vector<float> Snapshot() {
    std::vector<float> all = Values(kDense, {0, 1, 2, 3, 4, 5, 6, 7});
    for (float v : Values(kSparse, {5, 6})) all.push_back(v);
    all.push_back(static_cast<float>(SparseRows()));
    return all;
  }
};

// Byte-wise comparison: NaN-safe, and exact.
void ExpectSameBytes(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST_F(ParameterServiceTest, BadPushesAreRejectedAndChangeNothing) {
  KeyBlock short_keys = Block(kSparse, {5});
  short_keys.mutable_keys()->resize(12);
  const KeyBlock valid = Block(kDense, {0}, {1, 1, 1, 1});
  struct Case {
    std::string name;
    v1::PushRequest req;
    grpc::StatusCode code;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"unknown table", PushRequest({valid, Block(77, {0}, {1})}, 1),
       grpc::StatusCode::INVALID_ARGUMENT, "unknown table id 77"},
      {"values wrong for dim",
       PushRequest({valid, Block(kDense, {1, 2}, std::vector<float>(7))}, 2),
       grpc::StatusCode::INVALID_ARGUMENT, "7 values for 2 keys of dim 4"},
      {"keys not a multiple of 8 bytes", PushRequest({short_keys}, 3),
       grpc::StatusCode::INVALID_ARGUMENT, "not a multiple of 8"},
      {"duplicate keys", PushRequest({Block(kSparse, {5, 9, 5}, std::vector<float>(6, 1))}, 4),
       grpc::StatusCode::INVALID_ARGUMENT, "duplicate key 5"},
      {"dense key out of range", PushRequest({Block(kDense, {8}, {1, 1, 1, 1})}, 5),
       grpc::StatusCode::INVALID_ARGUMENT, "key 8 is out of range"},
      {"NaN gradient", PushRequest({valid, Block(kSparse, {5, 9}, {1, 1, kNaN, 1})}, 6),
       grpc::StatusCode::INVALID_ARGUMENT, "NaN or Inf"},
      {"Inf gradient", PushRequest({Block(kDense, {3}, {1, -kInf, 1, 1})}, 7),
       grpc::StatusCode::INVALID_ARGUMENT, "NaN or Inf"},
      {"clock far in the future", PushRequest({valid}, 8, /*clock=*/1000000),
       grpc::StatusCode::FAILED_PRECONDITION, "push for clock 1000000 is ahead"},
      {"unknown worker", PushRequest({valid}, 9, 0, kJob, /*worker=*/7),
       grpc::StatusCode::FAILED_PRECONDITION, "worker 7 is not a live worker"},
      {"unknown job", PushRequest({valid}, 10, 0, "nojob"), grpc::StatusCode::FAILED_PRECONDITION,
       "job 'nojob' is not configured"},
  };
  const std::vector<float> before = Snapshot();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    v1::PushResponse resp;
    const grpc::Status s = Push(c.req, &resp);
    EXPECT_EQ(s.error_code(), c.code) << s.error_message();
    EXPECT_NE(s.error_message().find(c.want), std::string::npos) << s.error_message();
    ExpectSameBytes(Snapshot(), before);
  }
  // Rejected requests do not use up their request ids: the valid push with id 1 applies.
  v1::PushResponse resp;
  ASSERT_TRUE(Push(PushRequest({valid}, 1), &resp).ok());
  EXPECT_FALSE(resp.duplicate());
  EXPECT_EQ(Values(kDense, {0}), std::vector<float>(4, -0.75f));
}

TEST_F(ParameterServiceTest, OversizeRequestIsResourceExhaustedAndChangesNothing) {
  // 70000 sparse keys with 2 gradients each: 70000 * 16 bytes > 1 MiB.
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 70000; ++k) keys.push_back(1000 + k);
  const v1::PushRequest req =
      PushRequest({Block(kSparse, keys, std::vector<float>(2 * keys.size(), 1.0f))}, 1);
  ASSERT_GT(req.ByteSizeLong(), static_cast<size_t>(kMaxMessageBytes));
  const std::vector<float> before = Snapshot();
  v1::PushResponse resp;
  const grpc::Status s = Push(req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("larger than max"), std::string::npos) << s.error_message();
  ExpectSameBytes(Snapshot(), before);
}

TEST_F(ParameterServiceTest, BadPullsAreRejectedAndChangeNothing) {
  struct Case {
    std::string name;
    std::vector<KeyBlock> blocks;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"unknown table", {Block(kDense, {0}), Block(77, {0})}, "unknown table id 77"},
      {"pull block carrying values", {Block(kSparse, {5}, {1, 2})}, "must not carry values"},
      {"duplicate keys", {Block(kSparse, {9, 9})}, "duplicate key 9"},
      {"dense key out of range", {Block(kDense, {1, 100})}, "key 100 is out of range"},
  };
  const std::vector<float> before = Snapshot();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    v1::PullResponse resp;
    const grpc::Status s = Pull(c.blocks, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_NE(s.error_message().find(c.want), std::string::npos) << s.error_message();
    ExpectSameBytes(Snapshot(), before);  // in particular no sparse row 9 was created
  }
}

TEST_F(ParameterServiceTest, RetriedPushIsAppliedOnce) {
  const v1::PushRequest req = PushRequest({Block(kDense, {2}, {1, 2, 3, 4})}, 42);
  v1::PushResponse first, retry, next;
  ASSERT_TRUE(Push(req, &first).ok());
  EXPECT_FALSE(first.duplicate());
  const std::vector<float> once = {-0.75f, -1.75f, -2.75f, -3.75f};
  EXPECT_EQ(Values(kDense, {2}), once);
  ASSERT_TRUE(Push(req, &retry).ok());
  EXPECT_TRUE(retry.duplicate());
  EXPECT_EQ(Values(kDense, {2}), once);
  // Another request id with the same content is new work.
  ASSERT_TRUE(Push(PushRequest({Block(kDense, {2}, {1, 2, 3, 4})}, 43), &next).ok());
  EXPECT_FALSE(next.duplicate());
  EXPECT_EQ(Values(kDense, {2}), std::vector<float>({-1.75f, -3.75f, -5.75f, -7.75f}));
}

TEST_F(ParameterServiceTest, SyncGradientsApplyOnceEveryWorkerFinishedTheClock) {
  ASSERT_TRUE(Configure("sync", v1::ConsistencySpec::SYNC, {1, 2}).ok());
  ASSERT_TRUE(CreateTable(Spec(3, v1::DENSE, 4, "sync")).ok());
  v1::PushResponse resp;
  ASSERT_TRUE(Push(PushRequest({Block(3, {0}, {1, 1, 1, 1})}, 1, 0, "sync", 1), &resp).ok());
  ASSERT_TRUE(Push(PushRequest({Block(3, {0}, {2, 2, 2, 2})}, 1, 0, "sync", 2), &resp).ok());
  // Accumulated, not applied yet.
  EXPECT_EQ(Values(3, {0}, "sync", 0), std::vector<float>(4, 0.25f));
  ASSERT_TRUE(Clock("sync", 1, 1).ok());
  ASSERT_TRUE(Clock("sync", 2, 1).ok());
  EXPECT_EQ(Values(3, {0}, "sync", 1), std::vector<float>(4, -2.75f));
  // A late push for the closed clock is refused.
  const grpc::Status late =
      Push(PushRequest({Block(3, {0}, {1, 1, 1, 1})}, 2, 0, "sync", 1), &resp);
  EXPECT_EQ(late.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << late.error_message();
  EXPECT_EQ(Values(3, {0}, "sync", 1), std::vector<float>(4, -2.75f));
}

// A sync push retried after the worker advanced its clock (a PushPull with advance_clock whose
// reply was lost) is acknowledged as a duplicate, not refused as late.
TEST_F(ParameterServiceTest, SyncRetryAfterTheClockAdvancedIsADuplicate) {
  ASSERT_TRUE(Configure("sync", v1::ConsistencySpec::SYNC, {1}).ok());
  ASSERT_TRUE(CreateTable(Spec(3, v1::DENSE, 4, "sync")).ok());
  const v1::PushRequest req = PushRequest({Block(3, {0}, {1, 1, 1, 1})}, 7, 0, "sync", 1);
  v1::PushResponse resp;
  ASSERT_TRUE(Push(req, &resp).ok());
  ASSERT_TRUE(Clock("sync", 1, 1).ok());
  const grpc::Status retry = Push(req, &resp);
  EXPECT_TRUE(retry.ok()) << retry.error_message();
  EXPECT_TRUE(resp.duplicate());
}

}  // namespace
}  // namespace ps::parameter_service_test

namespace ps::parameter_service_test {
namespace {

TEST_F(ParameterServiceTest, BadLearningRateScaleIsRejectedAndChangesNothing) {
  const std::vector<float> before = Values(kDense, {2});
  for (float scale : {-1.0f, std::numeric_limits<float>::quiet_NaN(), 1e6f}) {
    v1::PushRequest req = PushRequest({Block(kDense, {2}, {1, 2, 3, 4})}, 77);
    req.set_lr_scale(scale);
    v1::PushResponse resp;
    grpc::Status s = Push(req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("lr_scale"), std::string::npos) << s.error_message();
    EXPECT_EQ(Values(kDense, {2}), before);
  }
}

}  // namespace
}  // namespace ps::parameter_service_test

namespace ps::parameter_service_test {
namespace {

// A pull whose answer could not be sent (keys x dim too large) is refused before any row is
// created: neither an allocation that kills the server nor rows that fill its memory.
TEST_F(ParameterServiceTest, OversizePullAnswerIsRefusedAndCreatesNoRows) {
  v1::TableSpec wide;
  wide.set_table_id(99);
  wide.set_name("wide");
  wide.set_job_id("job");
  wide.set_kind(v1::SPARSE);
  wide.set_dim(1 << 20);
  v1::CreateTableRequest create;
  *create.mutable_spec() = wide;
  v1::CreateTableResponse created;
  grpc::ClientContext cctx;
  ASSERT_TRUE(stub_->CreateTable(&cctx, create, &created).ok());
  std::vector<uint64_t> keys(100000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  v1::PullRequest pull;
  pull.set_job_id("job");
  *pull.add_blocks() = Block(99, keys);
  v1::PullResponse resp;
  grpc::ClientContext ctx;
  grpc::Status s = stub_->Pull(&ctx, pull, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("would answer"), std::string::npos) << s.error_message();
  v1::DescribeTableRequest describe;
  describe.set_table_id(99);
  v1::DescribeTableResponse described;
  grpc::ClientContext dctx;
  ASSERT_TRUE(stub_->DescribeTable(&dctx, describe, &described).ok());
  EXPECT_EQ(described.rows_on_server(), 0u);
}

// Issue 15: a sync job's caller_clock of 2^62 made the server apply clock after clock for ever.
// Clocks outside 0..kMaxClock are refused before anything changes, and a legal jump of 2^48
// clocks costs what the pending gradients cost.
TEST_F(ParameterServiceTest, HugeClocksAreRefusedAndALegalJumpAnswersAtOnce) {
  constexpr char kSync[] = "sync";
  constexpr uint32_t kSyncDense = 3;
  ASSERT_TRUE(Configure(kSync, v1::ConsistencySpec::SYNC, {1}).ok());
  ASSERT_TRUE(CreateTable(Spec(kSyncDense, v1::DENSE, 4, kSync)).ok());
  v1::PushResponse pushed;
  ASSERT_TRUE(Push(PushRequest({Block(kSyncDense, {0}, {1, 1, 1, 1})}, 1, 0, kSync), &pushed).ok());
  const std::vector<float> before = Snapshot();
  const std::vector<float> sync_before = Values(kSyncDense, {0}, kSync);
  auto configure = [&](int64_t caller_clock) {
    v1::ConfigureJobRequest req;
    req.set_job_id(kSync);
    req.mutable_consistency()->set_mode(v1::ConsistencySpec::SYNC);
    req.add_worker_ids(1);
    req.set_membership_epoch(1);
    req.set_caller_worker_id(1);
    req.set_caller_clock(caller_clock);
    v1::ConfigureJobResponse resp;
    CallContext c;
    return stub_->ConfigureJob(&c.ctx, req, &resp);
  };
  const int64_t kMax = ConsistencyGate::kMaxClock;
  const int64_t kHuge[] = {int64_t{1} << 62, std::numeric_limits<int64_t>::max(), kMax + 1};
  for (int64_t clock : kHuge) {
    SCOPED_TRACE(clock);
    grpc::Status s = configure(clock);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("caller_clock"), std::string::npos) << s.error_message();
    EXPECT_EQ(Clock(kSync, 1, clock).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    v1::PullResponse pulled;
    EXPECT_EQ(Pull({Block(kSyncDense, {0})}, &pulled, kSync, clock).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    v1::PushPullRequest pp;
    *pp.mutable_push() = PushRequest({Block(kSyncDense, {1}, {1, 1, 1, 1})}, 2, clock, kSync);
    pp.set_advance_clock(true);
    CallContext c;
    EXPECT_EQ(stub_->PushPull(&c.ctx, pp, &pulled).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  for (int64_t clock : {int64_t{-2}, std::numeric_limits<int64_t>::min()}) {
    EXPECT_EQ(configure(clock).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(Clock(kSync, 1, clock).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  // Nothing moved: the pending gradient of clock 0 is still pending, the other job untouched.
  ExpectSameBytes(Values(kSyncDense, {0}, kSync), sync_before);
  ExpectSameBytes(Snapshot(), before);

  // The largest legal clock: one answer, the clock-0 gradient applied once, pushes go on.
  const absl::Time start = absl::Now();
  ASSERT_TRUE(configure(kMax).ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(Values(kSyncDense, {0}, kSync, kMax), std::vector<float>(4, 0.25f - 1.0f));
  EXPECT_TRUE(
      Push(PushRequest({Block(kSyncDense, {0}, {1, 1, 1, 1})}, 3, kMax, kSync), &pushed).ok());
  EXPECT_EQ(Clock(kSync, 1, kMax + 1).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ExpectSameBytes(Snapshot(), before);
}

// A table id is unique on a server: a job cannot take (or redefine) another job's table.
TEST_F(ParameterServiceTest, CreateTableWithAnotherJobsTableIdIsAlreadyExists) {
  const std::vector<float> before = Snapshot();
  ASSERT_TRUE(Configure("intruder", v1::ConsistencySpec::ASYNC, {1}).ok());
  for (v1::TableKind kind : {v1::DENSE, v1::SPARSE}) {
    const grpc::Status s = CreateTable(
        Spec(kind == v1::DENSE ? kDense : kSparse, kind, kind == v1::DENSE ? 4 : 2, "intruder"));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS) << s.error_message();
    EXPECT_NE(s.error_message().find("already used by job 'job'"), std::string::npos)
        << s.error_message();
  }
  v1::PullResponse resp;
  EXPECT_EQ(Pull({Block(kDense, {0})}, &resp, "intruder").error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  ExpectSameBytes(Snapshot(), before);
}

// Issue 15: job ids and table names were stored, exported as labels and echoed in errors as
// they came. They are 1..128 (names 0..128) bytes of letters, digits and _ - . /; anything else
// is INVALID_ARGUMENT with a short, escaped message, and nothing is stored.
TEST_F(ParameterServiceTest, UnboundedOrControlCharacterNamesAreRefused) {
  const std::vector<float> before = Snapshot();
  const std::string kBadIds[] = {
      std::string(129, 'j'), std::string(64 << 10, 'x'), "a\nb", "job id",
      "\x1b[31mred",         std::string("nul\0", 4),    ""};
  for (const std::string& id : kBadIds) {
    SCOPED_TRACE(id.size());
    std::vector<grpc::Status> answers;
    answers.push_back(Configure(id, v1::ConsistencySpec::ASYNC, {1}));
    answers.push_back(CreateTable(Spec(40, v1::SPARSE, 2, id)));
    v1::PullResponse pulled;
    answers.push_back(Pull({Block(kSparse, {5})}, &pulled, id));
    v1::PushResponse pushed;
    answers.push_back(Push(PushRequest({Block(kSparse, {5}, {1, 1})}, 7, 0, id), &pushed));
    answers.push_back(Clock(id, 1, 1));
    for (const grpc::Status& s : answers) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
      EXPECT_NE(s.error_message().find("job_id"), std::string::npos) << s.error_message();
      EXPECT_LT(s.error_message().size(), 400u);
      for (char c : s.error_message()) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << s.error_message();
    }
  }
  for (const std::string& name :
       {std::string(129, 'n'), std::string("tab\tle"), std::string("caf\xc3\xa9")}) {
    v1::TableSpec spec = Spec(41, v1::SPARSE, 2, kJob);
    spec.set_name(name);
    const grpc::Status s = CreateTable(spec);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_NE(s.error_message().find("table name"), std::string::npos) << s.error_message();
  }
  v1::DescribeTableRequest describe;
  describe.set_table_id(40);
  v1::DescribeTableResponse described;
  CallContext c;
  EXPECT_EQ(stub_->DescribeTable(&c.ctx, describe, &described).error_code(),
            grpc::StatusCode::NOT_FOUND);
  ExpectSameBytes(Snapshot(), before);
  // The longest legal names work.
  const std::string longest(128, 'j');
  EXPECT_TRUE(Configure(longest, v1::ConsistencySpec::ASYNC, {1}).ok());
  v1::TableSpec spec = Spec(42, v1::SPARSE, 2, longest);
  spec.set_name("emb/layer_1.weight-" + std::string(109, 'w'));
  const grpc::Status s = CreateTable(spec);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

// Issue 15: a job could make a server hold any memory (a 1 GiB dense table in 3 s; a row per
// pulled unknown sparse key). The job's rows on a server are capped (--max_job_bytes).
TEST_F(ParameterServiceTest, AJobsRowsAreCappedPerServer) {
  server_->Shutdown();
  ParameterServerOptions options;
  options.max_message_bytes = kMaxMessageBytes;
  options.max_job_bytes = 64 << 10;  // 64 KiB
  StartWith(options);
  ASSERT_FALSE(HasFatalFailure());
  v1::PullResponse pulled;
  ASSERT_TRUE(Pull({Block(kSparse, {5, 6})}, &pulled).ok());
  const std::vector<float> before = Snapshot();

  // A dense table of 2^20 x 512 floats: refused before a byte is allocated.
  v1::TableSpec huge = Spec(9, v1::DENSE, 512, kJob);
  huge.set_num_rows(1 << 20);
  huge.set_name("huge");
  grpc::Status s = CreateTable(huge);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("job 'job': dense table 9 ('huge')"), std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("--max_job_bytes"), std::string::npos) << s.error_message();
  // Dense rows x row bytes that wrap around 2^64 are refused too (and not allocated).
  v1::TableSpec wrap = Spec(10, v1::DENSE, 1 << 20, kJob);
  wrap.set_num_rows(uint64_t{1} << 40);
  wrap.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  EXPECT_EQ(CreateTable(wrap).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Sparse pulls of unknown keys: each would become a row (a 16-byte header and 2 floats,
  // 32 bytes as stored).
  std::vector<uint64_t> keys(10000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = 1000 + i;
  s = Pull({Block(kSparse, keys)}, &pulled);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("new rows of table 2"), std::string::npos) << s.error_message();
  v1::PushResponse pushed;
  s = Push(PushRequest({Block(kSparse, keys, std::vector<float>(keys.size() * 2, 0.5f))}, 1),
           &pushed);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  ExpectSameBytes(Snapshot(), before);  // no row created, none changed; still serving
  // Rows it holds already are served and updated as before; a few new ones still fit.
  keys.resize(100);
  EXPECT_TRUE(Pull({Block(kSparse, keys)}, &pulled).ok());
  EXPECT_EQ(SparseRows(), 102u);
  // Another job has its own budget.
  ASSERT_TRUE(Configure("other", v1::ConsistencySpec::ASYNC, {1}).ok());
  ASSERT_TRUE(CreateTable(Spec(11, v1::SPARSE, 2, "other")).ok());
  keys.resize(1500);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = 1000 + i;
  EXPECT_TRUE(Pull({Block(11, keys)}, &pulled, "other").ok());
}

// Issue 15: a request stuck in a long wait kept ps_server from exiting. Shutdown wakes pulls
// waiting on slow workers and returns within its grace plus a little.
// Pull, Push and PushPull are served on gRPC's callback threads, of which there are few (2 to 16).
// Pulls that must wait for a slow worker are handed to threads of their own: more of them than
// gRPC has threads must not keep the server from serving the slow worker's calls (which would
// keep every pull waiting until its deadline).
TEST_F(ParameterServiceTest, ManyWaitingPullsDoNotHoldUpOtherCalls) {
  constexpr char kSync[] = "sync";
  constexpr uint32_t kWorkers = 24;  // worker kWorkers is the slow one
  std::vector<uint32_t> workers;
  for (uint32_t w = 1; w <= kWorkers; ++w) workers.push_back(w);
  ASSERT_TRUE(Configure(kSync, v1::ConsistencySpec::SYNC, workers).ok());
  ASSERT_TRUE(CreateTable(Spec(3, v1::DENSE, 4, kSync)).ok());
  std::vector<grpc::Status> pulled(kWorkers - 1);
  std::vector<std::vector<float>> values(kWorkers - 1);
  std::vector<std::thread> pullers;
  for (uint32_t w = 1; w < kWorkers; ++w) {
    pullers.emplace_back([&, w] {
      v1::PushPullRequest req;
      *req.mutable_push() = PushRequest({Block(3, {0}, {1, 1, 1, 1})}, 1, 0, kSync, w);
      req.set_advance_clock(true);
      req.set_clock_parts(1);
      *req.add_pull_blocks() = Block(3, {0});
      v1::PullResponse resp;
      CallContext c;
      pulled[w - 1] = stub_->PushPull(&c.ctx, req, &resp);
      if (resp.blocks_size() == 1) values[w - 1] = Floats(resp.blocks(0).values());
    });
  }
  absl::SleepFor(absl::Milliseconds(500));  // the push-pulls are waiting for the slow worker
  // Meanwhile the server answers other calls, pulls at the old clock included.
  EXPECT_EQ(Values(kDense, {0}), std::vector<float>(4, 0.25f));
  EXPECT_EQ(Values(3, {0}, kSync, 0), std::vector<float>(4, 0.25f));
  // The slow worker pushes and finishes the clock: every push-pull answers, with all the
  // gradients applied (0.25 - 24 at learning rate 1).
  v1::PushResponse resp;
  ASSERT_TRUE(Push(PushRequest({Block(3, {0}, {1, 1, 1, 1})}, 1, 0, kSync, kWorkers), &resp).ok());
  const absl::Time released = absl::Now();
  ASSERT_TRUE(Clock(kSync, kWorkers, 1).ok());
  for (std::thread& t : pullers) t.join();
  EXPECT_LT(absl::Now() - released, absl::Seconds(5)) << "the pulls ran into their deadline";
  for (uint32_t w = 1; w < kWorkers; ++w) {
    EXPECT_TRUE(pulled[w - 1].ok()) << "worker " << w << ": " << pulled[w - 1].error_message();
    EXPECT_EQ(values[w - 1], std::vector<float>(4, 0.25f - kWorkers)) << "worker " << w;
  }
}

// Requests and pull answers over 4 MiB (a plain protobuf client's large message) are served on a
// thread other than gRPC's; they give the same results as small ones.
TEST_F(ParameterServiceTest, LargeRequestsAndAnswersAreServedAlike) {
  server_->Shutdown();
  ParameterServerOptions options;
  options.max_message_bytes = 32 << 20;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  StartWith(options, args);
  ASSERT_FALSE(HasFatalFailure());
  constexpr uint32_t kWide = 3;
  constexpr uint32_t kDim = 4096;  // 16 KiB rows
  constexpr uint32_t kRows = 320;  // 5 MiB
  v1::TableSpec spec = Spec(kWide, v1::DENSE, kDim, kJob);
  spec.set_num_rows(kRows + 1);
  ASSERT_TRUE(CreateTable(spec).ok());
  std::vector<uint64_t> keys(kRows);
  for (uint32_t k = 0; k < kRows; ++k) keys[k] = k;
  const size_t n = size_t{kRows} * kDim;
  // A small request with a large answer.
  EXPECT_TRUE(Values(kWide, keys) == std::vector<float>(n, 0.25f));
  // A large push, then a large push-pull.
  std::vector<float> grad(n);
  for (size_t i = 0; i < n; ++i) grad[i] = static_cast<float>(i % 7) * 0.125f;
  v1::PushResponse resp;
  ASSERT_TRUE(Push(PushRequest({Block(kWide, keys, grad)}, 7), &resp).ok());
  v1::PushPullRequest req;
  *req.mutable_push() = PushRequest({Block(kWide, keys, grad)}, 8);
  *req.add_pull_blocks() = Block(kWide, keys);
  v1::PullResponse answer;
  CallContext c;
  ASSERT_TRUE(stub_->PushPull(&c.ctx, req, &answer).ok());
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = 0.25f - 2 * grad[i];
  ASSERT_EQ(answer.blocks_size(), 1);
  EXPECT_TRUE(Floats(answer.blocks(0).values()) == want);
  EXPECT_TRUE(Values(kWide, keys) == want);
  EXPECT_TRUE(Values(kWide, {kRows}) == std::vector<float>(kDim, 0.25f));

  // Bad large requests, served on the pool too, are refused and change nothing.
  std::vector<float> bad = grad;
  bad[n - 1] = kNaN;
  grpc::Status s = Push(PushRequest({Block(kWide, keys, bad)}, 9), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  s = Push(PushRequest({Block(kWide, keys, std::vector<float>(n - 1, 1.0f))}, 10), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  s = Push(PushRequest({Block(77, keys, grad)}, 11), &resp);  // no such table
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Values(kWide, keys) == want);
}

TEST_F(ParameterServiceTest, ShutdownDoesNotWaitForPullsBlockedOnSlowWorkers) {
  constexpr char kSync[] = "sync";
  ASSERT_TRUE(Configure(kSync, v1::ConsistencySpec::SYNC, {1, 2}).ok());
  ASSERT_TRUE(CreateTable(Spec(3, v1::DENSE, 4, kSync)).ok());
  ASSERT_TRUE(Clock(kSync, 1, 1).ok());  // worker 2 never finishes clock 0
  grpc::Status pulled;
  std::thread puller([&] {
    v1::PullResponse resp;
    pulled = Pull({Block(3, {0})}, &resp, kSync, /*clock=*/1);  // waits up to max_pull_wait (10 s)
  });
  absl::SleepFor(absl::Milliseconds(300));  // the pull is waiting
  const absl::Time start = absl::Now();
  server_->Shutdown(absl::Milliseconds(500));
  const absl::Duration took = absl::Now() - start;
  puller.join();
  EXPECT_LT(took, absl::Seconds(2));
  EXPECT_FALSE(pulled.ok());
  EXPECT_TRUE(pulled.error_code() == grpc::StatusCode::UNAVAILABLE ||
              pulled.error_code() == grpc::StatusCode::CANCELLED)
      << pulled.error_code() << " " << pulled.error_message();
}

}  // namespace
}  // namespace ps::parameter_service_test
