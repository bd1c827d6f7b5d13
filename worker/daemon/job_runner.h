// The training loop of one worker: clocks, epochs, its data shard, progress, cancellation.
#ifndef PS_WORKER_DAEMON_JOB_RUNNER_H_
#define PS_WORKER_DAEMON_JOB_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ps/v1/job.pb.h"
#include "ps/v1/scheduler.pb.h"
#include "ps/v1/types.pb.h"
#include "client/rpc_client.h"
#include "worker/daemon/worker_metrics.h"
#include "worker/models/model.h"

namespace ps {

struct JobRunnerOptions {
  int epochs = 1;
  int batch_size = 64;  // per worker
  // The job's workers when it starts: with the training-set size it fixes the clocks per
  // epoch, so that every worker runs the same clocks whatever happens to the others.
  int num_workers = 1;
  v1::ConsistencySpec consistency;
  uint64_t seed = 1;
  // Evaluate on the held-out set at the end of every epoch (on the worker of rank 0).
  bool evaluate = false;
  // Multiplies the tables' learning rate step by step (pushes carry the factor).
  v1::LearningRateSchedule lr_schedule;
  // Dynamic data assignment (the job's data_assignment is DYNAMIC; needs a DataLeaser): the
  // worker reads the ranges the scheduler hands it, at their clocks, until every range of every
  // epoch is done.
  bool dynamic_data = false;
  // Testing and benchmarks: a worker that runs this many times slower (each step is followed
  // by a sleep of (slow_factor - 1) x the step's whole time, its requests included); 1: none.
  double slow_factor = 1.0;

  absl::Status Validate() const;
};

// The learning-rate factor of step `clock` (0-based) of `total_clocks`:
//   CONSTANT 1; STEP gamma^((epoch - 1) / step_epochs) (defaults 0.1 and 1);
//   COSINE final + (1 - final) * (1 + cos(pi * clock / total)) / 2.
float LearningRateScale(const v1::LearningRateSchedule& schedule, int64_t clock,
                        int64_t clocks_per_epoch, int64_t total_clocks);

// A snapshot of a worker's progress.
struct JobProgress {
  int64_t clock = 0;  // steps the job has done (this worker's clock)
  int64_t total_clocks = 0;
  int epoch = 1;          // the data epoch of the clock (1-based)
  double loss = 0;        // running mean over this worker's steps of the current epoch
  double accuracy = 0;    // likewise
  double test_loss = -1;  // the last evaluation; -1 before the first
  double test_accuracy = -1;
  double samples_per_second = 0;  // this worker, over the current epoch
  // Where this worker's step time went over the current epoch, in seconds: compute (the steps
  // minus the time blocked on requests), communication (the time its push/pull requests were in
  // flight), and the part of that communication hidden behind compute (in flight while the
  // worker computed; 0 unless the model overlaps them). Blocked = communication - hidden.
  double compute_seconds = 0;
  double communication_seconds = 0;
  double hidden_communication_seconds = 0;
  bool finished = false;
  // Over the whole run (this process's part of the job): examples trained on, the seconds spent
  // computing (steps minus the time blocked on requests; slow_factor's sleep included), blocked
  // on requests, and waiting for a data range (dynamic assignment: others held the last ones).
  int64_t examples_read = 0;
  double run_compute_seconds = 0;
  double run_blocked_seconds = 0;
  double run_data_wait_seconds = 0;
};

// "12800 examples, compute 10.2s, blocked 3.1s, waiting for data 0.4s" of a run.
std::string FormatRunTotals(const JobProgress& progress);

// Dynamic data assignment: where a runner gets its ranges (the scheduler's LeaseData, through
// the worker daemon). Lease() may block while it retries an unreachable scheduler; its error
// ends the run.
class DataLeaser {
 public:
  virtual ~DataLeaser() = default;
  // `request` has the data's shape, the finished ranges, take and clock; the leaser adds the
  // job, node and worker.
  virtual absl::StatusOr<v1::LeaseDataResponse> Lease(v1::LeaseDataRequest request) = 0;
};

// "compute 1.20s, communication 3.40s (45% hidden)" of a progress's time split.
std::string FormatTimeSplit(const JobProgress& progress);

// Runs a model's steps from the client's clock to the job's last clock. Run() is called by one
// thread; SetShard(), Cancel() and progress() may be called from any thread while it runs.
class JobRunner {
 public:
  // `model` and `client` must outlive the runner; the model's tables exist already.
  // `metrics` (null: none) must outlive the runner and the client: the runner exports the job's
  // progress there and makes it the client's observer.
  JobRunner(Model* model, RpcClient* client, JobRunnerOptions options,
            WorkerMetrics* metrics = nullptr);
  ~JobRunner();
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;

  // This worker reads examples i with i % num_ranks == rank, from the next step on.
  void SetShard(uint32_t rank, uint32_t num_ranks);
  // Called by Run() after every step while this worker is rank 0, with the clock reached and
  // the one before the step (the job's checkpoints are taken there). Set before Run().
  void set_rank0_step_hook(std::function<void(int64_t clock, int64_t previous)> hook) {
    hook_ = std::move(hook);
  }
  // Dynamic data assignment: the source of ranges (must outlive Run()). Set before Run().
  void set_data_leaser(DataLeaser* leaser) { leaser_ = leaser; }
  // Stops Run() (CANCELLED) at the next step; calls in flight are cancelled.
  void Cancel();
  JobProgress progress() const;
  // True once Cancel() was called (a CANCELLED from Run() is then this stop, not a failure).
  bool cancelled() const { return cancelled_.load(); }
  int64_t total_clocks() const { return total_clocks_; }

  // `on_epoch` sees the progress at every epoch end (after evaluation); `on_step` every
  // `report_every` steps (0: never). Before returning, on every path, it flushes the model
  // (Model::Flush): no request of the model is in flight afterwards.
  absl::Status Run(const std::function<void(const JobProgress&)>& on_epoch,
                   const std::function<void(const JobProgress&)>& on_step, int report_every);

 private:
  absl::Status RunSteps(const std::function<void(const JobProgress&)>& on_epoch,
                        const std::function<void(const JobProgress&)>& on_step, int report_every);
  // The same for dynamic data assignment: ranges from leaser_ until every one is done.
  absl::Status RunLeasedSteps(const std::function<void(const JobProgress&)>& on_epoch,
                              const std::function<void(const JobProgress&)>& on_step,
                              int report_every);
  // One step on `batch` at the client's clock, its time split and the slow factor's sleep;
  // adds to the epoch's and the run's totals.
  struct EpochTotals {
    StepStats stats;
    absl::Duration compute, communication, hidden;
    absl::Time start = absl::Now();
  };
  absl::Status Step(const std::vector<int64_t>& batch, float grad_scale, int64_t clock,
                    EpochTotals* epoch);
  // Sets the progress after a step that reached `done` in `epoch` (1-based); returns it.
  JobProgress UpdateProgress(int64_t done, int epoch, const EpochTotals& totals);
  // Rank 0's evaluation (every worker's after the last step) into the progress; returns it.
  absl::StatusOr<JobProgress> Evaluate();
  bool rank0() const;
  // Fills `batch` with the next examples of the current shard (reshuffled every pass).
  void NextBatch(std::vector<int64_t>* batch);

  // Observes the client while the runner lives: counts the time blocked on requests (each
  // step's compute / communication split, with or without metrics) and passes every event on to
  // the job's metrics, if any.
  class Observer final : public ClientObserver {
   public:
    explicit Observer(WorkerMetrics::Job* metrics) : metrics_(metrics) {}
    void OnPushAccepted(int64_t keys) override {
      if (metrics_ != nullptr) metrics_->OnPushAccepted(keys);
    }
    void OnPullAnswered(int64_t keys) override {
      if (metrics_ != nullptr) metrics_->OnPullAnswered(keys);
    }
    void OnPullStaleness(int64_t clocks) override {
      if (metrics_ != nullptr) metrics_->OnPullStaleness(clocks);
    }
    void OnRetry() override {
      if (metrics_ != nullptr) metrics_->OnRetry();
    }
    void OnBlocked(absl::Duration blocked) override {
      blocked_nanos_.fetch_add(absl::ToInt64Nanoseconds(blocked), std::memory_order_relaxed);
      if (metrics_ != nullptr) metrics_->OnBlocked(blocked);
    }
    absl::Duration blocked() const {
      return absl::Nanoseconds(blocked_nanos_.load(std::memory_order_relaxed));
    }

   private:
    WorkerMetrics::Job* const metrics_;
    std::atomic<int64_t> blocked_nanos_{0};
  };

  Model* const model_;
  RpcClient* const client_;
  const JobRunnerOptions options_;
  const int64_t clocks_per_epoch_;
  int64_t total_clocks_;  // dynamic: the scheduler's (set by the first lease)
  const std::shared_ptr<WorkerMetrics::Job> metrics_;  // null: no metrics
  Observer observer_{metrics_.get()};
  std::atomic<bool> cancelled_{false};
  std::function<void(int64_t, int64_t)> hook_;
  DataLeaser* leaser_ = nullptr;

  mutable absl::Mutex mu_;
  uint32_t rank_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t num_ranks_ ABSL_GUARDED_BY(mu_) = 1;
  bool shard_changed_ ABSL_GUARDED_BY(mu_) = true;
  JobProgress progress_ ABSL_GUARDED_BY(mu_);

  // Run()'s thread only.
  std::vector<int64_t> order_;
  size_t next_ = 0;
  uint64_t passes_ = 0;
  int64_t skip_examples_ = 0;  // examples of the shard read before the starting clock
  // The run's totals (JobProgress's run_*).
  int64_t examples_read_ = 0;
  absl::Duration run_compute_, run_blocked_, run_data_wait_;
};

}  // namespace ps

#endif  // PS_WORKER_DAEMON_JOB_RUNNER_H_
