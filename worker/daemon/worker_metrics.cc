#include "worker/daemon/worker_metrics.h"

#include <algorithm>

#include "worker/daemon/job_runner.h"

namespace ps {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

// Clocks a worker's pull runs ahead of the slowest worker (SSP bounds it by the staleness).
const prometheus::Histogram::BucketBoundaries& StalenessBuckets() {
  static const auto* const kBuckets =
      new prometheus::Histogram::BucketBoundaries{0, 1, 2, 3, 4, 6, 8, 12, 16, 32, 64};
  return *kBuckets;
}

}  // namespace

WorkerMetrics::WorkerMetrics(prometheus::Registry& registry)
    : steps_(BuildCounter()
                 .Name("ps_worker_steps_total")
                 .Help("Training steps (clocks) this worker completed")
                 .Register(registry)),
      samples_(BuildCounter()
                   .Name("ps_worker_samples_total")
                   .Help("Training examples this worker processed")
                   .Register(registry)),
      samples_per_second_(BuildGauge()
                              .Name("ps_worker_samples_per_second")
                              .Help("This worker's training throughput over the current epoch")
                              .Register(registry)),
      loss_(BuildGauge()
                .Name("ps_worker_loss")
                .Help("Running mean training loss of the current epoch on this worker")
                .Register(registry)),
      accuracy_(BuildGauge()
                    .Name("ps_worker_accuracy")
                    .Help("Running training accuracy (0..1) of the current epoch on this worker")
                    .Register(registry)),
      test_accuracy_(BuildGauge()
                         .Name("ps_worker_test_accuracy")
                         .Help("Held-out accuracy (0..1) of the last evaluation (rank 0 only)")
                         .Register(registry)),
      program_metric_(BuildGauge()
                          .Name("ps_worker_program_metric")
                          .Help("A program job's own figure, as its program last reported it "
                                "(label name: the program's name for it; at most 16 per job)")
                          .Register(registry)),
      compute_seconds_(BuildCounter()
                           .Name("ps_worker_compute_seconds_total")
                           .Help("Time of training steps spent outside push/pull RPCs (the "
                                 "model's math)")
                           .Register(registry)),
      communication_seconds_(BuildCounter()
                                 .Name("ps_worker_communication_seconds_total")
                                 .Help("Time of training steps blocked on push/pull RPCs")
                                 .Register(registry)),
      hidden_communication_seconds_(
          BuildCounter()
              .Name("ps_worker_communication_hidden_seconds_total")
              .Help("Time push/pull RPCs of training steps were in flight while the worker "
                    "computed (overlap); RPC time = this + communication_seconds_total")
              .Register(registry)),
      pushed_keys_(BuildCounter()
                       .Name("ps_worker_pushed_keys_total")
                       .Help("Keys in push parts the servers accepted")
                       .Register(registry)),
      pulled_keys_(BuildCounter()
                       .Name("ps_worker_pulled_keys_total")
                       .Help("Keys in pull parts the servers answered")
                       .Register(registry)),
      staleness_(BuildHistogram()
                     .Name("ps_worker_staleness_clocks")
                     .Help("Clock of a pull minus the slowest worker's clock the servers "
                           "reported (0 in sync mode)")
                     .Register(registry)),
      job_clock_(BuildGauge()
                     .Name("ps_worker_job_clock")
                     .Help("Steps of the job this worker has done (its clock)")
                     .Register(registry)),
      retries_(BuildCounter()
                   .Name("ps_worker_rpc_retries_total")
                   .Help("Data-plane RPCs tried again after UNAVAILABLE")
                   .Register(registry)
                   .Add({})) {}

WorkerMetrics::~WorkerMetrics() {
  absl::MutexLock l(&mu_);
  jobs_.clear();
}

std::shared_ptr<WorkerMetrics::Job> WorkerMetrics::ForJob(const std::string& job_id) {
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) return it->second;
  std::shared_ptr<Job> job(new Job(this, job_id));
  jobs_.emplace(job_id, job);
  order_.push_back(job_id);
  // Series of old jobs that nobody holds go: labels stay bounded. (A held one stays, so that
  // asking for its job again cannot make a second object over the same series.)
  for (auto id = order_.begin(); id != order_.end() && jobs_.size() > kRetainedJobs;) {
    auto old = jobs_.find(*id);
    if (old->second.use_count() > 1) {
      ++id;
      continue;
    }
    jobs_.erase(old);
    id = order_.erase(id);
  }
  return job;
}

WorkerMetrics::Job::Job(WorkerMetrics* m, const std::string& job_id)
    : metrics_(m),
      job_id_(job_id),
      steps_(m->steps_.Add({{"job", job_id}})),
      samples_(m->samples_.Add({{"job", job_id}})),
      compute_seconds_(m->compute_seconds_.Add({{"job", job_id}})),
      communication_seconds_(m->communication_seconds_.Add({{"job", job_id}})),
      hidden_communication_seconds_(m->hidden_communication_seconds_.Add({{"job", job_id}})),
      pushed_keys_(m->pushed_keys_.Add({{"job", job_id}})),
      pulled_keys_(m->pulled_keys_.Add({{"job", job_id}})),
      samples_per_second_(m->samples_per_second_.Add({{"job", job_id}})),
      loss_(m->loss_.Add({{"job", job_id}})),
      accuracy_(m->accuracy_.Add({{"job", job_id}})),
      job_clock_(m->job_clock_.Add({{"job", job_id}})),
      staleness_(m->staleness_.Add({{"job", job_id}}, StalenessBuckets())),
      retries_(m->retries_) {}

WorkerMetrics::Job::~Job() {
  WorkerMetrics* m = metrics_;
  m->steps_.Remove(&steps_);
  m->samples_.Remove(&samples_);
  m->compute_seconds_.Remove(&compute_seconds_);
  m->communication_seconds_.Remove(&communication_seconds_);
  m->hidden_communication_seconds_.Remove(&hidden_communication_seconds_);
  m->pushed_keys_.Remove(&pushed_keys_);
  m->pulled_keys_.Remove(&pulled_keys_);
  m->samples_per_second_.Remove(&samples_per_second_);
  m->loss_.Remove(&loss_);
  m->accuracy_.Remove(&accuracy_);
  m->job_clock_.Remove(&job_clock_);
  m->staleness_.Remove(&staleness_);
  absl::MutexLock l(&mu_);
  if (test_accuracy_ != nullptr) m->test_accuracy_.Remove(test_accuracy_);
  for (auto& [name, gauge] : program_metrics_) m->program_metric_.Remove(gauge);
}

void WorkerMetrics::Job::SetProgramMetrics(const std::map<std::string, double>& metrics) {
  absl::MutexLock l(&mu_);
  for (const auto& [name, value] : metrics) {
    auto it = program_metrics_.find(name);
    if (it == program_metrics_.end()) {
      if (program_metrics_.size() >= kMaxProgramMetrics) continue;
      it = program_metrics_
               .emplace(name, &metrics_->program_metric_.Add({{"job", job_id_}, {"name", name}}))
               .first;
    }
    it->second->Set(value);
  }
}

void WorkerMetrics::Job::RecordStep(int64_t examples, absl::Duration compute,
                                    absl::Duration communication, absl::Duration hidden) {
  steps_.Increment();
  samples_.Increment(static_cast<double>(examples));
  compute_seconds_.Increment(std::max(0.0, absl::ToDoubleSeconds(compute)));
  communication_seconds_.Increment(std::max(0.0, absl::ToDoubleSeconds(communication)));
  hidden_communication_seconds_.Increment(std::max(0.0, absl::ToDoubleSeconds(hidden)));
}

void WorkerMetrics::Job::SetProgress(const JobProgress& p) {
  job_clock_.Set(static_cast<double>(p.clock));
  loss_.Set(p.loss);
  accuracy_.Set(p.accuracy);
  samples_per_second_.Set(p.samples_per_second);
  if (p.test_accuracy < 0) return;
  absl::MutexLock l(&mu_);
  if (test_accuracy_ == nullptr) test_accuracy_ = &metrics_->test_accuracy_.Add({{"job", job_id_}});
  test_accuracy_->Set(p.test_accuracy);
}

}  // namespace ps
