#include "worker/daemon/job_runner.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "gtest/gtest.h"
#include "worker/client/job_admin.h"
#include "worker/client/rpc_client.h"
#include "worker/models/model.h"
#include "worker/testing/server_fixture.h"

namespace ps {
namespace {

TEST(LearningRateScaleTest, Constant) {
  v1::LearningRateSchedule s;
  EXPECT_EQ(LearningRateScale(s, 0, 10, 100), 1.0f);
  EXPECT_EQ(LearningRateScale(s, 99, 10, 100), 1.0f);
}

TEST(LearningRateScaleTest, StepDecaysEveryStepEpochs) {
  v1::LearningRateSchedule s;
  s.set_kind(v1::LearningRateSchedule::STEP);
  s.set_gamma(0.5f);
  s.set_step_epochs(2);
  // 10 clocks per epoch: epochs 1-2 at 1, 3-4 at 0.5, 5 at 0.25.
  EXPECT_FLOAT_EQ(LearningRateScale(s, 0, 10, 50), 1.0f);
  EXPECT_FLOAT_EQ(LearningRateScale(s, 19, 10, 50), 1.0f);
  EXPECT_FLOAT_EQ(LearningRateScale(s, 20, 10, 50), 0.5f);
  EXPECT_FLOAT_EQ(LearningRateScale(s, 40, 10, 50), 0.25f);
  s.clear_gamma();        // default 0.1
  s.clear_step_epochs();  // default 1
  EXPECT_FLOAT_EQ(LearningRateScale(s, 10, 10, 50), 0.1f);
}

TEST(LearningRateScaleTest, CosineGoesFromOneToFinalFraction) {
  v1::LearningRateSchedule s;
  s.set_kind(v1::LearningRateSchedule::COSINE);
  s.set_final_fraction(0.2f);
  EXPECT_FLOAT_EQ(LearningRateScale(s, 0, 10, 100), 1.0f);
  EXPECT_NEAR(LearningRateScale(s, 50, 10, 100), 0.6f, 1e-6);
  EXPECT_NEAR(LearningRateScale(s, 100, 10, 100), 0.2f, 1e-6);
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// Records the examples of every step; each step advances the client's clock once.
class RecordingModel : public Model {
 public:
  explicit RecordingModel(int64_t examples) : examples_(examples) {}
  std::vector<v1::TableSpec> Tables(const std::string&, uint32_t) const override { return {}; }
  int64_t num_train_examples() const override { return examples_; }
  absl::Status Start(RpcClient*) override { return absl::OkStatus(); }
  absl::StatusOr<StepStats> TrainStep(RpcClient* client, absl::Span<const int64_t> examples,
                                      float) override {
    batches.emplace_back(examples.begin(), examples.end());
    absl::Status s = client->Clock();
    if (!s.ok()) return s;
    StepStats stats;
    stats.examples = static_cast<int64_t>(examples.size());
    return stats;
  }
  absl::StatusOr<StepStats> Evaluate(RpcClient*) override { return StepStats(); }

  std::vector<std::vector<int64_t>> batches;

 private:
  const int64_t examples_;
};

class JobRunnerDataTest : public testing::InProcessServerTest {
 protected:
  // The batches of a run of rank 1 of 2 that starts at `start_clock`.
  std::vector<std::vector<int64_t>> Run(const std::string& job, int64_t start_clock) {
    std::unique_ptr<RpcClient> client = Connect(job);
    if (client == nullptr) return {};
    v1::ConsistencySpec async;
    async.set_mode(v1::ConsistencySpec::ASYNC);
    // The server learns where this worker is, as a server that took over slots does.
    EXPECT_TRUE(JobAdmin(*client).ConfigureJob(async, {0}, 1, nullptr, start_clock).ok());
    client->SetClock(start_clock);
    RecordingModel model(/*examples=*/100);
    JobRunnerOptions ro;
    ro.epochs = 3;
    ro.batch_size = 8;
    ro.num_workers = 2;
    ro.consistency = async;
    ro.seed = 5;
    JobRunner runner(&model, client.get(), ro);
    runner.SetShard(1, 2);
    EXPECT_TRUE(runner.Run(nullptr, nullptr, 0).ok());
    return model.batches;
  }
};

// A run restarted at clock c (after a server loss or a restore) reads what an undisturbed run
// reads from clock c on: same pass over the shard, same place in it.
TEST_F(JobRunnerDataTest, ARunStartingAtAClockReadsOnWhereAnUndisturbedRunWould) {
  const std::vector<std::vector<int64_t>> whole = Run("data-whole", 0);
  ASSERT_EQ(whole.size(), 18u);  // 100 / (8 x 2) = 6 clocks per epoch, 3 epochs
  for (int64_t start : {1, 6, 7, 13}) {
    const std::vector<std::vector<int64_t>> rest = Run(absl::StrCat("data-", start), start);
    ASSERT_EQ(rest.size(), whole.size() - start) << "start " << start;
    for (size_t i = 0; i < rest.size(); ++i) {
      EXPECT_EQ(rest[i], whole[start + i]) << "start " << start << ", step " << start + i;
    }
  }
  // Every example of the batches is in rank 1's shard (odd indices).
  for (const auto& batch : whole) {
    for (int64_t e : batch) EXPECT_EQ(e % 2, 1);
  }
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// A model whose steps fail with a local error of a code that servers use too.
class FailingModel : public RecordingModel {
 public:
  FailingModel() : RecordingModel(100) {}
  absl::StatusOr<StepStats> TrainStep(RpcClient*, absl::Span<const int64_t>, float) override {
    return absl::FailedPreconditionError("no kernel image for this GPU");
  }
};

using JobRunnerErrorTest = testing::InProcessServerTest;

// The worker daemon waits for a new shard map only after a server's error: a step failing on a
// stopped server says so (IsRpcError), a model's own error of the same code does not.
TEST_F(JobRunnerErrorTest, ServerErrorsAreTellableFromLocalOnes) {
  std::unique_ptr<RpcClient> client = Connect("errors", 0, absl::Seconds(2));
  ASSERT_NE(client, nullptr);
  v1::ConsistencySpec async;
  async.set_mode(v1::ConsistencySpec::ASYNC);
  ASSERT_TRUE(JobAdmin(*client).ConfigureJob(async, {0}).ok());
  JobRunnerOptions ro;
  ro.batch_size = 10;
  ro.consistency = async;
  {
    FailingModel model;
    JobRunner runner(&model, client.get(), ro);
    const absl::Status s = runner.Run(nullptr, nullptr, 0);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_FALSE(IsRpcError(s)) << s;
  }
  server_->Shutdown();
  server_.reset();
  RecordingModel model(100);
  JobRunner runner(&model, client.get(), ro);
  const absl::Status s = runner.Run(nullptr, nullptr, 0);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(IsRpcError(s)) << s;
  EXPECT_NE(s.message().find("step 1 of "), std::string::npos) << s;
}

}  // namespace
}  // namespace ps
