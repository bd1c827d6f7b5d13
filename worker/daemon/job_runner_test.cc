#include "worker/daemon/job_runner.h"

#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "gtest/gtest.h"
#include "client/data_ranges.h"
#include "client/job_admin.h"
#include "client/rpc_client.h"
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

// The scheduler's side of dynamic assignment, in memory: ranges in index order, each handed out
// once; records who read what.
class MemoryLeaser {
 public:
  MemoryLeaser(int64_t ranges, int64_t per_epoch, int64_t workers)
      : ranges_(ranges), per_epoch_(per_epoch), workers_(workers) {}
  absl::StatusOr<v1::LeaseDataResponse> Lease(uint32_t worker, const v1::LeaseDataRequest& r) {
    absl::MutexLock l(&mu_);
    for (uint64_t index : r.finished()) {
      if (held_.erase(index) == 1) ++done_;
    }
    v1::LeaseDataResponse resp;
    if (r.take() && next_ < ranges_) {
      v1::DataRange& range = *resp.mutable_range();
      range.set_index(next_);
      range.set_epoch(static_cast<int>(next_ / per_epoch_) + 1);
      range.set_position(next_ % per_epoch_);
      range.set_clock(next_ / workers_);
      held_.insert(next_++);
      read_by[worker].push_back(range);
    } else if (done_ < ranges_) {
      resp.set_retry_after_ms(1);
    }
    resp.set_all_done(done_ == ranges_);
    resp.set_epochs_done(static_cast<int>(
        (held_.empty() ? next_ : std::min<int64_t>(next_, *held_.begin())) / per_epoch_));
    resp.set_total_clocks((ranges_ + workers_ - 1) / workers_);
    return resp;
  }
  std::map<uint32_t, std::vector<v1::DataRange>> read_by;

 private:
  absl::Mutex mu_;
  const int64_t ranges_, per_epoch_, workers_;
  int64_t next_ = 0, done_ = 0;
  std::set<int64_t> held_;
};

class WorkerLeaser final : public DataLeaser {
 public:
  WorkerLeaser(MemoryLeaser* ledger, uint32_t worker) : ledger_(ledger), worker_(worker) {}
  absl::StatusOr<v1::LeaseDataResponse> Lease(v1::LeaseDataRequest r) override {
    return ledger_->Lease(worker_, r);
  }

 private:
  MemoryLeaser* const ledger_;
  const uint32_t worker_;
};

// Records each step's clock too.
class ClockRecordingModel : public RecordingModel {
 public:
  explicit ClockRecordingModel(int64_t examples) : RecordingModel(examples) {}
  absl::StatusOr<StepStats> TrainStep(RpcClient* client, absl::Span<const int64_t> examples,
                                      float scale) override {
    clocks.push_back(client->clock());
    return RecordingModel::TrainStep(client, examples, scale);
  }
  std::vector<int64_t> clocks;
};

using JobRunnerLeaseTest = testing::InProcessServerTest;

// Two workers, one three times slower, read the ranges they are handed at the ranges' clocks:
// the fast one reads more, and together they read every example once per epoch.
TEST_F(JobRunnerLeaseTest, WorkersReadTheirRangesAtTheirClocksEveryExampleOncePerEpoch) {
  constexpr int64_t kExamples = 100;
  constexpr int kBatch = 8, kEpochs = 3;
  MemoryLeaser ledger(/*ranges=*/13 * kEpochs, /*per_epoch=*/13, /*workers=*/2);
  v1::ConsistencySpec ssp;
  ssp.set_mode(v1::ConsistencySpec::SSP);
  ssp.set_staleness(2);
  ssp.set_data_clocks(true);
  std::vector<std::unique_ptr<RpcClient>> clients;
  for (uint32_t w : {0u, 1u}) {
    clients.push_back(Connect("leased", w));
    ASSERT_NE(clients.back(), nullptr);
    ASSERT_TRUE(JobAdmin(*clients.back()).ConfigureJob(ssp, {0, 1}, 1).ok());
  }
  ClockRecordingModel models[2] = {ClockRecordingModel(kExamples), ClockRecordingModel(kExamples)};
  absl::Status results[2];
  std::vector<std::thread> threads;
  for (uint32_t w : {0u, 1u}) {
    threads.emplace_back([&, w]() {
      JobRunnerOptions ro;
      ro.epochs = kEpochs;
      ro.batch_size = kBatch;
      ro.num_workers = 2;
      ro.consistency = ssp;
      ro.seed = 9;
      ro.dynamic_data = true;
      ro.slow_factor = w == 1 ? 3 : 1;
      JobRunner runner(&models[w], clients[w].get(), ro);
      runner.SetShard(w, 2);
      WorkerLeaser leaser(&ledger, w);
      runner.set_data_leaser(&leaser);
      results[w] = runner.Run(nullptr, nullptr, 0);
      EXPECT_TRUE(runner.progress().finished);
      EXPECT_EQ(runner.progress().clock, 20);  // 39 ranges, 2 per clock
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(results[0].ok()) << results[0];
  ASSERT_TRUE(results[1].ok()) << results[1];
  std::map<int, std::map<int64_t, int>> reads;
  for (uint32_t w : {0u, 1u}) {
    const auto& ranges = ledger.read_by[w];
    ASSERT_EQ(ranges.size(), models[w].batches.size());
    for (size_t i = 0; i < ranges.size(); ++i) {
      EXPECT_EQ(models[w].batches[i],
                RangeExamples(9, ranges[i].epoch(), kExamples, kBatch, ranges[i].position()));
      EXPECT_EQ(models[w].clocks[i], ranges[i].clock());
      for (int64_t e : models[w].batches[i]) ++reads[ranges[i].epoch()][e];
    }
  }
  EXPECT_GT(ledger.read_by[0].size(), ledger.read_by[1].size());
  ASSERT_EQ(reads.size(), static_cast<size_t>(kEpochs));
  for (const auto& [epoch, counts] : reads) {
    EXPECT_EQ(counts.size(), static_cast<size_t>(kExamples)) << "epoch " << epoch;
    for (const auto& [e, n] : counts) EXPECT_EQ(n, 1) << "example " << e << " epoch " << epoch;
  }
}

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
