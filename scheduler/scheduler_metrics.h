// The scheduler's Prometheus metrics: nodes, heartbeats, jobs, membership and recoveries.
#ifndef PS_SCHEDULER_SCHEDULER_METRICS_H_
#define PS_SCHEDULER_SCHEDULER_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ps/v1/scheduler.pb.h"

namespace ps {

// Owns the scheduler's metric families (ps_scheduler_*). Per-job series exist for RUNNING jobs
// only (SetRunningJobs removes the others), so labels stay bounded. Thread-safe; the Scheduler
// calls it under its own lock.
class SchedulerMetrics {
 public:
  // Registers the families in `registry`, which must outlive this. A name clash in the registry
  // is a programmer error (prometheus-cpp throws).
  explicit SchedulerMetrics(prometheus::Registry& registry);

  // Nodes and jobs by state, recounted by the scheduler after every change of state.
  void SetNodeCount(v1::NodeRole role, v1::NodeState state, int64_t count);
  void SetJobCount(v1::JobState state, int64_t count);
  // One RUNNING job's epochs: creates its series. RemoveJobsExcept drops the series of every job
  // not in `running`.
  void SetJobEpochs(const std::string& job_id, uint64_t shard_epoch, uint64_t membership_epoch);
  void SetJobProgress(const std::string& job_id, int64_t clock, double test_accuracy);
  template <typename Container>
  void RemoveJobsExcept(const Container& running);

  void ObserveHeartbeatLag(absl::Duration lag) {
    heartbeat_lag_.Observe(absl::ToDoubleSeconds(lag));
  }
  void NodeDied(v1::NodeRole role);
  void MembershipChanged() { membership_changes_.Increment(); }
  void SlotsMoved(int64_t slots) { slot_moves_.Increment(static_cast<double>(slots)); }
  // A dead server's slots were promoted to their backups (replicas), no checkpoint read.
  void FailedOver() { failovers_.Increment(); }
  // A dead worker of a running job was replaced by one that joined, `took` after the death.
  void Recovered(absl::Duration took);
  // A checkpoint ended: "complete", "failed" or "corrupt" (found so at a restore).
  void CheckpointEnded(const std::string& state, absl::Duration took);
  // A running job's latest complete checkpoint (its end time).
  void SetJobCheckpoint(const std::string& job_id, absl::Time completed);
  // A job lost a server and trains again, `took` after the death was detected.
  void ServerRecovered(absl::Duration took);

 private:
  struct JobSeries {
    prometheus::Gauge* clock = nullptr;
    prometheus::Gauge* test_accuracy = nullptr;  // from the first evaluation on
    prometheus::Gauge* shard_map_epoch = nullptr;
    prometheus::Gauge* membership_epoch = nullptr;
    prometheus::Gauge* last_checkpoint = nullptr;  // from the first complete checkpoint on
  };
  // The job's series, created on first use; null (no series) for a job id that is not a
  // bounded label (1..64 bytes of [A-Za-z0-9._-]): labels never carry a client's string.
  JobSeries* SeriesOf(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveSeries(const JobSeries& series) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  prometheus::Family<prometheus::Gauge>& nodes_;
  prometheus::Histogram& heartbeat_lag_;
  prometheus::Family<prometheus::Counter>& dead_nodes_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& job_clock_;
  prometheus::Family<prometheus::Gauge>& job_test_accuracy_;
  prometheus::Family<prometheus::Gauge>& shard_map_epoch_;
  prometheus::Family<prometheus::Gauge>& membership_epoch_;
  prometheus::Counter& membership_changes_;
  prometheus::Counter& slot_moves_;
  prometheus::Counter& failovers_;
  prometheus::Counter& recoveries_;
  prometheus::Histogram& recovery_seconds_;
  prometheus::Family<prometheus::Counter>& checkpoints_;
  prometheus::Histogram& checkpoint_seconds_;
  prometheus::Family<prometheus::Gauge>& last_checkpoint_;
  prometheus::Counter& server_recoveries_;
  prometheus::Histogram& server_recovery_seconds_;

  absl::Mutex mu_;
  std::map<std::string, JobSeries> series_ ABSL_GUARDED_BY(mu_);  // by job id
};

template <typename Container>
void SchedulerMetrics::RemoveJobsExcept(const Container& running) {
  absl::MutexLock l(&mu_);
  for (auto it = series_.begin(); it != series_.end();) {
    if (running.count(it->first) > 0) {
      ++it;
      continue;
    }
    RemoveSeries(it->second);
    it = series_.erase(it);
  }
}

}  // namespace ps

#endif  // PS_SCHEDULER_SCHEDULER_METRICS_H_
