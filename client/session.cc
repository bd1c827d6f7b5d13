// ps::Session (include/ps/session.h): a program job's link to its worker daemon (the
// WorkerAgent service on a Unix socket) and to the job's servers, with recovery.
#include "ps/session.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/client_internal.h"
#include "client/data_ranges.h"
#include "client/job_run.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "ps/v1/agent.grpc.pb.h"

namespace ps {
namespace {

// How long one GetAssignment of the watcher waits for a newer shard map.
constexpr absl::Duration kWatchWait = absl::Seconds(2);
// Figures kept for the running means (steps) and samples/s (seconds).
constexpr size_t kWindowSteps = 100;
constexpr absl::Duration kRateWindow = absl::Seconds(10);
// The largest batch_size NextBatch takes (the scheduler checks the data set size).
constexpr int64_t kMaxBatchSize = 1 << 20;

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : std::string(v);
}

Consistency ConsistencyOf(const v1::ConsistencySpec& c) {
  switch (c.mode()) {
    case v1::ConsistencySpec::SYNC:
      return Consistency::kSync;
    case v1::ConsistencySpec::SSP:
      return Consistency::kSsp;
    default:
      return Consistency::kAsync;
  }
}

}  // namespace

// The state the client consults (SessionLink) and the watcher thread updates.
class SessionState final : public SessionLink {
 public:
  explicit SessionState(std::vector<v1::TableSpec> tables) : tables_(std::move(tables)) {}

  bool Absorb(const absl::Status& s) override {
    // A server lost (or a request cancelled because a new map came): the step is interrupted.
    if (IsRecoverableRpcError(s) || (s.code() == absl::StatusCode::kCancelled && interrupted())) {
      absl::MutexLock l(&mu_);
      if (!interrupted_) {
        interrupted_ = true;
        cause_ = s;
      }
      return true;
    }
    return false;
  }
  bool interrupted() const override {
    absl::MutexLock l(&mu_);
    return interrupted_;
  }
  absl::Status InterruptedStatus() const override {
    absl::MutexLock l(&mu_);
    return StepInterruptedError(cause_);
  }
  uint64_t generation() const override { return generation_.load(); }
  // The client runs under a new engine: requests sent before are of steps already cut short.
  void Recovered() { ++generation_; }
  void Interrupt(const absl::Status& cause) {
    absl::MutexLock l(&mu_);
    if (!interrupted_) cause_ = cause;
    interrupted_ = true;
  }
  // Clears the interruption, returning its cause.
  absl::Status Resume() {
    absl::MutexLock l(&mu_);
    interrupted_ = false;
    return std::exchange(cause_, absl::OkStatus());
  }
  absl::StatusOr<v1::TableSpec> DeclaredTable(const std::string& name) const override {
    for (const v1::TableSpec& t : tables_) {
      if (t.name() == name) return t;
    }
    return absl::InvalidArgumentError(absl::StrCat("table '", name, "' is not declared by job ",
                                                   JobOf(), " (its job file declares ", Names(),
                                                   ")"));
  }
  absl::StatusOr<v1::TableSpec> DeclaredTableById(uint32_t id) const override {
    for (const v1::TableSpec& t : tables_) {
      if (t.table_id() == id) return t;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("table id ", id, " is not a table of job ", JobOf(), " (", Names(), ")"));
  }
  const std::vector<v1::TableSpec>& tables() const { return tables_; }

 private:
  std::string JobOf() const { return tables_.empty() ? "?" : tables_[0].job_id(); }
  std::string Names() const {
    std::vector<std::string> names;
    for (const v1::TableSpec& t : tables_) names.push_back("'" + t.name() + "'");
    return names.empty() ? "none" : absl::StrJoin(names, ", ");
  }

  const std::vector<v1::TableSpec> tables_;
  std::atomic<uint64_t> generation_{0};
  mutable absl::Mutex mu_;
  bool interrupted_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status cause_ ABSL_GUARDED_BY(mu_);
};

class Session::Impl {
 public:
  Impl(SessionOptions options, std::unique_ptr<v1::WorkerAgent::Stub> agent)
      : options_(std::move(options)), agent_(std::move(agent)) {}

  ~Impl() {
    {
      absl::MutexLock l(&mu_);
      stopping_ = true;
    }
    if (watcher_.joinable()) watcher_.join();
    if (client_ != nullptr) client_->Close();
  }

  absl::Status Start() {
    PS_ASSIGN_OR_RETURN(v1::WorkerAssignment a, GetAssignment(0, absl::ZeroDuration()));
    state_ = std::make_shared<SessionState>(
        std::vector<v1::TableSpec>(a.spec().tables().begin(), a.spec().tables().end()));
    PS_ASSIGN_OR_RETURN(RunStart run, StartUnder(a, -1));
    ClientOptions co;
    co.servers.assign(run.assignment.servers().begin(), run.assignment.servers().end());
    co.job_id = run.assignment.job_id();
    co.worker_id = run.assignment.worker_id();
    co.num_workers = static_cast<uint32_t>(std::max(1, run.assignment.spec().num_workers()));
    co.consistency = ConsistencyOf(run.assignment.spec().consistency());
    co.staleness = run.assignment.spec().consistency().staleness();
    co.configure_job = false;
    co.rpc_timeout = options_.rpc_timeout;
    client_ = MakeSessionClient(co, std::shared_ptr<RpcClient>(std::move(run.client)), state_);
    {
      absl::MutexLock l(&mu_);
      assignment_ = run.assignment;
      running_shard_epoch_ = run.assignment.shard_epoch();
      rank_ = run.assignment.rank();
      num_workers_ = static_cast<uint32_t>(run.assignment.worker_ids_size());
    }
    step_clock_ = client_->clock();
    seed_ = run.assignment.spec().seed();
    watcher_ = std::thread([this] { Watch(); });
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> Begin(int64_t total, int64_t per_epoch) {
    if (total < 0) return absl::InvalidArgumentError("total_steps must be >= 0");
    if (per_epoch < 0) return absl::InvalidArgumentError("steps_per_epoch must be >= 0");
    total_ = total;
    per_epoch_ = per_epoch;
    step_clock_ = client_->clock();
    PS_RETURN_IF_ERROR(SendReport(/*evaluation=*/false));
    return std::min(step_clock_, total_);
  }

  absl::StatusOr<int64_t> Next() {
    if (!state_->interrupted() && client_->clock() == step_clock_) {
      const absl::Status clocked = client_->Clock();  // a server lost interrupts the step
      if (!clocked.ok() && !IsStepInterrupted(clocked)) return clocked;
    }
    if (state_->interrupted() || NewerMap()) {
      PS_RETURN_IF_ERROR(Recover());
    } else {
      PS_RETURN_IF_ERROR(SendReport(false));
    }
    step_clock_ = client_->clock();
    return std::min(step_clock_, total_);
  }

  bool dynamic_data() const {
    absl::MutexLock l(&mu_);
    return assignment_.spec().data_assignment() == v1::DYNAMIC;
  }

  absl::StatusOr<std::optional<DataBatch>> NextBatch(int64_t examples, int batch_size) {
    if (!dynamic_data()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job_id(),
          " reads its data by STATIC assignment (data_assignment in its job file): loop with "
          "Begin()/Next() and pick each step's examples by rank() and num_workers()"));
    }
    if (examples <= 0 || batch_size <= 0 || batch_size > kMaxBatchSize) {
      return absl::InvalidArgumentError(
          absl::StrCat("NextBatch(", examples, ", ", batch_size,
                       "): the data set needs examples >= 1 and batch_size in 1..", kMaxBatchSize));
    }
    if (data_examples_ == 0) {
      data_examples_ = examples;
      data_batch_ = batch_size;
    } else if (examples != data_examples_ || batch_size != data_batch_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NextBatch(", examples, ", ", batch_size, "): the data set was ", data_examples_,
          " examples in ranges of ", data_batch_, " at the first call; it cannot change"));
    }
    if (data_done_) return std::nullopt;
    v1::LeaseDataRequest req;
    req.set_examples_per_epoch(examples);
    req.set_batch_size(batch_size);
    // End the step on the last range: report it done, or recover and read it again.
    if (state_->interrupted() || NewerMap()) {
      PS_RETURN_IF_ERROR(Recover());
      data_restart_ = true;  // what this worker held comes back first
    } else if (batch_active_) {
      req.add_finished(batch_index_);
      EngineOf(*client_)->SetClock(step_clock_ + 1);  // the progress of the step done
      PS_RETURN_IF_ERROR(SendReport(false));
    }
    batch_active_ = false;
    while (true) {
      req.set_take(true);
      req.set_restart(std::exchange(data_restart_, false));
      v1::LeaseDataResponse resp;
      PS_RETURN_IF_ERROR(CallAgent(&v1::WorkerAgent::Stub::LeaseData, req, &resp,
                                   options_.recovery_wait + absl::Seconds(30)));
      req.clear_finished();
      total_ = resp.total_clocks();
      if (resp.all_done()) {
        data_done_ = true;
        EngineOf(*client_)->SetClock(total_);
        PS_RETURN_IF_ERROR(SendReport(false));
        return std::nullopt;
      }
      if (!resp.has_range()) {
        absl::SleepFor(absl::Milliseconds(std::clamp<int64_t>(resp.retry_after_ms(), 1, 1000)));
        continue;
      }
      const v1::DataRange& range = resp.range();
      DataBatch batch;
      batch.epoch = range.epoch();
      batch.index = range.index();
      batch.step = range.clock();
      batch.epochs_done = resp.epochs_done();
      batch.examples = RangeExamples(seed_, range.epoch(), examples, batch_size, range.position());
      if (batch.examples.empty()) {
        return absl::InternalError(absl::StrCat("data range ", range.index(), " (position ",
                                                range.position(), ") holds no example"));
      }
      // The step's pushes and pulls are at the range's place in the job.
      EngineOf(*client_)->SetClock(range.clock());
      step_clock_ = range.clock();
      data_epoch_ = range.epoch();
      batch_active_ = true;
      batch_index_ = range.index();
      return batch;
    }
  }

  absl::Status Report(const StepReport& r) {
    // An interrupted step's figures are ignored (the step runs again): its requests failed, so
    // what it computed, a non-finite loss included, is not the program's fault.
    if (state_->interrupted()) return absl::OkStatus();
    if (r.loss.has_value() && !std::isfinite(*r.loss)) {
      absl::Status s = absl::InvalidArgumentError(absl::StrCat(
          "the program reported a non-finite loss (", *r.loss, ") at step ", step_clock_ + 1));
      v1::ReportRequest req;
      FillProgress(req.mutable_progress());
      req.mutable_progress()->set_loss(*r.loss);
      v1::ReportResponse resp;
      CallAgent(&v1::WorkerAgent::Stub::Report, req, &resp, absl::Seconds(10)).IgnoreError();
      return s;
    }
    if (r.loss.has_value()) losses_.push_back(*r.loss);
    if (r.accuracy.has_value()) accuracies_.push_back(*r.accuracy);
    while (losses_.size() > kWindowSteps) losses_.pop_front();
    while (accuracies_.size() > kWindowSteps) accuracies_.pop_front();
    const absl::Time now = absl::Now();
    if (r.samples > 0) samples_.emplace_back(now, r.samples);
    while (!samples_.empty() && now - samples_.front().first > kRateWindow) samples_.pop_front();
    for (const auto& [name, value] : r.metrics) metrics_[name] = value;
    return absl::OkStatus();
  }

  absl::Status ReportEvaluation(std::optional<double> loss, std::optional<double> accuracy,
                                const std::map<std::string, double>& metrics) {
    if (loss.has_value()) test_loss_ = *loss;
    if (accuracy.has_value()) test_accuracy_ = *accuracy;
    for (const auto& [name, value] : metrics) metrics_[name] = value;
    return SendReport(true);
  }

  absl::Status RequestCheckpoint() {
    v1::RequestCheckpointRequest req;
    req.set_job_id(job_id());
    v1::RequestCheckpointResponse resp;
    return CallAgent(&v1::WorkerAgent::Stub::RequestCheckpoint, req, &resp, absl::Seconds(30));
  }

  Client& client() { return *client_; }
  const std::vector<v1::TableSpec>& declared() const { return state_->tables(); }
  const std::string& job_id() const { return client_->job_id(); }
  uint32_t worker_id() const { return client_->worker_id(); }
  uint32_t rank() const {
    absl::MutexLock l(&mu_);
    return rank_;
  }
  uint32_t num_workers() const {
    absl::MutexLock l(&mu_);
    return num_workers_;
  }
  int recoveries() const { return recoveries_; }
  const SessionState& state() const { return *state_; }

 private:
  template <typename Req, typename Resp>
  absl::Status CallAgent(grpc::Status (v1::WorkerAgent::Stub::*method)(grpc::ClientContext*,
                                                                       const Req&, Resp*),
                         const Req& req, Resp* resp, absl::Duration timeout) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    grpc::Status s = (agent_.get()->*method)(&ctx, req, resp);
    if (!s.ok()) {
      return WithPrefix(FromGrpcStatus(s), "the worker daemon (PS_AGENT)");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<v1::WorkerAssignment> GetAssignment(uint64_t min_shard_epoch,
                                                     absl::Duration wait) {
    v1::GetAssignmentRequest req;
    req.set_min_shard_epoch(min_shard_epoch);
    req.set_wait_ms(absl::ToInt64Milliseconds(wait));
    v1::WorkerAssignment a;
    PS_RETURN_IF_ERROR(
        CallAgent(&v1::WorkerAgent::Stub::GetAssignment, req, &a, wait + absl::Seconds(10)));
    return a;
  }

  absl::StatusOr<RunStart> StartUnder(v1::WorkerAssignment a, int64_t last_clock) {
    RunStartOptions so;
    so.rpc_timeout = options_.rpc_timeout;
    so.last_clock = last_clock;
    so.tables = state_->tables();
    so.latest = [this]() { return GetAssignment(0, absl::ZeroDuration()); };
    so.report_restore_failure = [this](const v1::WorkerAssignment& order, const absl::Status& s) {
      v1::ReportRestoreFailureRequest req;
      req.set_job_id(order.job_id());
      req.set_shard_epoch(order.shard_epoch());
      req.set_checkpoint_id(order.restore().checkpoint_id());
      req.set_error(std::string(s.message()));
      req.set_code(static_cast<int32_t>(s.code()));
      v1::ReportResponse resp;
      CallAgent(&v1::WorkerAgent::Stub::ReportRestoreFailure, req, &resp, absl::Seconds(10))
          .IgnoreError();
    };
    so.log = [this](const std::string& line) { Log(line); };
    while (true) {
      auto run = StartRun(a, so);
      if (run.ok() || !IsNewShardMap(run.status())) return run;
      PS_ASSIGN_OR_RETURN(a, GetAssignment(0, absl::ZeroDuration()));
    }
  }

  void Log(const std::string& line) {
    if (options_.log_to_stderr) std::fprintf(stderr, "paramserver: %s\n", line.c_str());
  }

  bool NewerMap() const {
    absl::MutexLock l(&mu_);
    return assignment_.shard_epoch() > running_shard_epoch_;
  }

  // Watches the daemon for a newer shard map: the step in flight is then interrupted (its
  // requests cancelled) so that Next() recovers at once instead of waiting on a dead server.
  void Watch() {
    while (true) {
      uint64_t known;
      {
        absl::MutexLock l(&mu_);
        if (stopping_) return;
        known = std::max(assignment_.shard_epoch(), running_shard_epoch_);
      }
      auto a = GetAssignment(known, kWatchWait);
      absl::MutexLock l(&mu_);
      if (stopping_) return;
      if (!a.ok()) {
        // The daemon away: the program ends with it (it is the daemon's child).
        mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Seconds(1));
        continue;
      }
      rank_ = a->rank();
      num_workers_ = static_cast<uint32_t>(a->worker_ids_size());
      if (a->shard_epoch() > assignment_.shard_epoch()) {
        assignment_ = *a;
        if (a->shard_epoch() > running_shard_epoch_) {
          state_->Interrupt(
              absl::AbortedError(absl::StrCat("new shard map (epoch ", a->shard_epoch(), ")")));
          EngineOf(*client_)->CancelInFlight();
        }
      }
    }
  }

  // After a server failure (or a new map): waits for the scheduler's next shard map, starts
  // the run under it (the restore order carried out) and sets the clock to resume from.
  absl::Status Recover() {
    const absl::Status cause = state_->Resume();
    const absl::Time deadline = absl::Now() + options_.recovery_wait;
    uint64_t running;
    {
      absl::MutexLock l(&mu_);
      running = running_shard_epoch_;
    }
    Log(absl::StrCat(job_id(), " worker ", worker_id(), ": step ", step_clock_ + 1,
                     " interrupted (", cause.ToString(),
                     "); waiting for the scheduler's new shard map"));
    v1::WorkerAssignment a;
    while (true) {
      auto next = GetAssignment(running, absl::Seconds(2));
      if (!next.ok()) return next.status();
      if (next->shard_epoch() > running) {
        a = *std::move(next);
        break;
      }
      if (absl::Now() > deadline) {
        return absl::UnavailableError(absl::StrCat(
            "a data-plane request failed (", cause.ToString(), ") and no new shard map came in ",
            absl::FormatDuration(options_.recovery_wait)));
      }
    }
    // The interrupted step is done again: from this worker's clock before it (the servers that
    // took over slots learn it), or from the checkpoint's clock when the job rolls back.
    EngineOf(*client_)->CancelInFlight();
    PS_ASSIGN_OR_RETURN(RunStart run, StartUnder(a, step_clock_));
    state_->Resume().IgnoreError();  // failures of the old engine's last requests
    SwapEngine(*client_, std::shared_ptr<RpcClient>(std::move(run.client)));
    state_->Recovered();
    {
      absl::MutexLock l(&mu_);
      if (run.assignment.shard_epoch() > assignment_.shard_epoch()) assignment_ = run.assignment;
      running_shard_epoch_ = run.assignment.shard_epoch();
      rank_ = run.assignment.rank();
      num_workers_ = static_cast<uint32_t>(run.assignment.worker_ids_size());
    }
    ++recoveries_;
    Log(absl::StrCat(job_id(), " worker ", worker_id(), ": recovered under shard epoch ",
                     run.assignment.shard_epoch(),
                     run.assignment.has_restore()
                         ? absl::StrCat(" (", run.assignment.restore().reason(), ")")
                         : "",
                     "; resuming at step ", run.clock + 1));
    losses_.clear();
    accuracies_.clear();
    return SendReport(false);
  }

  void FillProgress(v1::WorkerProgress* p) const {
    p->set_job_id(job_id());
    p->set_clock(client_->clock());
    p->set_total_clocks(total_);
    const int64_t clock = std::max<int64_t>(0, client_->clock() - 1);
    p->set_epoch(data_epoch_ > 0 ? data_epoch_
                 : per_epoch_ > 0
                     ? static_cast<int32_t>(std::min<int64_t>(clock / per_epoch_, 1 << 30)) + 1
                     : 1);
    double loss = 0, acc = 0;
    for (double v : losses_) loss += v;
    for (double v : accuracies_) acc += v;
    p->set_loss(losses_.empty() ? 0 : loss / losses_.size());
    p->set_accuracy(accuracies_.empty() ? -1 : acc / accuracies_.size());  // -1: none reported
    p->set_test_loss(test_loss_);
    p->set_test_accuracy(test_accuracy_);
    int64_t samples = 0;
    for (const auto& entry : samples_) samples += entry.second;
    const absl::Time since = samples_.empty() ? absl::Now() : samples_.front().first;
    const double seconds = absl::ToDoubleSeconds(absl::Now() - since);
    p->set_samples_per_second(seconds > 0.05 ? samples / seconds : 0);
    for (const auto& [name, value] : metrics_) (*p->mutable_metrics())[name] = value;
    absl::MutexLock l(&mu_);
    p->set_shard_epoch(running_shard_epoch_);
    p->set_membership_epoch(assignment_.membership_epoch());
  }

  absl::Status SendReport(bool evaluation) {
    v1::ReportRequest req;
    FillProgress(req.mutable_progress());
    v1::ReportResponse resp;
    // Long enough for a checkpoint's snapshot (the daemon takes it while this call waits).
    PS_RETURN_IF_ERROR(CallAgent(&v1::WorkerAgent::Stub::Report, req, &resp, absl::Minutes(10)));
    absl::MutexLock l(&mu_);
    rank_ = resp.rank();
    num_workers_ = resp.num_workers();
    return absl::OkStatus();
  }

  const SessionOptions options_;
  std::unique_ptr<v1::WorkerAgent::Stub> agent_;
  std::shared_ptr<SessionState> state_;
  std::shared_ptr<Client> client_;
  std::thread watcher_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  v1::WorkerAssignment assignment_ ABSL_GUARDED_BY(mu_);   // the newest orders seen
  uint64_t running_shard_epoch_ ABSL_GUARDED_BY(mu_) = 0;  // the map the client runs under
  uint32_t rank_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t num_workers_ ABSL_GUARDED_BY(mu_) = 1;

  // The training loop's thread only.
  int64_t total_ = 0;
  int64_t per_epoch_ = 0;
  int64_t step_clock_ = 0;  // the clock at the start of the current step
  std::deque<double> losses_, accuracies_;
  std::deque<std::pair<absl::Time, int64_t>> samples_;
  std::map<std::string, double> metrics_;
  double test_loss_ = -1, test_accuracy_ = -1;
  std::atomic<int> recoveries_{0};
  // Dynamic data (NextBatch).
  uint64_t seed_ = 0;
  int64_t data_examples_ = 0;  // the data set's shape, fixed by the first call
  int data_batch_ = 0;
  bool data_restart_ = true;   // the next lease is the first of this run
  bool batch_active_ = false;  // a range is being stepped on
  uint64_t batch_index_ = 0;
  int32_t data_epoch_ = 0;
  bool data_done_ = false;
};

absl::StatusOr<std::unique_ptr<Session>> Session::FromEnv(SessionOptions options) {
  if (options.agent.empty()) options.agent = EnvOr("PS_AGENT", "");
  if (options.agent.empty()) {
    return absl::FailedPreconditionError(
        "PS_AGENT is not set: a Session belongs to a program that a worker daemon runs for a "
        "program job (psctl submit); to use servers directly, make a ps::Client");
  }
  auto channel = grpc::CreateChannel(options.agent, grpc::InsecureChannelCredentials());
  auto impl = std::make_unique<Impl>(options, v1::WorkerAgent::NewStub(channel));
  PS_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

const std::string& Session::job_id() const { return impl_->job_id(); }
uint32_t Session::worker_id() const { return impl_->worker_id(); }
uint32_t Session::rank() const { return impl_->rank(); }
uint32_t Session::num_workers() const { return impl_->num_workers(); }
Consistency Session::consistency() const {
  return const_cast<Impl&>(*impl_).client().options().consistency;
}
int Session::staleness() const { return const_cast<Impl&>(*impl_).client().options().staleness; }
Client& Session::client() { return impl_->client(); }
Pending Session::Prefetch(const Table& table, absl::Span<const uint64_t> keys) {
  return impl_->client().PrefetchAsync(table, keys);
}

absl::StatusOr<Table> Session::table(const std::string& name) const {
  auto spec = impl_->state().DeclaredTable(name);
  if (!spec.ok()) return absl::NotFoundError(spec.status().message());
  return const_cast<Impl&>(*impl_).client().OpenTable(name);
}

std::vector<Table> Session::tables() const {
  std::vector<Table> out;
  for (const v1::TableSpec& t : impl_->declared()) {
    auto table = const_cast<Impl&>(*impl_).client().OpenTable(t.name());
    if (table.ok()) out.push_back(*table);
  }
  return out;
}

absl::StatusOr<int64_t> Session::Begin(int64_t total_steps, int64_t steps_per_epoch) {
  return impl_->Begin(total_steps, steps_per_epoch);
}
absl::StatusOr<int64_t> Session::Next() { return impl_->Next(); }
absl::Status Session::Report(const StepReport& report) { return impl_->Report(report); }
absl::Status Session::ReportEvaluation(std::optional<double> test_loss,
                                       std::optional<double> test_accuracy,
                                       const std::map<std::string, double>& metrics) {
  return impl_->ReportEvaluation(test_loss, test_accuracy, metrics);
}
absl::Status Session::RequestCheckpoint() { return impl_->RequestCheckpoint(); }
bool Session::dynamic_data() const { return impl_->dynamic_data(); }
absl::StatusOr<std::optional<DataBatch>> Session::NextBatch(int64_t num_examples, int batch_size) {
  return impl_->NextBatch(num_examples, batch_size);
}
int Session::recoveries() const { return impl_->recoveries(); }
bool Session::step_interrupted() const { return impl_->state().interrupted(); }

}  // namespace ps
