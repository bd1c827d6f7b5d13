#include "worker/daemon/job_runner.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <future>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "client/data_ranges.h"

namespace ps {

absl::Status JobRunnerOptions::Validate() const {
  if (epochs < 1) return absl::InvalidArgumentError(absl::StrCat("epochs is ", epochs, "; >= 1"));
  if (!(slow_factor >= 1 && slow_factor <= 1000)) {
    return absl::InvalidArgumentError(
        absl::StrCat("slow_factor is ", slow_factor, "; must be in 1..1000"));
  }
  if (dynamic_data && consistency.mode() == v1::ConsistencySpec::SYNC) {
    return absl::InvalidArgumentError("dynamic data assignment needs ssp or async");
  }
  if (batch_size < 1 || batch_size > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size is ", batch_size, "; must be in 1..65536"));
  }
  if (num_workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_workers is ", num_workers, "; >= 1"));
  }
  if (consistency.mode() == v1::ConsistencySpec::SSP && consistency.staleness() < 0) {
    return absl::InvalidArgumentError("ssp staleness must be >= 0");
  }
  return absl::OkStatus();
}

float LearningRateScale(const v1::LearningRateSchedule& schedule, int64_t clock,
                        int64_t clocks_per_epoch, int64_t total_clocks) {
  switch (schedule.kind()) {
    case v1::LearningRateSchedule::STEP: {
      const double gamma = schedule.gamma() > 0 ? schedule.gamma() : 0.1;
      const int64_t every = schedule.step_epochs() > 0 ? schedule.step_epochs() : 1;
      const int64_t epoch = clock / std::max<int64_t>(1, clocks_per_epoch);  // 0-based
      return static_cast<float>(std::pow(gamma, static_cast<double>(epoch / every)));
    }
    case v1::LearningRateSchedule::COSINE: {
      const double final_fraction = schedule.final_fraction();
      const double t = static_cast<double>(clock) / std::max<int64_t>(1, total_clocks);
      return static_cast<float>(final_fraction +
                                (1 - final_fraction) * 0.5 * (1 + std::cos(M_PI * t)));
    }
    default:
      return 1.0f;
  }
}

std::string FormatTimeSplit(const JobProgress& p) {
  const double hidden = p.communication_seconds > 0
                            ? 100.0 * p.hidden_communication_seconds / p.communication_seconds
                            : 0.0;
  return absl::StrFormat("compute %.2fs, communication %.2fs (%.0f%% hidden)", p.compute_seconds,
                         p.communication_seconds, hidden);
}

JobRunner::JobRunner(Model* model, RpcClient* client, JobRunnerOptions options,
                     WorkerMetrics* metrics)
    : model_(model),
      client_(client),
      options_(std::move(options)),
      clocks_per_epoch_(std::max<int64_t>(
          1, model->num_train_examples() /
                 (static_cast<int64_t>(options_.batch_size) * options_.num_workers))),
      total_clocks_(clocks_per_epoch_ * options_.epochs),
      metrics_(metrics == nullptr ? nullptr : metrics->ForJob(client->job_id())) {
  client_->set_observer(&observer_);
  absl::MutexLock l(&mu_);
  progress_.total_clocks = total_clocks_;
}

JobRunner::~JobRunner() { client_->set_observer(nullptr); }

void JobRunner::SetShard(uint32_t rank, uint32_t num_ranks) {
  absl::MutexLock l(&mu_);
  if (rank == rank_ && num_ranks == num_ranks_) return;
  rank_ = rank;
  num_ranks_ = std::max<uint32_t>(num_ranks, 1);
  shard_changed_ = true;
}

void JobRunner::Cancel() {
  cancelled_ = true;
  client_->CancelInFlight();
}

JobProgress JobRunner::progress() const {
  absl::MutexLock l(&mu_);
  return progress_;
}

void JobRunner::NextBatch(std::vector<int64_t>* batch) {
  uint32_t rank, num_ranks;
  bool changed;
  {
    absl::MutexLock l(&mu_);
    rank = rank_;
    num_ranks = num_ranks_;
    changed = shard_changed_;
    shard_changed_ = false;
  }
  batch->clear();
  while (batch->size() < static_cast<size_t>(options_.batch_size)) {
    if (changed || next_ >= order_.size()) {
      // A new pass over the shard (or a new shard): its examples in a fresh order, the same on
      // every run for the same (seed, rank, pass).
      order_.clear();
      for (int64_t i = rank; i < model_->num_train_examples(); i += num_ranks) order_.push_back(i);
      if (order_.empty()) return;  // more ranks than examples: nothing to read
      // A run that starts at clock c (a restart after a server loss, a restore) reads on from
      // where an undisturbed run would be: same pass, same place in it.
      const int64_t skip = skip_examples_;
      skip_examples_ = 0;
      const int64_t size = static_cast<int64_t>(order_.size());
      if (skip > 0) passes_ = static_cast<uint64_t>(skip / size);
      std::mt19937_64 rng(options_.seed * 1000003 + rank * 7919 + passes_++);
      std::shuffle(order_.begin(), order_.end(), rng);
      next_ = static_cast<size_t>(skip > 0 ? skip % size : 0);
      changed = false;
    }
    batch->push_back(order_[next_++]);
  }
}

absl::Status JobRunner::Run(const std::function<void(const JobProgress&)>& on_epoch,
                            const std::function<void(const JobProgress&)>& on_step,
                            int report_every) {
  absl::Status s = RunSteps(on_epoch, on_step, report_every);
  // The last push of an overlapping model is still in flight: the job is only done once the
  // servers have it. After a failure, its buffers must still outlive it.
  absl::Status flushed = model_->Flush();
  if (!s.ok()) return s;
  if (!flushed.ok() && cancelled_) return absl::CancelledError("the job was cancelled");
  if (!flushed.ok()) {
    return WithPrefix(flushed, "the last step's push/pull");
  }
  return absl::OkStatus();
}

absl::Status JobRunner::Step(const std::vector<int64_t>& batch, float grad_scale, int64_t clock,
                             EpochTotals* epoch) {
  client_->SetLearningRateScale(
      LearningRateScale(options_.lr_schedule, clock, clocks_per_epoch_, total_clocks_));
  const absl::Time step_start = absl::Now();
  const absl::Duration blocked_before = observer_.blocked();
  auto step = model_->TrainStep(client_, batch, grad_scale);
  if (!step.ok()) {
    if (cancelled_) return absl::CancelledError("the job was cancelled");
    return WithPrefix(step.status(), absl::StrCat("step ", clock + 1, " of ", total_clocks_));
  }
  // Blocked: the time the step waited on requests (observer_). In flight: what the model
  // measured, at least the blocked time; the rest was hidden behind compute.
  absl::Duration total = absl::Now() - step_start;
  const absl::Duration blocked = std::min(total, observer_.blocked() - blocked_before);
  const absl::Duration in_flight = std::max(blocked, step->communication);
  if (options_.slow_factor > 1) {
    // A machine slower at everything: the step's whole time (its requests too) stretched.
    const absl::Duration extra = total * (options_.slow_factor - 1);
    absl::SleepFor(extra);
    total += extra;
  }
  epoch->compute += total - blocked;
  epoch->communication += in_flight;
  epoch->hidden += in_flight - blocked;
  run_compute_ += total - blocked;
  run_blocked_ += blocked;
  examples_read_ += step->examples;
  if (metrics_ != nullptr) {
    metrics_->RecordStep(step->examples, total - blocked, blocked, in_flight - blocked);
  }
  epoch->stats.loss_sum += step->loss_sum;
  epoch->stats.correct += step->correct;
  epoch->stats.examples += step->examples;
  return absl::OkStatus();
}

JobProgress JobRunner::UpdateProgress(int64_t done, int epoch, const EpochTotals& totals) {
  JobProgress p;
  {
    absl::MutexLock l(&mu_);
    progress_.clock = done;
    progress_.total_clocks = total_clocks_;
    progress_.epoch = epoch;
    const StepStats& stats = totals.stats;
    progress_.loss = stats.loss_sum / std::max<int64_t>(1, stats.examples);
    progress_.accuracy = static_cast<double>(stats.correct) / std::max<int64_t>(1, stats.examples);
    progress_.samples_per_second =
        stats.examples / std::max(1e-9, absl::ToDoubleSeconds(absl::Now() - totals.start));
    progress_.compute_seconds = absl::ToDoubleSeconds(totals.compute);
    progress_.communication_seconds = absl::ToDoubleSeconds(totals.communication);
    progress_.hidden_communication_seconds = absl::ToDoubleSeconds(totals.hidden);
    progress_.examples_read = examples_read_;
    progress_.run_compute_seconds = absl::ToDoubleSeconds(run_compute_);
    progress_.run_blocked_seconds = absl::ToDoubleSeconds(run_blocked_);
    progress_.run_data_wait_seconds = absl::ToDoubleSeconds(run_data_wait_);
    p = progress_;
  }
  if (metrics_ != nullptr) metrics_->SetProgress(p);
  return p;
}

absl::StatusOr<JobProgress> JobRunner::Evaluate() {
  auto eval = model_->Evaluate(client_);
  if (!eval.ok()) return eval.status();
  JobProgress p;
  {
    absl::MutexLock l(&mu_);
    progress_.test_loss = eval->loss_sum / std::max<int64_t>(1, eval->examples);
    progress_.test_accuracy =
        static_cast<double>(eval->correct) / std::max<int64_t>(1, eval->examples);
    p = progress_;
  }
  if (metrics_ != nullptr) metrics_->SetProgress(p);
  return p;
}

bool JobRunner::rank0() const {
  absl::MutexLock l(&mu_);
  return rank_ == 0;
}

absl::Status JobRunner::RunSteps(const std::function<void(const JobProgress&)>& on_epoch,
                                 const std::function<void(const JobProgress&)>& on_step,
                                 int report_every) {
  PS_RETURN_IF_ERROR(options_.Validate());
  if (options_.dynamic_data) {
    if (leaser_ == nullptr) {
      return absl::FailedPreconditionError("dynamic data assignment without a data leaser");
    }
    return RunLeasedSteps(on_epoch, on_step, report_every);
  }
  PS_RETURN_IF_ERROR(model_->Start(client_));
  const bool sync = options_.consistency.mode() == v1::ConsistencySpec::SYNC;
  std::vector<int64_t> batch;
  EpochTotals epoch;
  int64_t steps_in_report = 0;
  skip_examples_ = client_->clock() * options_.batch_size;
  for (int64_t clock = client_->clock(); clock < total_clocks_; clock = client_->clock()) {
    if (cancelled_) return absl::CancelledError("the job was cancelled");
    NextBatch(&batch);
    uint32_t num_ranks;
    {
      absl::MutexLock l(&mu_);
      num_ranks = num_ranks_;
    }
    // Sync: the servers sum every live worker's gradient; each contributes its share of the mean.
    const float grad_scale =
        1.0f / (static_cast<float>(batch.size()) * (sync ? static_cast<float>(num_ranks) : 1.0f));
    PS_RETURN_IF_ERROR(Step(batch, grad_scale, clock, &epoch));
    const int64_t done = clock + 1;
    const bool epoch_end = done % clocks_per_epoch_ == 0 || done == total_clocks_;
    JobProgress p =
        UpdateProgress(done, static_cast<int>((done - 1) / clocks_per_epoch_) + 1, epoch);
    if (hook_ && rank0()) hook_(done, clock);
    if (on_step && report_every > 0 && ++steps_in_report % report_every == 0 && !epoch_end) {
      on_step(p);
    }
    if (!epoch_end) continue;
    // Each epoch's evaluation is rank 0's; after its last step every worker evaluates, so
    // that the job has a final one even if rank 0 dies first (the scheduler then takes the
    // lowest-ranked survivor's final report).
    if (options_.evaluate && (rank0() || done == total_clocks_)) {
      PS_ASSIGN_OR_RETURN(p, Evaluate());
    }
    if (on_epoch) on_epoch(p);
    epoch = EpochTotals();
  }
  absl::MutexLock l(&mu_);
  progress_.finished = true;
  return absl::OkStatus();
}

// One loop over the leases, kept whole (about 100 lines): the ranges in flight, those to report,
// the next lease being asked for and the epoch's totals are shared by every branch of it, and
// split into functions they would travel together as one more struct through each.
absl::Status JobRunner::RunLeasedSteps(const std::function<void(const JobProgress&)>& on_epoch,
                                       const std::function<void(const JobProgress&)>& on_step,
                                       int report_every) {
  PS_RETURN_IF_ERROR(model_->Start(client_));
  v1::LeaseDataRequest request;
  request.set_examples_per_epoch(model_->num_train_examples());
  request.set_batch_size(options_.batch_size);
  // Ranges stepped on whose push may still be in flight (oldest first), and those known applied
  // that the next lease reports.
  std::deque<uint64_t> in_flight;
  std::vector<uint64_t> finished;
  EpochTotals epoch;
  int64_t steps_in_report = 0;
  int32_t epochs_seen = -1;
  int64_t done = client_->clock();
  int data_epoch = 1;
  // Asks for the next range (reporting `finished`) on another thread: the next range is asked
  // for while this one is stepped on, so that the scheduler's answer costs no step time.
  auto ask = [&]() {
    request.set_take(true);
    request.mutable_finished()->Assign(finished.begin(), finished.end());
    finished.clear();
    return std::async(std::launch::async,
                      [leaser = leaser_, r = request]() { return leaser->Lease(r); });
  };
  absl::Time asked = absl::Now();
  // What this worker held when an earlier run of it stopped is handed out again.
  request.set_restart(true);
  absl::StatusOr<v1::LeaseDataResponse> lease = ask().get();
  request.set_restart(false);
  while (true) {
    if (cancelled_) return absl::CancelledError("the job was cancelled");
    if (!lease.ok()) {
      if (cancelled_) return absl::CancelledError("the job was cancelled");
      return WithPrefix(lease.status(), "taking a data range from the scheduler");
    }
    total_clocks_ = lease->total_clocks();
    if (epochs_seen < 0) epochs_seen = lease->epochs_done();
    if (lease->epochs_done() > epochs_seen && !lease->all_done()) {
      // An epoch of the whole job is read: rank 0 evaluates (the steps of the next one go on).
      epochs_seen = lease->epochs_done();
      JobProgress p = UpdateProgress(done, data_epoch, epoch);
      if (options_.evaluate && rank0()) {
        PS_ASSIGN_OR_RETURN(p, Evaluate());
        while (!in_flight.empty()) {  // Evaluate flushed the model
          finished.push_back(in_flight.front());
          in_flight.pop_front();
        }
      }
      if (on_epoch) on_epoch(p);
      epoch = EpochTotals();
    }
    if (lease->all_done()) break;
    if (!lease->has_range()) {
      // Others hold the last ranges: report ours (once the model's pushes are in) and wait.
      PS_RETURN_IF_ERROR(model_->Flush());
      finished.insert(finished.end(), in_flight.begin(), in_flight.end());
      if (in_flight.empty()) {
        absl::SleepFor(absl::Milliseconds(std::max<int64_t>(1, lease->retry_after_ms())));
      }
      in_flight.clear();
      run_data_wait_ += absl::Now() - asked;
      asked = absl::Now();
      lease = ask().get();
      continue;
    }
    const v1::DataRange& range = lease->range();
    data_epoch = range.epoch();
    const std::vector<int64_t> batch =
        RangeExamples(options_.seed, range.epoch(), model_->num_train_examples(),
                      options_.batch_size, range.position());
    if (batch.empty()) {
      return absl::InternalError(absl::StrCat("data range ", range.index(), " holds no example"));
    }
    // The range's clock: the pushes and pulls of this step are at the data's place in the job.
    const int64_t previous = done;
    client_->SetClock(range.clock());
    std::future<absl::StatusOr<v1::LeaseDataResponse>> next = ask();
    PS_RETURN_IF_ERROR(Step(batch, 1.0f / static_cast<float>(batch.size()), range.clock(), &epoch));
    done = range.clock() + 1;
    in_flight.push_back(range.index());
    while (static_cast<int>(in_flight.size()) > model_->StepsInFlight()) {
      finished.push_back(in_flight.front());
      in_flight.pop_front();
    }
    const JobProgress p = UpdateProgress(done, data_epoch, epoch);
    if (hook_ && rank0()) hook_(done, previous);
    if (on_step && report_every > 0 && ++steps_in_report % report_every == 0) on_step(p);
    asked = absl::Now();
    lease = next.get();
    run_data_wait_ += absl::Now() - asked;
  }
  // Every range is done (this worker's last ones were reported before all_done could come).
  done = total_clocks_;
  JobProgress p = UpdateProgress(done, data_epoch, epoch);
  if (options_.evaluate) {
    PS_ASSIGN_OR_RETURN(p, Evaluate());
  }
  if (on_epoch) on_epoch(p);
  absl::MutexLock l(&mu_);
  progress_.finished = true;
  return absl::OkStatus();
}

std::string FormatRunTotals(const JobProgress& p) {
  return absl::StrFormat("%d examples, compute %.2fs, blocked %.2fs, waiting for data %.2fs",
                         p.examples_read, p.run_compute_seconds, p.run_blocked_seconds,
                         p.run_data_wait_seconds);
}

}  // namespace ps
