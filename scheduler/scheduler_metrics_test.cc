// SchedulerMetrics as the Scheduler drives it, with a fake clock: nodes, deaths, jobs, epochs,
// recoveries.
#include "scheduler/scheduler_metrics.h"

#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/testing/daemon_probes.h"
#include "gtest/gtest.h"
#include "scheduler/internal/test_util.h"
#include "scheduler/scheduler.h"

namespace ps {
namespace {

double Sample(prometheus::Registry& registry, const std::string& name,
              const std::map<std::string, std::string>& labels = {}, bool histogram_sum = false) {
  return testing::MetricValue(registry, name, labels, histogram_sum);
}

// Labels carry only what the scheduler assigns: a job id that is not a bounded label (from an
// old state file, say) gets no series rather than an unbounded or control-character label.
TEST(SchedulerMetricsLabelsTest, JobLabelsAreBoundedAndPrintable) {
  prometheus::Registry registry;
  SchedulerMetrics metrics(registry);
  metrics.SetJobEpochs("job-1", 1, 1);
  metrics.SetJobProgress("job-1", 5, 0.5);
  metrics.SetJobEpochs("job-2\n# EOF", 1, 1);
  metrics.SetJobProgress("job-3\x1b[2J", 5, 0.5);
  metrics.SetJobProgress(std::string(1000, 'j'), 5, 0.5);
  metrics.SetJobCheckpoint("job-4\r", absl::Now());
  metrics.RemoveJobsExcept(std::set<std::string>{"job-1"});
  int job_series = 0;
  for (const auto& family : registry.Collect()) {
    for (const auto& metric : family.metric) {
      for (const auto& label : metric.label) {
        EXPECT_LE(label.value.size(), 64u) << family.name;
        for (char c : label.value) EXPECT_TRUE(c > 0x20 && c < 0x7f) << family.name;
        if (label.name == "job") {
          EXPECT_EQ(label.value, "job-1") << family.name;
          ++job_series;
        }
      }
    }
  }
  EXPECT_EQ(job_series, 4);  // clock, test accuracy, shard-map and membership epochs of job-1
}

class SchedulerMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.state_dir = dir_.path() + "/state";
    options_.heartbeat_interval = absl::Seconds(1);
    options_.heartbeat_timeout = absl::Seconds(5);
    auto scheduler = Scheduler::Open(options_, clock_.AsFunction(), &metrics_);
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    scheduler_ = std::move(*scheduler);
  }

  uint64_t Register(v1::NodeRole role) {
    v1::RegisterRequest req;
    req.set_role(role);
    if (role == v1::SERVER) req.set_address(absl::StrCat("10.0.0.", ++servers_, ":7100"));
    req.set_metrics_address("10.0.0.1:9100");
    auto resp = scheduler_->Register(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok()) return 0;
    secrets_[resp->node_id()] = resp->node_secret();
    return resp->node_id();
  }

  void Heartbeat(uint64_t node_id, const std::string& job_id = "", int64_t clock = 0,
                 double test_accuracy = -1) {
    v1::HeartbeatRequest req;
    req.set_node_id(node_id);
    req.set_node_secret(secrets_[node_id]);
    if (!job_id.empty()) {
      req.mutable_progress()->set_job_id(job_id);
      req.mutable_progress()->set_clock(clock);
      req.mutable_progress()->set_test_accuracy(test_accuracy);
    }
    auto resp = scheduler_->Heartbeat(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
  }

  std::string Submit(int num_workers) {
    v1::JobSpec spec;
    spec.set_model("fashion_mlp");
    spec.set_num_workers(num_workers);
    spec.set_num_servers(1);
    spec.set_data_dir(dir_.path());
    auto id = scheduler_->SubmitJob(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : "";
  }

  double Nodes(const std::string& role, const std::string& state) {
    return Sample(registry_, "ps_scheduler_nodes", {{"role", role}, {"state", state}});
  }
  double Jobs(const std::string& state) {
    return Sample(registry_, "ps_scheduler_jobs", {{"state", state}});
  }

  ScopedTempDir dir_;
  FakeClock clock_;
  SchedulerOptions options_;
  prometheus::Registry registry_;
  SchedulerMetrics metrics_{registry_};
  std::unique_ptr<Scheduler> scheduler_;
  std::map<uint64_t, std::string> secrets_;  // by node id, from Register()
  int servers_ = 0;
};

TEST_F(SchedulerMetricsTest, EverySeriesExistsAtZero) {
  EXPECT_EQ(Nodes("server", "alive"), 0);
  EXPECT_EQ(Nodes("worker", "dead"), 0);
  EXPECT_EQ(Jobs("pending"), 0);
  EXPECT_EQ(Jobs("cancelled"), 0);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_dead_nodes_total", {{"role", "worker"}}), 0);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_slot_moves_total"), 0);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_failovers_total"), 0);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_recoveries_total"), 0);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_recovery_seconds"), 0);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_heartbeat_lag_seconds"), 0);
}

TEST_F(SchedulerMetricsTest, NodesJobsDeathAndRecovery) {
  const uint64_t server = Register(v1::SERVER);
  const uint64_t w1 = Register(v1::WORKER);
  const uint64_t w2 = Register(v1::WORKER);
  EXPECT_EQ(Nodes("server", "alive"), 1);
  EXPECT_EQ(Nodes("worker", "alive"), 2);
  EXPECT_EQ(scheduler_->ListNodes()[0].metrics_address(), "10.0.0.1:9100");

  const std::string job = Submit(2);
  EXPECT_EQ(Jobs("running"), 1);
  EXPECT_EQ(Jobs("pending"), 0);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_membership_epoch", {{"job", job}}), 1);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_shard_map_epoch", {{"job", job}}), 1);

  // Heartbeats a second apart; rank 0 (w1) reports the job's clock and accuracy.
  clock_.Advance(absl::Seconds(1));
  Heartbeat(server);
  Heartbeat(w1, job, 5, 0.8);
  Heartbeat(w2, job, 4);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_heartbeat_lag_seconds"), 3);
  EXPECT_DOUBLE_EQ(Sample(registry_, "ps_scheduler_heartbeat_lag_seconds", {}, true), 3);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_job_clock", {{"job", job}}), 5);
  EXPECT_DOUBLE_EQ(Sample(registry_, "ps_scheduler_job_test_accuracy", {{"job", job}}), 0.8);

  // w2 goes silent and is declared dead; the job goes on with w1.
  for (int i = 0; i < 6; ++i) {
    clock_.Advance(absl::Seconds(1));
    Heartbeat(server);
    Heartbeat(w1, job, 6 + i);
    ASSERT_TRUE(scheduler_->Tick().ok());
  }
  EXPECT_EQ(Nodes("worker", "alive"), 1);
  EXPECT_EQ(Nodes("worker", "dead"), 1);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_dead_nodes_total", {{"role", "worker"}}), 1);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_dead_nodes_total", {{"role", "server"}}), 0);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_membership_changes_total"), 1);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_membership_epoch", {{"job", job}}), 2);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_recoveries_total"), 0);

  // A new worker joins 3 s after the death: one recovery, of 3 s.
  clock_.Advance(absl::Seconds(3));
  Heartbeat(server);
  Heartbeat(w1, job, 20);
  Register(v1::WORKER);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_recoveries_total"), 1);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_recovery_seconds"), 1);
  EXPECT_DOUBLE_EQ(Sample(registry_, "ps_scheduler_recovery_seconds", {}, true), 3);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_membership_changes_total"), 2);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_membership_epoch", {{"job", job}}), 3);
  EXPECT_EQ(Nodes("worker", "alive"), 2);

  // The job ends: its series go.
  ASSERT_TRUE(scheduler_->CancelJob(job).ok());
  EXPECT_EQ(Jobs("running"), 0);
  EXPECT_EQ(Jobs("cancelled"), 1);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_job_clock", {{"job", job}}), -1);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_job_test_accuracy", {{"job", job}}), -1);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_membership_epoch", {{"job", job}}), -1);
  EXPECT_EQ(Sample(registry_, "ps_scheduler_shard_map_epoch", {{"job", job}}), -1);
}

TEST_F(SchedulerMetricsTest, PendingJobIsCounted) {
  Register(v1::SERVER);
  Submit(2);  // no workers yet
  EXPECT_EQ(Jobs("pending"), 1);
  EXPECT_EQ(Jobs("running"), 0);
}

}  // namespace
}  // namespace ps
