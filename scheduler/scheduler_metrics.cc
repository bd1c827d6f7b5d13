#include "scheduler/scheduler_metrics.h"

#include <glog/logging.h>

#include "absl/strings/ascii.h"
#include "common/printable.h"

namespace ps {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

std::string Lower(const std::string& name) { return absl::AsciiStrToLower(name); }

// A job label value: what the scheduler assigns ("job-<n>"), never an arbitrary string.
constexpr size_t kMaxJobLabelBytes = 64;
bool IsJobLabel(const std::string& job_id) {
  if (job_id.empty() || job_id.size() > kMaxJobLabelBytes) return false;
  for (char c : job_id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}

}  // namespace

// Long, and a list: one initializer per metric family (the members are references to families
// the registry owns, so they are bound here), then the label values known in advance.
SchedulerMetrics::SchedulerMetrics(prometheus::Registry& registry)
    : nodes_(BuildGauge()
                 .Name("ps_scheduler_nodes")
                 .Help("Registered nodes by role (server, worker) and state (alive, dead)")
                 .Register(registry)),
      heartbeat_lag_(
          BuildHistogram()
              .Name("ps_scheduler_heartbeat_lag_seconds")
              .Help("Time between a node's consecutive heartbeats")
              .Register(registry)
              .Add({}, prometheus::Histogram::BucketBoundaries{0.1, 0.25, 0.5, 0.75, 1, 1.25, 1.5,
                                                               2, 3, 5, 10, 30})),
      dead_nodes_(BuildCounter()
                      .Name("ps_scheduler_dead_nodes_total")
                      .Help("Nodes declared dead (silent past the heartbeat timeout, or replaced)")
                      .Register(registry)),
      jobs_(BuildGauge()
                .Name("ps_scheduler_jobs")
                .Help("Jobs by state (pending, running, succeeded, failed, cancelled)")
                .Register(registry)),
      job_clock_(BuildGauge()
                     .Name("ps_scheduler_job_clock")
                     .Help("A running job's clock (steps done), as its rank 0 worker reports")
                     .Register(registry)),
      job_test_accuracy_(BuildGauge()
                             .Name("ps_scheduler_job_test_accuracy")
                             .Help("A running job's last held-out accuracy (0..1)")
                             .Register(registry)),
      shard_map_epoch_(BuildGauge()
                           .Name("ps_scheduler_shard_map_epoch")
                           .Help("A running job's shard-map epoch")
                           .Register(registry)),
      membership_epoch_(BuildGauge()
                            .Name("ps_scheduler_membership_epoch")
                            .Help("A running job's worker-membership epoch")
                            .Register(registry)),
      membership_changes_(BuildCounter()
                              .Name("ps_scheduler_membership_changes_total")
                              .Help("Changes of a running job's worker set (deaths and joins)")
                              .Register(registry)
                              .Add({})),
      slot_moves_(BuildCounter()
                      .Name("ps_scheduler_slot_moves_total")
                      .Help("Shard-map slots moved from one server to another")
                      .Register(registry)
                      .Add({})),
      failovers_(BuildCounter()
                     .Name("ps_scheduler_failovers_total")
                     .Help("Server deaths whose slots were promoted to their backups (replicas), "
                           "no checkpoint read")
                     .Register(registry)
                     .Add({})),
      recoveries_(BuildCounter()
                      .Name("ps_scheduler_recoveries_total")
                      .Help("Dead workers of running jobs replaced by joining ones")
                      .Register(registry)
                      .Add({})),
      recovery_seconds_(
          BuildHistogram()
              .Name("ps_scheduler_recovery_seconds")
              .Help("Time from a worker's death to its replacement joining the job")
              .Register(registry)
              .Add({}, prometheus::Histogram::BucketBoundaries{0.5, 1, 2, 5, 10, 20, 30, 60, 120,
                                                               300, 600})),
      checkpoints_(BuildCounter()
                       .Name("ps_scheduler_checkpoints_total")
                       .Help("Checkpoints that ended, by state (complete, failed, corrupt)")
                       .Register(registry)),
      checkpoint_seconds_(
          BuildHistogram()
              .Name("ps_scheduler_checkpoint_seconds")
              .Help("Time from a checkpoint's start to every server confirming it")
              .Register(registry)
              .Add({}, prometheus::Histogram::BucketBoundaries{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60,
                                                               120, 300})),
      last_checkpoint_(BuildGauge()
                           .Name("ps_scheduler_job_last_checkpoint_timestamp_seconds")
                           .Help("A running job's latest complete checkpoint (Unix time); "
                                 "time() minus it is the checkpoint's age")
                           .Register(registry)),
      server_recoveries_(BuildCounter()
                             .Name("ps_scheduler_server_recoveries_total")
                             .Help("Server losses a running job recovered from (slots moved and "
                                   "restored, training again)")
                             .Register(registry)
                             .Add({})),
      server_recovery_seconds_(BuildHistogram()
                                   .Name("ps_scheduler_server_recovery_seconds")
                                   .Help("Time from a server's death being detected to its job "
                                         "training again")
                                   .Register(registry)
                                   .Add({}, prometheus::Histogram::BucketBoundaries{
                                                0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600})) {
  for (const char* state : {"complete", "failed", "corrupt"}) checkpoints_.Add({{"state", state}});
  // Every combination exists from the start (at 0), so that sums and rates see no gaps.
  for (v1::NodeRole role : {v1::SERVER, v1::WORKER}) {
    dead_nodes_.Add({{"role", Lower(v1::NodeRole_Name(role))}});
    for (v1::NodeState state : {v1::ALIVE, v1::DEAD}) SetNodeCount(role, state, 0);
  }
  for (v1::JobState state : {v1::PENDING, v1::RUNNING, v1::SUCCEEDED, v1::FAILED, v1::CANCELLED}) {
    SetJobCount(state, 0);
  }
}

void SchedulerMetrics::SetNodeCount(v1::NodeRole role, v1::NodeState state, int64_t count) {
  nodes_
      .Add({{"role", Lower(v1::NodeRole_Name(role))}, {"state", Lower(v1::NodeState_Name(state))}})
      .Set(static_cast<double>(count));
}

void SchedulerMetrics::SetJobCount(v1::JobState state, int64_t count) {
  jobs_.Add({{"state", Lower(v1::JobState_Name(state))}}).Set(static_cast<double>(count));
}

void SchedulerMetrics::NodeDied(v1::NodeRole role) {
  dead_nodes_.Add({{"role", Lower(v1::NodeRole_Name(role))}}).Increment();
}

void SchedulerMetrics::Recovered(absl::Duration took) {
  recoveries_.Increment();
  recovery_seconds_.Observe(absl::ToDoubleSeconds(took));
}

void SchedulerMetrics::CheckpointEnded(const std::string& state, absl::Duration took) {
  checkpoints_.Add({{"state", state}}).Increment();
  if (state == "complete") checkpoint_seconds_.Observe(absl::ToDoubleSeconds(took));
}

void SchedulerMetrics::SetJobCheckpoint(const std::string& job_id, absl::Time completed) {
  absl::MutexLock l(&mu_);
  JobSeries* s = SeriesOf(job_id);
  if (s == nullptr) return;
  if (s->last_checkpoint == nullptr) s->last_checkpoint = &last_checkpoint_.Add({{"job", job_id}});
  s->last_checkpoint->Set(absl::ToDoubleSeconds(completed - absl::UnixEpoch()));
}

void SchedulerMetrics::ServerRecovered(absl::Duration took) {
  server_recoveries_.Increment();
  server_recovery_seconds_.Observe(absl::ToDoubleSeconds(took));
}

SchedulerMetrics::JobSeries* SchedulerMetrics::SeriesOf(const std::string& job_id) {
  if (!IsJobLabel(job_id)) {
    LOG_EVERY_N(WARNING, 100) << "no metrics for a job whose id is not a bounded label: '"
                              << Printable(job_id, 64) << "'";
    return nullptr;
  }
  auto [it, added] = series_.try_emplace(job_id);
  if (added) {
    const prometheus::Labels labels{{"job", job_id}};
    it->second.clock = &job_clock_.Add(labels);
    it->second.shard_map_epoch = &shard_map_epoch_.Add(labels);
    it->second.membership_epoch = &membership_epoch_.Add(labels);
  }
  return &it->second;
}

void SchedulerMetrics::RemoveSeries(const JobSeries& series) {
  job_clock_.Remove(series.clock);
  shard_map_epoch_.Remove(series.shard_map_epoch);
  membership_epoch_.Remove(series.membership_epoch);
  if (series.test_accuracy != nullptr) job_test_accuracy_.Remove(series.test_accuracy);
  if (series.last_checkpoint != nullptr) last_checkpoint_.Remove(series.last_checkpoint);
}

void SchedulerMetrics::SetJobEpochs(const std::string& job_id, uint64_t shard_epoch,
                                    uint64_t membership_epoch) {
  absl::MutexLock l(&mu_);
  JobSeries* s = SeriesOf(job_id);
  if (s == nullptr) return;
  s->shard_map_epoch->Set(static_cast<double>(shard_epoch));
  s->membership_epoch->Set(static_cast<double>(membership_epoch));
}

void SchedulerMetrics::SetJobProgress(const std::string& job_id, int64_t clock,
                                      double test_accuracy) {
  absl::MutexLock l(&mu_);
  JobSeries* s = SeriesOf(job_id);
  if (s == nullptr) return;
  s->clock->Set(static_cast<double>(clock));
  if (test_accuracy < 0) return;  // not evaluated yet
  if (s->test_accuracy == nullptr) s->test_accuracy = &job_test_accuracy_.Add({{"job", job_id}});
  s->test_accuracy->Set(test_accuracy);
}

}  // namespace ps
