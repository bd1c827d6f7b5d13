// DropJob end to end: a real server in-process on a free port, called through a real stub. A
// dropped job's state is freed and its requests get a clear error; other jobs are untouched, and
// the server goes on serving.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/testing/key_blocks.h"
#include "gtest/gtest.h"
#include "ps/v1/parameter_server.grpc.pb.h"
#include "server/parameter_server.h"
#include "server/testing/service_fixture.h"

namespace ps::parameter_service_drop_test {
namespace {

using testing::Block;
using testing::CallContext;
using testing::Floats;
using v1::KeyBlock;

constexpr char kJob[] = "job-1";
constexpr char kOther[] = "job-2";
// kJob: dense table 1 (dim 4, 8 rows of 0.25, sgd) and sparse table 2 (dim 2, adagrad): 32 bytes
// a row as stored (a 16-byte header, 16 bytes of floats). kOther: sparse table 3.
constexpr uint32_t kDense = 1;
constexpr uint32_t kSparse = 2;
constexpr uint32_t kOtherSparse = 3;

v1::TableSpec Spec(uint32_t id, const std::string& job) {
  v1::TableSpec spec;
  spec.set_table_id(id);
  spec.set_name(id == kDense ? "dense" : "sparse");
  spec.set_job_id(job);
  spec.set_kind(id == kDense ? v1::DENSE : v1::SPARSE);
  spec.set_dim(id == kDense ? 4 : 2);
  spec.mutable_initializer()->set_kind(v1::InitializerSpec::CONSTANT);
  spec.mutable_initializer()->set_value(0.25f);
  if (id == kDense) spec.set_num_rows(8);
  spec.mutable_optimizer()->set_kind(id == kDense ? v1::OptimizerSpec::SGD
                                                  : v1::OptimizerSpec::ADAGRAD);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  return spec;
}

bool Mentions(const grpc::Status& s, const std::string& text) {
  return s.error_message().find(text) != std::string::npos;
}

class DropJobTest : public testing::ServiceFixture {
 protected:
  void SetUp() override {
    ParameterServerOptions options;
    options.max_pull_wait = absl::Seconds(30);
    options.checkpoint_roots = {::testing::TempDir()};
    ASSERT_NO_FATAL_FAILURE(StartServer(options));
    ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC, {1}).ok());
    ASSERT_TRUE(Configure(kOther, v1::ConsistencySpec::ASYNC, {1}).ok());
    for (const auto& [id, job] : {std::pair<uint32_t, const char*>{kDense, kJob},
                                  {kSparse, kJob},
                                  {kOtherSparse, kOther}}) {
      ASSERT_TRUE(CreateTable(Spec(id, job)).ok());
    }
    ASSERT_TRUE(Push(kJob, {Block(kSparse, {1, 2, 3}, std::vector<float>(6, 1.0f))}).ok());
    ASSERT_TRUE(Push(kOther, {Block(kOtherSparse, {1, 2}, std::vector<float>(4, 1.0f))}).ok());
  }
  grpc::Status Configure(const std::string& job, v1::ConsistencySpec::Mode mode,
                         const std::vector<uint32_t>& workers) {
    v1::ConfigureJobRequest req;
    req.set_job_id(job);
    req.mutable_consistency()->set_mode(mode);
    for (uint32_t w : workers) req.add_worker_ids(w);
    req.set_membership_epoch(1);
    req.set_caller_clock(-1);
    v1::ConfigureJobResponse resp;
    CallContext c;
    return stub_->ConfigureJob(&c.ctx, req, &resp);
  }
  grpc::Status Push(const std::string& job, const std::vector<KeyBlock>& blocks,
                    uint32_t worker = 1, int64_t clock = 0) {
    v1::PushRequest req;
    req.set_job_id(job);
    req.set_worker_id(worker);
    req.set_request_id(++request_id_);
    req.set_clock(clock);
    for (const KeyBlock& b : blocks) *req.add_blocks() = b;
    v1::PushResponse resp;
    CallContext c;
    return stub_->Push(&c.ctx, req, &resp);
  }
  grpc::Status Pull(const std::string& job, const std::vector<KeyBlock>& blocks,
                    std::vector<float>* values = nullptr, int64_t clock = 0) {
    v1::PullRequest req;
    req.set_job_id(job);
    req.set_worker_id(1);
    req.set_clock(clock);
    for (const KeyBlock& b : blocks) *req.add_blocks() = b;
    v1::PullResponse resp;
    CallContext c;
    grpc::Status s = stub_->Pull(&c.ctx, req, &resp);
    if (s.ok() && values != nullptr) {
      values->clear();
      for (const KeyBlock& b : resp.blocks()) {
        for (float v : Floats(b.values())) values->push_back(v);
      }
    }
    return s;
  }
  grpc::Status Drop(const std::string& job, v1::DropJobResponse* resp) {
    v1::DropJobRequest req;
    req.set_job_id(job);
    CallContext c;
    return stub_->DropJob(&c.ctx, req, resp);
  }
  std::vector<float> OtherValues() {
    std::vector<float> v;
    EXPECT_TRUE(Pull(kOther, {Block(kOtherSparse, {1, 2})}, &v).ok());
    return v;
  }

  std::atomic<uint64_t> request_id_{0};  // pushes come from several threads
};

TEST_F(DropJobTest, FreesTheJobAndAnswersItsRequestsWithAClearError) {
  const std::vector<float> other = OtherValues();
  v1::DropJobResponse dropped;
  ASSERT_TRUE(Drop(kJob, &dropped).ok());
  EXPECT_EQ(dropped.tables_dropped(), 2u);
  EXPECT_EQ(dropped.bytes_freed(), 8 * 32 + 3 * 32u);  // 8 dense rows, 3 sparse ones
  EXPECT_EQ(server_->store()->NumRows(kDense), 0u);
  EXPECT_EQ(server_->store()->NumRows(kSparse), 0u);
  EXPECT_EQ(server_->store()->JobBytes(kJob), 0u);

  std::vector<std::pair<std::string, grpc::Status>> answers;
  answers.emplace_back("pull", Pull(kJob, {Block(kDense, {0})}));
  answers.emplace_back("push", Push(kJob, {Block(kSparse, {9}, {1, 1})}));
  {
    v1::PushPullRequest req;
    req.mutable_push()->set_job_id(kJob);
    req.mutable_push()->set_worker_id(1);
    req.mutable_push()->set_request_id(++request_id_);
    *req.add_pull_blocks() = Block(kDense, {0});
    v1::PullResponse resp;
    CallContext c;
    answers.emplace_back("push_pull", stub_->PushPull(&c.ctx, req, &resp));
  }
  {
    v1::ClockRequest req;
    req.set_job_id(kJob);
    req.set_worker_id(1);
    req.set_clock(1);
    v1::ClockResponse resp;
    CallContext c;
    answers.emplace_back("clock", stub_->Clock(&c.ctx, req, &resp));
  }
  answers.emplace_back("configure", Configure(kJob, v1::ConsistencySpec::ASYNC, {1}));
  answers.emplace_back("create_table", CreateTable(Spec(kDense, kJob)));
  {
    v1::CheckpointRequest req;
    req.set_job_id(kJob);
    req.set_checkpoint_id(1);
    req.set_path(::testing::TempDir() + "/drop_test_ckpt");
    req.set_shard_epoch(1);
    v1::CheckpointResponse resp;
    CallContext c;
    answers.emplace_back("checkpoint", stub_->Checkpoint(&c.ctx, req, &resp));
  }
  {
    v1::RestoreRequest req;
    req.set_job_id(kJob);
    req.mutable_order()->set_shard_epoch(1);
    v1::RestoreResponse resp;
    CallContext c;
    answers.emplace_back("restore", stub_->Restore(&c.ctx, req, &resp));
  }
  for (const auto& [what, s] : answers) {
    SCOPED_TRACE(what);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
    EXPECT_TRUE(Mentions(s, "job 'job-1' was dropped from this server")) << s.error_message();
  }
  EXPECT_EQ(server_->store()->NumRows(kDense), 0u);
  EXPECT_EQ(server_->store()->NumRows(kSparse), 0u);

  // The other job: its rows as they were, and it trains on.
  EXPECT_EQ(OtherValues(), other);
  ASSERT_TRUE(Push(kOther, {Block(kOtherSparse, {1}, {1, 1})}).ok());
  EXPECT_NE(OtherValues(), other);

  // Idempotent; unknown jobs too.
  ASSERT_TRUE(Drop(kJob, &dropped).ok());
  EXPECT_EQ(dropped.tables_dropped(), 0u);
  EXPECT_EQ(dropped.bytes_freed(), 0u);
  ASSERT_TRUE(Drop("job-77", &dropped).ok());
  EXPECT_EQ(dropped.tables_dropped(), 0u);
  EXPECT_EQ(Drop("", &dropped).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// A job that ended frees its table ids: a new job creates tables with the same ids and gets
// their initial values, none of the old rows.
TEST_F(DropJobTest, ANewJobCreatesTheSameTableIdsFromScratch) {
  v1::DropJobResponse dropped;
  ASSERT_TRUE(Drop(kJob, &dropped).ok());
  ASSERT_TRUE(Configure("job-3", v1::ConsistencySpec::ASYNC, {1}).ok());
  ASSERT_TRUE(CreateTable(Spec(kDense, "job-3")).ok());
  ASSERT_TRUE(CreateTable(Spec(kSparse, "job-3")).ok());
  EXPECT_EQ(server_->store()->NumRows(kSparse), 0u);
  std::vector<float> values;
  ASSERT_TRUE(Pull("job-3", {Block(kSparse, {1, 2, 3})}, &values).ok());
  EXPECT_EQ(values, std::vector<float>(6, 0.25f));  // the old job pushed these keys
  ASSERT_TRUE(Push("job-3", {Block(kDense, {0}, {1, 1, 1, 1})}).ok());
  ASSERT_TRUE(Pull("job-3", {Block(kDense, {0})}, &values).ok());
  EXPECT_EQ(values, std::vector<float>(4, -0.75f));
}

// A sync pull waiting for a slow worker is woken by the drop, with the clear error.
TEST_F(DropJobTest, WakesAPullWaitingForASlowWorker) {
  ASSERT_TRUE(Configure("job-4", v1::ConsistencySpec::SYNC, {1, 2}).ok());
  v1::TableSpec spec = Spec(kDense, "job-4");
  spec.set_table_id(40);
  ASSERT_TRUE(CreateTable(spec).ok());
  grpc::Status waited;
  std::atomic<bool> done{false};
  std::thread puller([&] {
    waited = Pull("job-4", {Block(40, {0})}, nullptr, /*clock=*/1);  // worker 2 is at 0
    done.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(done.load());
  v1::DropJobResponse dropped;
  ASSERT_TRUE(Drop("job-4", &dropped).ok());
  puller.join();
  EXPECT_EQ(waited.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << waited.error_message();
  EXPECT_TRUE(Mentions(waited, "job 'job-4' was dropped")) << waited.error_message();
}

// Pushes and pulls of new keys race with the drop over gRPC: each is answered OK or
// FAILED_PRECONDITION, nothing of the job is left, and the server serves the other job.
TEST_F(DropJobTest, RequestsRacingTheDropGetAnErrorNotACrash) {
  const std::vector<float> other = OtherValues();
  std::atomic<bool> dropped{false};
  std::atomic<int> unexpected{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 100000; ++i) {
        const uint64_t key = 1000 + t * 1000000 + i;
        const grpc::Status s = t % 2 == 0 ? Push(kJob, {Block(kSparse, {key}, {1, 1})})
                                          : Pull(kJob, {Block(kSparse, {key}), Block(kDense, {1})});
        if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
          ++refused;
        } else if (!s.ok()) {
          ADD_FAILURE() << s.error_message();
          ++unexpected;
        }
        if (dropped.load() && !s.ok()) break;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  v1::DropJobResponse resp;
  ASSERT_TRUE(Drop(kJob, &resp).ok());
  EXPECT_EQ(resp.tables_dropped(), 2u);
  dropped.store(true);
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(unexpected.load(), 0);
  EXPECT_GE(refused.load(), 4);  // every thread ends on a refused request
  EXPECT_EQ(server_->store()->NumRows(kDense), 0u);
  EXPECT_EQ(server_->store()->NumRows(kSparse), 0u);
  EXPECT_EQ(OtherValues(), other);
}

}  // namespace
}  // namespace ps::parameter_service_drop_test
