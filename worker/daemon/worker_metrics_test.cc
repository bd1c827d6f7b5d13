// WorkerMetrics through a JobRunner training a tiny fake model over a real in-process server.
#include "worker/daemon/worker_metrics.h"

#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/daemon_probes.h"
#include "gtest/gtest.h"
#include "client/job_admin.h"
#include "client/rpc_client.h"
#include "worker/daemon/job_runner.h"
#include "worker/models/model.h"
#include "worker/testing/server_fixture.h"

namespace ps {
namespace {

constexpr char kJob[] = "metrics-job";
constexpr uint64_t kNumKeys = 10;
constexpr int64_t kNumExamples = 64;

// One dense table of kNumKeys rows of dim 1. A step spends a little time "computing", then
// pushes a gradient for every key and pulls them all (one PushPull). Start() pulls once.
class FakeModel : public Model {
 public:
  std::vector<v1::TableSpec> Tables(const std::string& job_id,
                                    uint32_t first_table_id) const override {
    table_id_ = first_table_id;
    v1::TableSpec spec;
    spec.set_table_id(first_table_id);
    spec.set_name("fake/weights");
    spec.set_job_id(job_id);
    spec.set_kind(v1::DENSE);
    spec.set_dim(1);
    spec.set_num_rows(kNumKeys);
    spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
    spec.mutable_optimizer()->set_learning_rate(0.1f);
    return {spec};
  }
  int64_t num_train_examples() const override { return kNumExamples; }

  absl::Status Start(RpcClient* client) override {
    keys_ = DenseKeys(kNumKeys);
    values_.assign(kNumKeys, 0.0f);
    grads_.assign(kNumKeys, 0.5f);
    return client->Pull({{table_id_, keys_, nullptr, values_.data()}});
  }

  absl::StatusOr<StepStats> TrainStep(RpcClient* client, absl::Span<const int64_t> examples,
                                      float grad_scale) override {
    absl::SleepFor(absl::Milliseconds(1));  // the model's math
    absl::Status s = client->PushPull({{table_id_, keys_, grads_.data(), nullptr}},
                                      {{table_id_, keys_, nullptr, values_.data()}});
    if (!s.ok()) return s;
    StepStats stats;
    stats.examples = static_cast<int64_t>(examples.size());
    stats.loss_sum = 0.25 * static_cast<double>(examples.size());
    stats.correct = stats.examples / 2;
    return stats;
  }

  absl::StatusOr<StepStats> Evaluate(RpcClient* client) override {
    StepStats stats;
    stats.examples = 4;
    stats.correct = 3;
    stats.loss_sum = 1;
    return stats;
  }

 private:
  mutable uint32_t table_id_ = 1;
  std::vector<uint64_t> keys_;
  std::vector<float> values_;
  std::vector<float> grads_;
};

double Sample(prometheus::Registry& registry, const std::string& name,
              const std::map<std::string, std::string>& labels = {}, bool histogram_sum = false) {
  return testing::MetricValue(registry, name, labels, histogram_sum);
}

class WorkerMetricsTest : public testing::InProcessServerTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(InProcessServerTest::SetUp());
    client_ = Connect(kJob);
    ASSERT_NE(client_, nullptr);
    ASSERT_TRUE(
        JobAdmin(*client_).ConfigureJob(v1::ConsistencySpec(), {0}).ok());  // sync, worker 0
    for (const v1::TableSpec& spec : model_.Tables(kJob, 1)) {
      ASSERT_TRUE(client_->CreateTable(spec).ok());
    }
  }
  void TearDown() override {
    client_.reset();
    InProcessServerTest::TearDown();
  }

  double Job(const std::string& name) { return Sample(registry_, name, {{"job", kJob}}); }

  prometheus::Registry registry_;
  WorkerMetrics metrics_{registry_};
  std::unique_ptr<RpcClient> client_;
  FakeModel model_;
};

TEST_F(WorkerMetricsTest, RunnerCountsStepsSamplesKeysAndTime) {
  JobRunnerOptions ro;
  ro.epochs = 2;
  ro.batch_size = 8;  // 8 clocks per epoch, 16 in all
  JobRunner runner(&model_, client_.get(), ro, &metrics_);
  ASSERT_EQ(runner.total_clocks(), 16);
  ASSERT_TRUE(runner.Run(nullptr, nullptr, 0).ok());

  EXPECT_EQ(Job("ps_worker_steps_total"), 16);
  EXPECT_EQ(Job("ps_worker_samples_total"), 16 * 8);
  EXPECT_EQ(Job("ps_worker_job_clock"), 16);
  // Every step pushes and pulls every key; Start() pulls them once more.
  EXPECT_EQ(Job("ps_worker_pushed_keys_total"), 16 * kNumKeys);
  EXPECT_EQ(Job("ps_worker_pulled_keys_total"), 17 * kNumKeys);
  EXPECT_DOUBLE_EQ(Job("ps_worker_loss"), 0.25);
  EXPECT_DOUBLE_EQ(Job("ps_worker_accuracy"), 0.5);
  EXPECT_GT(Job("ps_worker_samples_per_second"), 0);
  EXPECT_GT(Job("ps_worker_compute_seconds_total"), 0);
  EXPECT_GT(Job("ps_worker_communication_seconds_total"), 0);
  // One observation per request with a pull; one worker in sync mode is never ahead.
  EXPECT_EQ(Job("ps_worker_staleness_clocks"), 17);
  EXPECT_EQ(Sample(registry_, "ps_worker_staleness_clocks", {{"job", kJob}}, true), 0);
  EXPECT_EQ(Sample(registry_, "ps_worker_rpc_retries_total", {}), 0);
  // No evaluation: no test-accuracy series.
  EXPECT_EQ(Job("ps_worker_test_accuracy"), -1);
}

TEST_F(WorkerMetricsTest, EvaluationSetsTestAccuracy) {
  JobRunnerOptions ro;
  ro.epochs = 1;
  ro.batch_size = 32;
  ro.evaluate = true;
  JobRunner runner(&model_, client_.get(), ro, &metrics_);
  ASSERT_TRUE(runner.Run(nullptr, nullptr, 0).ok());
  EXPECT_DOUBLE_EQ(Job("ps_worker_test_accuracy"), 0.75);
  EXPECT_EQ(Job("ps_worker_steps_total"), 2);
}

// Without metrics (ps_worker --metrics_listen=off) no series exist, and the progress still
// splits the step time: the model waited on its push-pulls, which is communication.
TEST_F(WorkerMetricsTest, RunnerWithoutMetricsRecordsNoSeriesAndStillSplitsTime) {
  JobRunnerOptions ro;
  ro.batch_size = 32;
  JobRunner runner(&model_, client_.get(), ro);
  ASSERT_TRUE(runner.Run(nullptr, nullptr, 0).ok());
  EXPECT_EQ(Job("ps_worker_steps_total"), -1);
  const JobProgress p = runner.progress();
  EXPECT_GT(p.compute_seconds, 0);  // the model's 1 ms per step
  // Not > 0: the in-process server may answer every request before the step waits on it
  // (then nothing was blocked; seen under ASan in CI).
  EXPECT_GE(p.communication_seconds, 0);
  EXPECT_EQ(p.hidden_communication_seconds, 0);  // it waits for every request
}

TEST(WorkerMetricsJobsTest, SeriesOfOldJobsAreRemoved) {
  prometheus::Registry registry;
  WorkerMetrics metrics(registry);
  std::shared_ptr<WorkerMetrics::Job> held = metrics.ForJob("job-0");
  held->RecordStep(1, absl::Milliseconds(1), absl::Milliseconds(1));
  for (int j = 1; j <= WorkerMetrics::kRetainedJobs + 1; ++j) {
    metrics.ForJob(absl::StrCat("job-", j))
        ->RecordStep(1, absl::ZeroDuration(), absl::ZeroDuration());
  }
  // job-0 is held, so it stays; job-1 is the oldest one nobody holds.
  EXPECT_EQ(Sample(registry, "ps_worker_steps_total", {{"job", "job-0"}}), 1);
  EXPECT_EQ(Sample(registry, "ps_worker_steps_total", {{"job", "job-1"}}), -1);
  EXPECT_EQ(Sample(registry, "ps_worker_steps_total",
                   {{"job", absl::StrCat("job-", WorkerMetrics::kRetainedJobs + 1)}}),
            1);
  EXPECT_EQ(metrics.ForJob("job-0"), held);
  held.reset();
}

}  // namespace
}  // namespace ps
