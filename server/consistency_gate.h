// Worker clocks and the consistency rules (sync / ssp / async) of each job.
#ifndef PS_SERVER_CONSISTENCY_GATE_H_
#define PS_SERVER_CONSISTENCY_GATE_H_

#include <prometheus/gauge.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ps/v1/types.pb.h"

namespace ps {

// Tracks, per job, the live workers and their clocks, and decides when a pull may be served.
//   sync: gradients of clock c are accumulated; once every live worker has advanced past c,
//         `apply_clocks(job, from, to)` is called for the finished clocks [from, to) (each clock
//         exactly once, in order) and pulls at c+1 are released.
//   ssp(s): a pull at clock c waits until the slowest live worker is at clock >= c - s.
//   async: pulls never wait.
//   data clocks (ssp/async with dynamic data assignment): a worker's clock follows the data it
//         reads, so it may jump ahead by more than one, and its pushes may carry a clock ahead
//         of (the PushPull moves it there) or behind its own.
// Clocks are steps: 0 <= clock <= kMaxClock. Every clock a request carries (push, pull, Clock,
// ConfigureJob's caller_clock, a rollback's clock) is checked against that range, so that no
// clock arithmetic can overflow; the work of a request never depends on how far a clock moves.
// Thread-safe. Jobs do not share locks.
class ConsistencyGate {
 public:
  // Called without any gate lock held; for sync jobs, applies the gradients of every clock in
  // [from, to), in order. Its cost must depend on the clocks that hold gradients, not on
  // to - from: a worker may jump many clocks at once (ConfigureJob's caller_clock).
  using ApplyClockFn = std::function<void(const std::string& job_id, int64_t from, int64_t to)>;

  // The largest clock a request may carry: 2^48 steps (9 years at a million steps a second).
  static constexpr int64_t kMaxClock = int64_t{1} << 48;
  // INVALID_ARGUMENT naming `what` unless 0 <= clock <= kMaxClock.
  static absl::Status CheckClockRange(const char* what, int64_t clock);

  explicit ConsistencyGate(ApplyClockFn apply_clock);
  ~ConsistencyGate();

  // Creates the job or, with a larger membership epoch, replaces its worker set (new workers
  // start at the job's current minimum clock). Same epoch: the spec and workers must match.
  absl::Status Configure(const std::string& job_id, const v1::ConsistencySpec& spec,
                         const std::vector<uint32_t>& worker_ids, uint64_t membership_epoch);

  bool HasJob(const std::string& job_id) const;
  // The clocks of the job's live workers (empty for an unknown job).
  std::map<uint32_t, int64_t> Clocks(const std::string& job_id) const;
  absl::StatusOr<v1::ConsistencySpec::Mode> ModeOf(const std::string& job_id) const;

  // Checks that `worker_id` may push gradients for `clock` now: it must be a live worker, and
  // the clock must not be ahead of its own (unless the job has data clocks; nor, in sync mode,
  // behind it).
  // A request routed with a shard epoch older than the job's (SetShardEpoch) is refused too
  // (`shard_epoch` 0: not checked).
  absl::Status CheckPush(const std::string& job_id, uint32_t worker_id, int64_t clock,
                         uint64_t shard_epoch = 0) const;

  // CheckPush, then `then()` (which accumulates the push) while the job's sync applies are held
  // off (shared with other pushes): a push that passed the check cannot land in a clock that
  // another request applied in between.
  absl::Status CheckPushAndRun(const std::string& job_id, uint32_t worker_id, int64_t clock,
                               uint64_t shard_epoch, absl::FunctionRef<absl::Status()> then);

  // Moves the worker's clock to `new_clock`, which may be at most one ahead of its current clock
  // (any distance with data clocks; older clocks are a no-op). Returns the job's minimum clock
  // afterwards.
  absl::StatusOr<int64_t> AdvanceClock(const std::string& job_id, uint32_t worker_id,
                                       int64_t new_clock, uint64_t shard_epoch = 0);

  // Requests routed with an older shard epoch than this are refused from now on (CheckPush,
  // AdvanceClock). Checked under the same lock as the clocks, so a request of the old map
  // that was already past the server's entry check cannot move a clock after a restore reset
  // it. Never lowers the epoch.
  void SetShardEpoch(const std::string& job_id, uint64_t shard_epoch);

  // Moves the worker's clock up to `clock` if it is behind (never down); no-op for a worker
  // that is not live. A server that took over slots learns where the workers are this way.
  absl::Status RaiseClock(const std::string& job_id, uint32_t worker_id, int64_t clock);

  // Rolls the job back to `clock`: every live worker's clock and (sync) the next clock to apply
  // become `clock`, counted PushPull parts are dropped, and waiting pulls are woken. First, with
  // pushes and sync applies held off, runs `reset_state` (if set: e.g. loads rows and drops
  // accumulated gradients); if it fails, nothing else changes and its error is returned.
  // Returns the clocks afterwards.
  absl::StatusOr<std::map<uint32_t, int64_t>> ResetClocks(
      const std::string& job_id, int64_t clock,
      const std::function<absl::Status()>& reset_state = nullptr);

  // Failover catch-up (sync jobs with replicas): this server just took over slots it backed up,
  // which hold every clock before `clock` but not `clock` itself, whose pushes reached only
  // their dead primary. Each live worker already past `clock` here owes a re-send of its push of
  // `clock` for those slots (PushRequest.resend_parts); until every one arrived, `clock` is not
  // applied and pulls past it wait. No-op if no worker owes one (or the job is not sync).
  // `slots` (kNumSlots entries) are the slots taken over: re-sent keys must be in them.
  // FAILED_PRECONDITION, with nothing begun, where a worker is more than one clock past
  // `clock`: the copies missed clocks that no re-send brings back (a backup left out).
  absl::Status BeginCatchUp(const std::string& job_id, int64_t clock, std::vector<bool> slots);
  // A re-sent push of `worker_id` for `clock`, in `parts` parts: if the job catches up `clock`
  // and the worker owes it, runs `then` (which accumulates it into `clock`'s sums and says
  // whether it did: false for a repeated request) with sync applies held off, and counts it.
  // Once every owed worker's parts arrived, the sums of `clock` are applied (if this server
  // applied `clock` already, for the taken-over slots only: the only ones holding sums of it)
  // and pulls go on. Returns whether `then` ran (false: nothing owed, the push is ignored).
  absl::StatusOr<bool> ResendAndRun(const std::string& job_id, uint32_t worker_id, int64_t clock,
                                    uint32_t parts, uint64_t shard_epoch,
                                    absl::FunctionRef<absl::StatusOr<bool>()> then);
  // The clock being caught up (-1: none) and the slots taken over (empty: none).
  int64_t CatchUpClock(const std::string& job_id) const;
  std::vector<bool> CatchUpSlots(const std::string& job_id) const;

  // Counts one part of a multi-part PushPull for (worker, clock); true once `parts` were seen.
  absl::StatusOr<bool> CountClockPart(const std::string& job_id, uint32_t worker_id, int64_t clock,
                                      uint32_t parts);

  struct PullTicket {
    int64_t min_clock = 0;
    absl::Duration waited;
  };
  // Wakes every waiting pull, which answers UNAVAILABLE, as will later ones: a server that shuts
  // down must not wait for pulls blocked on slow workers. Idempotent.
  void Shutdown();

  // Forgets the job (its workers, clocks, counted parts): waits for its pushes and sync applies
  // in flight (CheckPushAndRun, ResetClocks), then wakes its waiting pulls, which answer
  // FAILED_PRECONDITION, as do its requests that already found it. The job is unknown
  // afterwards (Configure would create it again: the caller refuses that). Idempotent.
  void DropJob(const std::string& job_id);

  // Blocks until a pull by a worker at `clock` may be served, or until `deadline`
  // (DEADLINE_EXCEEDED naming the slowest worker), or Shutdown() (UNAVAILABLE). If `waiting` is
  // set, it counts the pull while it blocks.
  absl::StatusOr<PullTicket> WaitForPull(const std::string& job_id, int64_t clock,
                                         absl::Time deadline, prometheus::Gauge* waiting = nullptr);
  // WaitForPull that never blocks: the ticket where WaitForPull would pass at once, nullopt where
  // it would wait, and the same errors otherwise.
  absl::StatusOr<std::optional<PullTicket>> TryPull(const std::string& job_id, int64_t clock);

 private:
  struct Job;
  // The job, held by the caller for as long as it uses it (DropJob may forget it meanwhile).
  absl::StatusOr<std::shared_ptr<Job>> Find(const std::string& job_id) const;
  // CheckPush of a job found.
  absl::Status CheckPushOf(Job* job, uint32_t worker_id, int64_t clock, uint64_t shard_epoch) const;
  // Applies every finished sync clock. Called with no lock held.
  void ApplyFinishedClocks(Job* job);
  // Ends the job's catch-up once no worker owes a re-send. Called with no lock held.
  void MaybeEndCatchUp(Job* job);

  const ApplyClockFn apply_clock_;
  std::atomic<bool> shutdown_{false};
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_SERVER_CONSISTENCY_GATE_H_
