// A worker's Prometheus metrics: per-job progress, compute vs. communication time, keys moved,
// staleness seen on pulls, RPC retries.
#ifndef PS_WORKER_DAEMON_WORKER_METRICS_H_
#define PS_WORKER_DAEMON_WORKER_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/rpc_client.h"

namespace ps {

struct JobProgress;

// Owns the worker's metric families (ps_worker_*). Series are labelled by job; the series of
// the kRetainedJobs most recent jobs are kept (a finished job stays scrapable for a while), older
// ones are removed. Thread-safe.
class WorkerMetrics {
 public:
  static constexpr int kRetainedJobs = 4;

  // One job's series, cached so that the hot paths do no label lookups. As a ClientObserver it
  // counts keys, retries, staleness and the time blocked on RPCs. Thread-safe.
  class Job final : public ClientObserver {
   public:
    ~Job() override;  // removes the job's series
    Job(const Job&) = delete;
    Job& operator=(const Job&) = delete;

    // ClientObserver.
    void OnPushAccepted(int64_t keys) override { pushed_keys_.Increment(keys); }
    void OnPullAnswered(int64_t keys) override { pulled_keys_.Increment(keys); }
    void OnPullStaleness(int64_t clocks) override { staleness_.Observe(clocks); }
    void OnRetry() override { retries_.Increment(); }
    void OnBlocked(absl::Duration blocked) override {
      blocked_nanos_.fetch_add(absl::ToInt64Nanoseconds(blocked), std::memory_order_relaxed);
    }

    // Total time callers were blocked on RPCs of this job (for splitting a step's time).
    absl::Duration blocked() const {
      return absl::Nanoseconds(blocked_nanos_.load(std::memory_order_relaxed));
    }
    // One training step: its examples, and its time in the model's math vs. blocked on RPCs;
    // `hidden`: the time its RPCs were in flight while the worker computed (overlap).
    void RecordStep(int64_t examples, absl::Duration compute, absl::Duration communication,
                    absl::Duration hidden = absl::ZeroDuration());
    // The runner's progress values (clock, loss, accuracy, samples/s; test accuracy once
    // evaluated).
    void SetProgress(const JobProgress& progress);
    // A program job's own metrics (ps_worker_program_metric{job, name}); at most
    // kMaxProgramMetrics names, the first ones seen.
    void SetProgramMetrics(const std::map<std::string, double>& metrics);

   private:
    friend class WorkerMetrics;
    Job(WorkerMetrics* metrics, const std::string& job_id);

    WorkerMetrics* const metrics_;
    const std::string job_id_;
    prometheus::Counter& steps_;
    prometheus::Counter& samples_;
    prometheus::Counter& compute_seconds_;
    prometheus::Counter& communication_seconds_;
    prometheus::Counter& hidden_communication_seconds_;
    prometheus::Counter& pushed_keys_;
    prometheus::Counter& pulled_keys_;
    prometheus::Gauge& samples_per_second_;
    prometheus::Gauge& loss_;
    prometheus::Gauge& accuracy_;
    prometheus::Gauge& job_clock_;
    prometheus::Histogram& staleness_;
    prometheus::Counter& retries_;  // shared by every job
    std::atomic<int64_t> blocked_nanos_{0};
    absl::Mutex mu_;
    // Created at the first evaluation: no series before there is a value.
    prometheus::Gauge* test_accuracy_ ABSL_GUARDED_BY(mu_) = nullptr;
    std::map<std::string, prometheus::Gauge*> program_metrics_ ABSL_GUARDED_BY(mu_);
  };
  static constexpr size_t kMaxProgramMetrics = 16;

  // Registers the families in `registry`, which must outlive this. A name clash in the registry
  // is a programmer error (prometheus-cpp throws).
  explicit WorkerMetrics(prometheus::Registry& registry);
  ~WorkerMetrics();

  // The series of `job_id`, created on first use. The result stays valid while held; this
  // object must outlive it.
  std::shared_ptr<Job> ForJob(const std::string& job_id);

 private:
  prometheus::Family<prometheus::Counter>& steps_;
  prometheus::Family<prometheus::Counter>& samples_;
  prometheus::Family<prometheus::Gauge>& samples_per_second_;
  prometheus::Family<prometheus::Gauge>& loss_;
  prometheus::Family<prometheus::Gauge>& accuracy_;
  prometheus::Family<prometheus::Gauge>& test_accuracy_;
  prometheus::Family<prometheus::Gauge>& program_metric_;
  prometheus::Family<prometheus::Counter>& compute_seconds_;
  prometheus::Family<prometheus::Counter>& communication_seconds_;
  prometheus::Family<prometheus::Counter>& hidden_communication_seconds_;
  prometheus::Family<prometheus::Counter>& pushed_keys_;
  prometheus::Family<prometheus::Counter>& pulled_keys_;
  prometheus::Family<prometheus::Histogram>& staleness_;
  prometheus::Family<prometheus::Gauge>& job_clock_;
  prometheus::Counter& retries_;

  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);  // job ids, oldest first
};

}  // namespace ps

#endif  // PS_WORKER_DAEMON_WORKER_METRICS_H_
