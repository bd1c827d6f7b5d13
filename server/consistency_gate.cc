#include "server/consistency_gate.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/reject_reason.h"

namespace ps {

using v1::ConsistencySpec;

struct ConsistencyGate::Job {
  const std::string id;
  explicit Job(std::string id) : id(std::move(id)) {}

  // Serializes sync applies so clocks are applied once each and in order.
  absl::Mutex apply_mu;

  absl::Mutex mu;
  absl::CondVar cv;  // signalled when min clock or applied clock moves
  ConsistencySpec spec ABSL_GUARDED_BY(mu);
  uint64_t membership_epoch ABSL_GUARDED_BY(mu) = 0;
  std::map<uint32_t, int64_t> clocks ABSL_GUARDED_BY(mu);  // live workers only
  // Parts seen of multi-part PushPulls, by (worker, clock).
  std::map<std::pair<uint32_t, int64_t>, uint32_t> parts ABSL_GUARDED_BY(mu);
  // sync: every clock below this has been applied.
  int64_t applied_clock ABSL_GUARDED_BY(mu) = 0;
  // Requests of older shard epochs are refused (0: none yet).
  uint64_t shard_epoch ABSL_GUARDED_BY(mu) = 0;
  // DropJob forgot the job: requests that still hold it fail.
  bool dropped ABSL_GUARDED_BY(mu) = false;
  // Failover (BeginCatchUp): the clock whose re-sent pushes the workers in `owed` still owe,
  // with the parts of each seen so far; -1: none.
  int64_t catch_up_clock ABSL_GUARDED_BY(mu) = -1;
  std::set<uint32_t> owed ABSL_GUARDED_BY(mu);
  std::map<uint32_t, uint32_t> resend_parts ABSL_GUARDED_BY(mu);
  std::vector<bool> catch_up_slots ABSL_GUARDED_BY(mu);

  absl::Status CheckNotDropped() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (!dropped) return absl::OkStatus();
    return Rejected(RejectReason::kDroppedJob,
                    absl::FailedPreconditionError(absl::StrCat(
                        "job '", id, "' was dropped from this server while the request ran")));
  }

  absl::Status CheckEpoch(uint64_t request_epoch) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (request_epoch == 0 || request_epoch >= shard_epoch) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat("stale shard map epoch ", request_epoch,
                                                      " of job ", id, "; this server is at ",
                                                      shard_epoch));
  }

  int64_t MinClock() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (clocks.empty()) return std::numeric_limits<int64_t>::max();
    int64_t m = std::numeric_limits<int64_t>::max();
    for (const auto& [w, c] : clocks) m = std::min(m, c);
    return m;
  }
  // Whether a pull by a worker at `clock` may be served now.
  bool ReadyFor(int64_t clock) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    switch (spec.mode()) {
      case ConsistencySpec::SYNC:
        return applied_clock >= clock && (catch_up_clock < 0 || clock <= catch_up_clock);
      case ConsistencySpec::SSP:
        return MinClock() >= clock - spec.staleness();
      default:
        return true;
    }
  }
  // The ticket of a pull served now (ReadyFor(clock)), `start` being when it began to wait.
  PullTicket Ticket(int64_t clock, absl::Time start) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    PullTicket t;
    t.min_clock = clocks.empty() ? clock : MinClock();
    t.waited = absl::Now() - start;
    return t;
  }
  std::string Slowest() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const int64_t m = MinClock();
    std::vector<uint32_t> slow;
    for (const auto& [w, c] : clocks)
      if (c == m) slow.push_back(w);
    return absl::StrCat("worker(s) ", absl::StrJoin(slow, ","), " at clock ", m);
  }
};

ConsistencyGate::ConsistencyGate(ApplyClockFn apply_clock) : apply_clock_(std::move(apply_clock)) {}

absl::Status ConsistencyGate::CheckClockRange(const char* what, int64_t clock) {
  if (clock >= 0 && clock <= kMaxClock) return absl::OkStatus();
  return Rejected(RejectReason::kBadClock,
                  absl::InvalidArgumentError(
                      absl::StrCat(what, " ", clock, " is not in 0..", kMaxClock, " (2^48)")));
}
ConsistencyGate::~ConsistencyGate() = default;

absl::Status ConsistencyGate::Configure(const std::string& job_id, const ConsistencySpec& spec,
                                        const std::vector<uint32_t>& worker_ids,
                                        uint64_t membership_epoch) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id is empty");
  if (spec.mode() == ConsistencySpec::SSP && spec.staleness() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("consistency.staleness is ", spec.staleness(), "; must be >= 0"));
  }
  if (!ConsistencySpec::Mode_IsValid(spec.mode())) {
    return absl::InvalidArgumentError(
        absl::StrCat("consistency.mode ", spec.mode(), " is unknown"));
  }
  if (spec.data_clocks() && spec.mode() == ConsistencySpec::SYNC) {
    return absl::InvalidArgumentError(
        "consistency.data_clocks needs mode ssp or async (sync clocks are steps of every worker)");
  }
  std::map<uint32_t, int64_t> wanted;
  for (uint32_t w : worker_ids) {
    if (!wanted.emplace(w, 0).second) {
      return absl::InvalidArgumentError(absl::StrCat("worker id ", w, " is listed twice"));
    }
  }
  std::shared_ptr<Job> held;
  {
    absl::MutexLock l(&mu_);
    auto& slot = jobs_[job_id];
    if (slot == nullptr) slot = std::make_shared<Job>(job_id);
    held = slot;
  }
  Job* job = held.get();  // raw: what the lock annotations name
  {
    absl::MutexLock l(&job->mu);
    PS_RETURN_IF_ERROR(job->CheckNotDropped());
    const bool fresh = job->membership_epoch == 0 && job->clocks.empty();
    if (!fresh) {
      if (job->spec.mode() != spec.mode() || job->spec.staleness() != spec.staleness() ||
          job->spec.data_clocks() != spec.data_clocks()) {
        return absl::FailedPreconditionError(
            absl::StrCat("job ", job_id, " is already configured with another consistency mode"));
      }
      if (membership_epoch < job->membership_epoch) {
        return absl::FailedPreconditionError(absl::StrCat("membership epoch ", membership_epoch,
                                                          " is older than the job's ",
                                                          job->membership_epoch));
      }
      if (membership_epoch == job->membership_epoch) {
        bool same = wanted.size() == job->clocks.size();
        for (const auto& [w, c] : wanted) same = same && job->clocks.count(w) == 1;
        if (!same) {
          return absl::FailedPreconditionError(absl::StrCat(
              "job ", job_id, " membership epoch ", membership_epoch,
              " was configured with another worker set; use a larger epoch to change it"));
        }
        return absl::OkStatus();
      }
    }
    // New workers join at the clock the job has reached: the applied clock in sync mode (where
    // it tracks the minimum), else the slowest live worker's clock.
    int64_t start = 0;
    if (!fresh) {
      const bool sync = job->spec.mode() == ConsistencySpec::SYNC;
      start = sync || job->clocks.empty() ? job->applied_clock : job->MinClock();
    }
    for (auto& [w, c] : wanted) {
      auto it = job->clocks.find(w);
      c = it != job->clocks.end() ? it->second : start;
    }
    job->spec = spec;
    job->membership_epoch = membership_epoch;
    job->clocks = std::move(wanted);
    // A worker that left owes no re-send any more.
    for (auto it = job->owed.begin(); it != job->owed.end();) {
      it = job->clocks.count(*it) == 0 ? job->owed.erase(it) : std::next(it);
    }
    job->cv.SignalAll();
  }
  MaybeEndCatchUp(job);
  ApplyFinishedClocks(job);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ConsistencyGate::Job>> ConsistencyGate::Find(
    const std::string& job_id) const {
  absl::ReaderMutexLock l(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return Rejected(
        RejectReason::kUnconfiguredJob,
        absl::FailedPreconditionError(absl::StrCat(
            "job '", job_id, "' is not configured on this server (ConfigureJob first)")));
  }
  return it->second;
}

void ConsistencyGate::DropJob(const std::string& job_id) {
  std::shared_ptr<Job> held;
  {
    absl::MutexLock l(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return;
    held = std::move(it->second);
    jobs_.erase(it);
  }
  Job* job = held.get();
  // Pushes that passed their check hold apply_mu (shared) until they are applied.
  absl::MutexLock hold_pushes_and_applies(&job->apply_mu);
  absl::MutexLock l(&job->mu);
  job->dropped = true;
  job->cv.SignalAll();
}

bool ConsistencyGate::HasJob(const std::string& job_id) const { return Find(job_id).ok(); }

std::map<uint32_t, int64_t> ConsistencyGate::Clocks(const std::string& job_id) const {
  auto job = Find(job_id);
  if (!job.ok()) return {};
  Job* j = job->get();
  absl::MutexLock l(&j->mu);
  return j->clocks;
}

absl::StatusOr<ConsistencySpec::Mode> ConsistencyGate::ModeOf(const std::string& job_id) const {
  auto job = Find(job_id);
  if (!job.ok()) return job.status();
  Job* j = job->get();
  absl::MutexLock l(&j->mu);
  return j->spec.mode();
}

absl::Status ConsistencyGate::CheckPush(const std::string& job_id, uint32_t worker_id,
                                        int64_t clock, uint64_t shard_epoch) const {
  PS_RETURN_IF_ERROR(CheckClockRange("push clock", clock));
  auto found = Find(job_id);
  if (!found.ok()) return found.status();
  return CheckPushOf(found->get(), worker_id, clock, shard_epoch);
}

absl::Status ConsistencyGate::CheckPushOf(Job* job, uint32_t worker_id, int64_t clock,
                                          uint64_t shard_epoch) const {
  PS_RETURN_IF_ERROR(CheckClockRange("push clock", clock));
  const std::string& job_id = job->id;
  absl::MutexLock l(&job->mu);
  PS_RETURN_IF_ERROR(job->CheckNotDropped());
  PS_RETURN_IF_ERROR(job->CheckEpoch(shard_epoch));
  auto it = job->clocks.find(worker_id);
  if (it == job->clocks.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker_id, " is not a live worker of job ", job_id));
  }
  // Data clocks: the clock of the range a worker reads may be ahead of its last one (the
  // PushPull that carries it moves the worker there).
  if (clock > it->second && !job->spec.data_clocks()) {
    return Rejected(RejectReason::kBadClock,
                    absl::FailedPreconditionError(
                        absl::StrCat("push for clock ", clock, " is ahead of worker ", worker_id,
                                     "'s clock ", it->second, " (advance the clock first)")));
  }
  if (job->spec.mode() == ConsistencySpec::SYNC && clock < it->second) {
    return Rejected(RejectReason::kBadClock,
                    absl::FailedPreconditionError(
                        absl::StrCat("sync push for clock ", clock, " is late: worker ", worker_id,
                                     " already advanced to clock ", it->second)));
  }
  return absl::OkStatus();
}

absl::Status ConsistencyGate::CheckPushAndRun(const std::string& job_id, uint32_t worker_id,
                                              int64_t clock, uint64_t shard_epoch,
                                              absl::FunctionRef<absl::Status()> then) {
  auto found = Find(job_id);
  if (!found.ok()) return found.status();
  absl::ReaderMutexLock hold_applies(&found->get()->apply_mu);
  absl::Status s = CheckPushOf(found->get(), worker_id, clock, shard_epoch);
  if (!s.ok()) return s;
  return then();
}

absl::StatusOr<int64_t> ConsistencyGate::AdvanceClock(const std::string& job_id, uint32_t worker_id,
                                                      int64_t new_clock, uint64_t shard_epoch) {
  PS_RETURN_IF_ERROR(CheckClockRange("clock", new_clock));
  auto found = Find(job_id);
  if (!found.ok()) return found.status();
  Job* job = found->get();
  int64_t min_clock;
  {
    absl::MutexLock l(&job->mu);
    PS_RETURN_IF_ERROR(job->CheckEpoch(shard_epoch));
    auto it = job->clocks.find(worker_id);
    if (it == job->clocks.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", worker_id, " is not a live worker of job ", job_id));
    }
    if (new_clock > it->second + 1 && !job->spec.data_clocks()) {
      return Rejected(RejectReason::kBadClock,
                      absl::FailedPreconditionError(
                          absl::StrCat("clock ", new_clock, " is more than one ahead of worker ",
                                       worker_id, "'s clock ", it->second)));
    }
    if (new_clock <= it->second) return job->MinClock();
    it->second = new_clock;
    job->parts.erase(job->parts.lower_bound({worker_id, std::numeric_limits<int64_t>::min()}),
                     job->parts.lower_bound({worker_id, new_clock}));
    min_clock = job->MinClock();
    job->cv.SignalAll();
  }
  ApplyFinishedClocks(job);
  return min_clock;
}

void ConsistencyGate::SetShardEpoch(const std::string& job_id, uint64_t shard_epoch) {
  auto found = Find(job_id);
  if (!found.ok()) return;
  Job* job = found->get();
  absl::MutexLock l(&job->mu);
  job->shard_epoch = std::max(job->shard_epoch, shard_epoch);
}

absl::Status ConsistencyGate::RaiseClock(const std::string& job_id, uint32_t worker_id,
                                         int64_t clock) {
  PS_RETURN_IF_ERROR(CheckClockRange("caller_clock", clock));
  auto found = Find(job_id);
  if (!found.ok()) return found.status();
  Job* job = found->get();
  {
    absl::MutexLock l(&job->mu);
    auto it = job->clocks.find(worker_id);
    if (it == job->clocks.end() || clock <= it->second) return absl::OkStatus();
    it->second = clock;
    job->parts.erase(job->parts.lower_bound({worker_id, std::numeric_limits<int64_t>::min()}),
                     job->parts.lower_bound({worker_id, clock}));
    job->cv.SignalAll();
  }
  ApplyFinishedClocks(job);
  return absl::OkStatus();
}

absl::StatusOr<std::map<uint32_t, int64_t>> ConsistencyGate::ResetClocks(
    const std::string& job_id, int64_t clock, const std::function<absl::Status()>& reset_state) {
  PS_RETURN_IF_ERROR(CheckClockRange("rollback clock", clock));
  auto found = Find(job_id);
  if (!found.ok()) return found.status();
  Job* job = found->get();
  absl::MutexLock hold_pushes_and_applies(&job->apply_mu);
  {
    absl::MutexLock l(&job->mu);
    PS_RETURN_IF_ERROR(job->CheckNotDropped());  // nothing is loaded into a dropped job
  }
  if (reset_state) {
    absl::Status s = reset_state();
    if (!s.ok()) return s;
  }
  absl::MutexLock l(&job->mu);
  for (auto& [w, c] : job->clocks) c = clock;
  job->applied_clock = clock;
  job->parts.clear();
  job->catch_up_clock = -1;  // a rollback loads every slot: nothing is owed
  job->owed.clear();
  job->resend_parts.clear();
  job->cv.SignalAll();
  return job->clocks;
}

absl::StatusOr<bool> ConsistencyGate::CountClockPart(const std::string& job_id, uint32_t worker_id,
                                                     int64_t clock, uint32_t parts) {
  auto found = Find(job_id);
  if (!found.ok()) return found.status();
  Job* job = found->get();
  absl::MutexLock l(&job->mu);
  if (parts <= 1) return true;
  uint32_t& seen = job->parts[{worker_id, clock}];
  if (++seen < parts) return false;
  job->parts.erase({worker_id, clock});
  return true;
}

void ConsistencyGate::ApplyFinishedClocks(Job* job) {
  {
    // Only sync jobs apply by clock; the others must not wait here for their pushes in flight.
    absl::MutexLock l(&job->mu);
    if (job->spec.mode() != ConsistencySpec::SYNC) return;
  }
  absl::MutexLock apply_lock(&job->apply_mu);
  // Every finished clock in one call: a jump of many clocks costs what their gradients cost.
  // Only this loop (under apply_mu) moves applied_clock up, so it ends once it caught up.
  while (true) {
    int64_t from, to;
    {
      absl::MutexLock l(&job->mu);
      if (job->spec.mode() != ConsistencySpec::SYNC || job->dropped) return;
      if (job->clocks.empty()) return;
      from = job->applied_clock;
      to = job->MinClock();
      // A clock being caught up waits for its re-sent pushes (MaybeEndCatchUp).
      if (job->catch_up_clock >= 0) to = std::min(to, job->catch_up_clock);
      if (from >= to) return;
    }
    apply_clock_(job->id, from, to);
    absl::MutexLock l(&job->mu);
    job->applied_clock = to;
    job->cv.SignalAll();
  }
}

absl::Status ConsistencyGate::BeginCatchUp(const std::string& job_id, int64_t clock,
                                           std::vector<bool> slots) {
  auto found = Find(job_id);
  if (!found.ok() || clock < 0) return found.status();
  Job* job = found->get();
  absl::MutexLock l(&job->mu);
  if (job->spec.mode() != ConsistencySpec::SYNC) return absl::OkStatus();
  std::set<uint32_t> owed;
  for (const auto& [w, c] : job->clocks) {
    if (c > clock + 1) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", w, " is at clock ", c, ", more than one past clock ", clock,
                       " of the copies taken over: they missed clocks no re-send brings back"));
    }
    if (c > clock) owed.insert(w);
  }
  if (owed.empty()) return absl::OkStatus();
  job->catch_up_clock = clock;
  job->owed = std::move(owed);
  job->resend_parts.clear();
  job->catch_up_slots = std::move(slots);
  return absl::OkStatus();
}

std::vector<bool> ConsistencyGate::CatchUpSlots(const std::string& job_id) const {
  auto found = Find(job_id);
  if (!found.ok()) return {};
  Job* job = found->get();
  absl::MutexLock l(&job->mu);
  return job->catch_up_clock < 0 ? std::vector<bool>() : job->catch_up_slots;
}

int64_t ConsistencyGate::CatchUpClock(const std::string& job_id) const {
  auto found = Find(job_id);
  if (!found.ok()) return -1;
  Job* job = found->get();
  absl::MutexLock l(&job->mu);
  return job->catch_up_clock;
}

absl::StatusOr<bool> ConsistencyGate::ResendAndRun(const std::string& job_id, uint32_t worker_id,
                                                   int64_t clock, uint32_t parts,
                                                   uint64_t shard_epoch,
                                                   absl::FunctionRef<absl::StatusOr<bool>()> then) {
  PS_RETURN_IF_ERROR(CheckClockRange("push clock", clock));
  auto found = Find(job_id);
  if (!found.ok()) return found.status();
  Job* job = found->get();
  {
    absl::ReaderMutexLock hold_applies(&job->apply_mu);
    {
      absl::MutexLock l(&job->mu);
      PS_RETURN_IF_ERROR(job->CheckNotDropped());
      PS_RETURN_IF_ERROR(job->CheckEpoch(shard_epoch));
      if (job->catch_up_clock != clock || job->owed.count(worker_id) == 0) return false;
    }
    PS_ASSIGN_OR_RETURN(const bool applied, then());
    if (!applied) return true;  // a repeated request: counted when it was applied
    absl::MutexLock l(&job->mu);
    if (job->owed.count(worker_id) > 0 && ++job->resend_parts[worker_id] >= std::max(1u, parts)) {
      job->owed.erase(worker_id);
      job->resend_parts.erase(worker_id);
    }
  }
  MaybeEndCatchUp(job);
  return true;
}

void ConsistencyGate::MaybeEndCatchUp(Job* job) {
  int64_t clock;
  {
    absl::MutexLock l(&job->mu);
    if (job->catch_up_clock < 0 || !job->owed.empty()) return;
    clock = job->catch_up_clock;
  }
  {
    absl::MutexLock apply_lock(&job->apply_mu);
    bool applied_already;
    {
      absl::MutexLock l(&job->mu);
      if (job->catch_up_clock != clock || job->dropped) return;
      applied_already = job->applied_clock > clock;
    }
    // This server applied `clock` before it took the slots over: only their sums are left.
    if (applied_already) apply_clock_(job->id, clock, clock + 1);
    absl::MutexLock l(&job->mu);
    job->catch_up_clock = -1;
    job->cv.SignalAll();
  }
  ApplyFinishedClocks(job);
}

void ConsistencyGate::Shutdown() {
  shutdown_.store(true);
  std::vector<std::shared_ptr<Job>> jobs;
  {
    absl::ReaderMutexLock l(&mu_);
    for (const auto& [id, job] : jobs_) jobs.push_back(job);
  }
  for (const std::shared_ptr<Job>& job : jobs) {
    absl::MutexLock l(&job->mu);
    job->cv.SignalAll();
  }
}

absl::StatusOr<ConsistencyGate::PullTicket> ConsistencyGate::WaitForPull(
    const std::string& job_id, int64_t clock, absl::Time deadline, prometheus::Gauge* waiting) {
  PS_RETURN_IF_ERROR(CheckClockRange("pull clock", clock));
  auto found = Find(job_id);
  if (!found.ok()) return found.status();
  Job* job = found->get();
  const absl::Time start = absl::Now();
  // Counts this pull in `waiting` while it blocks (pulls that pass at once are never counted).
  struct WaitingScope {
    prometheus::Gauge* gauge = nullptr;
    ~WaitingScope() {
      if (gauge != nullptr) gauge->Decrement();
    }
  } waiting_scope;
  absl::MutexLock l(&job->mu);
  while (!job->ReadyFor(clock)) {
    PS_RETURN_IF_ERROR(job->CheckNotDropped());
    if (shutdown_.load()) {
      return absl::UnavailableError(absl::StrCat("the server is shutting down; the pull at clock ",
                                                 clock, " of job ", job_id, " was waiting for ",
                                                 job->Slowest()));
    }
    if (waiting != nullptr && waiting_scope.gauge == nullptr) {
      waiting->Increment();
      waiting_scope.gauge = waiting;
    }
    if (job->cv.WaitWithDeadline(&job->mu, deadline) && absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("pull at clock ", clock, " of job ", job_id, " waited ",
                       absl::FormatDuration(absl::Now() - start), " for ", job->Slowest()));
    }
  }
  return job->Ticket(clock, start);
}

absl::StatusOr<std::optional<ConsistencyGate::PullTicket>> ConsistencyGate::TryPull(
    const std::string& job_id, int64_t clock) {
  PS_RETURN_IF_ERROR(CheckClockRange("pull clock", clock));
  auto found = Find(job_id);
  if (!found.ok()) return found.status();
  Job* job = found->get();
  const absl::Time start = absl::Now();
  absl::MutexLock l(&job->mu);
  if (!job->ReadyFor(clock)) return std::nullopt;
  return job->Ticket(clock, start);
}

}  // namespace ps
