// The scheduler's logic: node membership, job lifecycle and placement, persisted in RocksDB.
#ifndef PS_SCHEDULER_SCHEDULER_H_
#define PS_SCHEDULER_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/printable.h"  // CheckJobId: every request naming a job is checked first
#include "ps/v1/scheduler.pb.h"
#include "scheduler/checkpoint_catalog.h"
#include "scheduler/job_dropper.h"
#include "scheduler/job_spec.h"
#include "scheduler/membership.h"
#include "scheduler/placement.h"
#include "scheduler/scheduler_metrics.h"
#include "scheduler/scheduler_options.h"
#include "scheduler/state_store.h"

namespace ps {

// The Scheduler coordinates parts that keep their own invariants, none with a clock, lock or
// store (as LevelDB's DBImpl hands work to VersionSet and TableCache):
//   membership.h              Membership: the node table (registration under its caps,
//                             heartbeats, silent nodes and the cut-off rule, dead nodes forgotten);
//   checkpoint_catalog.h      CheckpointCatalog: one job's checkpoints (ids only grow, at most one
//                             WRITING, WRITING -> COMPLETE | FAILED, COMPLETE -> CORRUPT | PRUNED);
//   placement.h               which nodes a job gets: pure functions over a snapshot.
// What their decisions mean for jobs (events, metrics, persistence, recovery) is the
// Scheduler's, in files of their own:
//   scheduler.cc              the job table, persistence (Commit), events, submit/cancel/list;
//   scheduler_membership.cc   Register, Heartbeat and progress, Tick: what a dead node means;
//   scheduler_placement.cc    takes placement's snapshot and applies the answer;
//   scheduler_checkpoints.cc  checkpoint RPCs over the catalog, restores, server-loss recovery;
//   scheduler_drain.cc        psctl drain;
//   scheduler_failover.cc     a dead server's slots taken over by their backups (replicas);
//   scheduler_data.cc         dynamic data leases; scheduler_resources.cc bounds and cleanup.
//
// Thread-safe: one mutex serializes every operation; each operation writes its changes to the
// state store before it returns (job state and membership changes with a synced write).
// Time comes only from the injected clock; nothing here sleeps or starts threads: the owner
// calls Tick() periodically (SchedulerServer does, every options.tick_interval).
//
// Scheduling: PENDING jobs are considered in submit order, each started as soon as enough idle
// workers and servers are alive (a job that cannot start does not hold back later, smaller
// ones). Before that, RUNNING jobs short of workers take idle workers as replacements.
// INVALID_ARGUMENT naming the field: a role other than SERVER or WORKER, a server without an
// address, an address or metrics address that is not host:port, text that is not printable.
absl::Status CheckRegisterRequest(const v1::RegisterRequest& req);

// Who makes a call about a job (checkpoints, restore failures, checkpoint requests, data
// leases): an admin (psctl with the admin token; in a cluster without tokens, anyone), or a
// worker daemon that proves itself with the node secret its registration answered.
struct JobCaller {
  bool admin = false;
  uint64_t node_id = 0;
  std::string node_secret;

  static JobCaller Admin() {
    JobCaller caller;
    caller.admin = true;
    return caller;
  }
  static JobCaller Node(uint64_t node_id, std::string node_secret) {
    JobCaller caller;
    caller.node_id = node_id;
    caller.node_secret = std::move(node_secret);
    return caller;
  }
};

class Scheduler {
 public:
  using Clock = std::function<absl::Time()>;

  // Opens (or creates) options.state_dir and resumes from its contents: RUNNING jobs stay
  // RUNNING, and every ALIVE node gets a fresh grace period (last heartbeat = now).
  // `clock` must be thread-safe. `metrics` (null: none) must outlive the scheduler. `dropper`
  // (null: none; it must outlive the scheduler) is told of every job that ends, to free its
  // memory on the job's servers still alive.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Open(const SchedulerOptions& options,
                                                         Clock clock = absl::Now,
                                                         SchedulerMetrics* metrics = nullptr,
                                                         JobDropper* dropper = nullptr);

  absl::StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& req);
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& req);
  // Validates the spec (INVALID_ARGUMENT naming the field), fills its defaults, queues the job.
  absl::StatusOr<std::string> SubmitJob(v1::JobSpec spec);
  absl::StatusOr<v1::JobInfo> GetJob(const std::string& job_id) const;  // with events
  std::vector<v1::JobInfo> ListJobs() const;                            // without events
  absl::StatusOr<v1::JobInfo> CancelJob(const std::string& job_id);
  std::vector<v1::NodeInfo> ListNodes() const;
  // The last lines of a program job's output per worker (all workers, or `worker_id`'s).
  absl::StatusOr<v1::GetJobLogsResponse> GetJobLogs(const v1::GetJobLogsRequest& req) const;
  // host:port of the scheduler's own /metrics (options.metrics_address).
  const std::string& metrics_address() const { return options_.metrics_address; }
  // Declares silent nodes DEAD (and handles their jobs), then schedules.
  absl::Status Tick();

  // Checkpoints (see scheduler_checkpoints.cc). psctl: RequestCheckpoint asks the running job's
  // rank 0 for a checkpoint at its next step; RestoreJob rolls a running job back to a complete
  // checkpoint (0: the latest), or submits an ended one again from it (the answer is then the
  // new job).
  // `caller`: an admin, or a live worker of the job (PERMISSION_DENIED otherwise). The calls
  // below that take a JobCaller check it the same way; in-process callers and tests pass none
  // (admin).
  absl::StatusOr<v1::RequestCheckpointResponse> RequestCheckpoint(
      const std::string& job_id, const JobCaller& caller = JobCaller::Admin());
  absl::StatusOr<std::vector<v1::CheckpointInfo>> ListCheckpoints(const std::string& job_id) const;
  // psctl drain: the server `node_id` gets no new job; each running job that uses it is asked
  // for a checkpoint, and once that is complete the server's slots move to a spare or the
  // job's other servers, restored from it. FAILED_PRECONDITION if a job would be left with no
  // server. Idempotent (asks again for a checkpoint where one is still awaited).
  absl::StatusOr<v1::NodeInfo> DrainNode(uint64_t node_id);
  absl::StatusOr<v1::JobInfo> RestoreJob(const std::string& job_id, uint64_t checkpoint_id);
  // Workers: a new WRITING checkpoint (FAILED_PRECONDITION for an old shard map; one still
  // WRITING is marked FAILED: its report was lost), and its end (COMPLETE once every server
  // confirmed; then pruning).
  // A checkpoint is COMPLETE only with every shard's receipt from the server that wrote it
  // (CheckpointShard.receipt, keyed with that server's node secret): PERMISSION_DENIED for a
  // missing or wrong one (the checkpoint stays WRITING), INVALID_ARGUMENT for a NaN, negative
  // or absurd write_seconds.
  absl::StatusOr<v1::CheckpointInfo> BeginCheckpoint(const v1::BeginCheckpointRequest& req,
                                                     const JobCaller& caller = JobCaller::Admin());
  absl::StatusOr<v1::CheckpointInfo> FinishCheckpoint(const v1::FinishCheckpointRequest& req,
                                                      const JobCaller& caller = JobCaller::Admin());
  // A restore order could not be carried out: a corrupt or missing checkpoint is marked CORRUPT
  // and the job falls back to the previous complete one (or its initial values), under a new
  // shard epoch; an incompatible checkpoint fails the job.
  absl::StatusOr<v1::JobInfo> ReportRestoreFailure(const v1::ReportRestoreFailureRequest& req,
                                                   const JobCaller& caller = JobCaller::Admin());
  // Dynamic data assignment (scheduler_data.cc): records the ranges a worker of a DYNAMIC job
  // finished and hands it the next one. The first call cuts the job's data (its shape is the
  // worker's; later calls must agree). FAILED_PRECONDITION when the caller is not a live worker
  // of the running job.
  // `req.node_secret` must be node_id's when that node has one.
  absl::StatusOr<v1::LeaseDataResponse> LeaseData(const v1::LeaseDataRequest& req);

 private:
  struct Job {
    uint64_t number = 0;                                   // n of "job-<n>"
    v1::JobInfo info;                                      // events live in `events`
    std::deque<std::pair<uint64_t, v1::JobEvent>> events;  // (sequence number, event)
    uint64_t next_event_seq = 1;
    // When each worker that died while the job ran did (oldest first), until one joins in its
    // place. In memory only: a restarted scheduler counts no recovery for earlier deaths.
    std::deque<absl::Time> deaths;
    CheckpointCatalog checkpoints;
    // A server loss being recovered from: detected then; done when rank 0 reports a clock past
    // `recovery_clock`. In memory only.
    std::optional<absl::Time> recovery_start;
    int64_t recovery_clock = 0;
    // Each worker's report of its end (finished, with its final evaluation), by worker id: the
    // job's progress if rank 0 died and the job then succeeded on the others' work. In memory
    // only.
    std::map<uint32_t, v1::WorkerProgress> final_reports;
    // Program jobs: the end of each worker's program output, as it last sent it. In memory only
    // (workers send it again every few seconds).
    std::map<uint32_t, v1::WorkerLog> logs;
    // Servers whose checkpoint-root problem was reported in the job's events (once each). In
    // memory only.
    std::set<uint64_t> root_warned;
    // Replicas: the shard epoch of rank 0's first report under the current map, and its clock
    // then. The backups placed for that map hold every slot once rank 0 reported two clocks
    // more under it (a clock completed on every server under it: each primary forwarded it);
    // only then may they be promoted (BackupsSeeded). In memory only: a restarted scheduler
    // waits for two more clocks.
    uint64_t reports_epoch = 0;
    int64_t reports_first_clock = 0;
  };
  // What one operation changed; written in one batch by Commit().
  struct Changes {
    std::set<uint64_t> nodes;
    std::set<uint64_t> jobs;                              // job numbers
    std::set<std::pair<uint64_t, uint64_t>> checkpoints;  // (job number, checkpoint id)
    bool counters = false;
    bool sync = false;
    StateStore::Batch batch;  // events
    // Jobs that ended: handed to dropper_ once their end is written (SendDrops).
    std::vector<DropOrder> drops;
  };

  Scheduler(const SchedulerOptions& options, Clock clock, std::unique_ptr<StateStore> store,
            SchedulerMetrics* metrics, JobDropper* dropper);
  absl::Status Load() ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status Commit(Changes* changes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Recounts the nodes and jobs gauges and the running jobs' series (after a change of state).
  void UpdateMetrics() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Job* FindJob(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const Job* FindJob(const std::string& job_id) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  v1::JobInfo JobWithEvents(const Job& job) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void AddEvent(Job* job, const std::string& message, absl::Time now, Changes* changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetReason(Job* job, const std::string& reason, Changes* changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Node death and its consequences for the jobs it served.
  void MarkDead(v1::NodeInfo* node, const std::string& why, absl::Time now, Changes* changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A server of a running job died: its slots move to a spare or to the survivors, under a new
  // shard epoch with a restore order (scheduler_checkpoints.cc).
  // `drained`: the server leaves by psctl drain (alive, its data fresh in the latest
  // checkpoint) rather than by dying; only the events' wording differs.
  void RecoverFromServerLoss(Job* job, uint64_t node_id, const std::string& why, absl::Time now,
                             Changes* changes, bool drained = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Failover (scheduler_failover.cc): a server of a running sync job with replicas died, and
  // every slot it owned has its backup on a live server of the job: the backups become the
  // owners under a new shard epoch, with no restore order (no checkpoint is read, no worker
  // clock goes back), and new backups are placed for the new map (seeded by the next clocks).
  // False, with nothing changed, where that cannot be (RecoverFromServerLoss then does);
  // `*why_not` says why for a job that has replicas.
  bool PromoteBackups(Job* job, uint64_t node_id, const std::string& why, absl::Time now,
                      Changes* changes, std::string* why_not) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the job's backups hold its slots (Job::reports_epoch); NoteReport records rank 0's
  // report of `progress`.
  static bool BackupsSeeded(const Job& job);
  static void NoteReport(Job* job, const v1::WorkerProgress& progress);
  // A checkpoint of `job` answering request `request_seq` is complete: moves the job off its
  // draining servers if a drain waits for it.
  // Whether the job's servers can write its checkpoint root and, on several hosts, share it
  // (each server's probe file is visible here): an event (WARNING: ...) for each that cannot.
  void CheckSharedCheckpointRoot(Job* job, absl::Time now, Changes* changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishDrain(Job* job, uint64_t request_seq, absl::Time now, Changes* changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bumps the shard epoch and sets a restore order from `checkpoint` (null: initial values).
  void OrderRestore(Job* job, const v1::CheckpointInfo* checkpoint, bool rollback,
                    const std::vector<bool>& slots, const std::string& reason, absl::Time now,
                    Changes* changes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks the job's WRITING checkpoint (if any) FAILED with `why`; tells it (event, metric).
  void FailWritingCheckpoints(Job* job, const std::string& why, absl::Time now, Changes* changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's checkpoints `ids` just failed: persisted, counted, and an event each (their error).
  void ReportFailedCheckpoints(Job* job, const std::vector<uint64_t>& ids, absl::Time now,
                               Changes* changes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Prunes beyond the job's keep_last, sparing checkpoints in use (CheckpointInUse).
  void PruneCheckpoints(Job* job, absl::Time now, Changes* changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True if a pending or running job may still restore checkpoint `id` of `job_id`: its restore
  // order or its from_checkpoint names it.
  bool CheckpointInUse(const std::string& job_id, uint64_t id) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::string CheckpointRoot(const v1::JobSpec& spec) const;
  // Resolves a spec's from_checkpoint to a COMPLETE checkpoint (INVALID_ARGUMENT otherwise).
  absl::StatusOr<const v1::CheckpointInfo*> ResolveFromCheckpoint(const v1::JobSpec& spec) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::string> SubmitLocked(v1::JobSpec spec, absl::Time now, Changes* changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveWorker(Job* job, uint64_t node_id, const std::string& why, absl::Time now,
                    Changes* changes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The data ranges a lost worker held are handed out again.
  void ReturnDataOf(Job* job, uint32_t worker_id, absl::Time now, Changes* changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleProgress(v1::NodeInfo* node, const v1::WorkerProgress& progress, absl::Time now,
                      Changes* changes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SUCCEEDED once every live worker reported finished.
  void MaybeSucceed(Job* job, absl::Time now, Changes* changes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndJob(Job* job, v1::JobState state, const std::string& reason, absl::Time now,
              Changes* changes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Bounds and cleanup (scheduler_resources.cc). A job that ended: its servers still alive will
  // be told to drop it (a drop order in `changes`)...
  void DropOnServers(const Job& job, Changes* changes) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // ... once Commit() wrote the end: a scheduler that stops before that resumes the job, whose
  // servers must still hold it. Never blocks (dropper_ sends in the background).
  void SendDrops(Changes* changes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK for an admin, or a live worker of `job` showing its node secret; PERMISSION_DENIED
  // naming `what` otherwise.
  absl::Status CheckWorkerOf(const Job& job, const JobCaller& caller, absl::string_view what) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Each shard of `req` carries the receipt of the server that wrote it; PERMISSION_DENIED
  // naming the first that does not.
  absl::Status CheckReceipts(const v1::CheckpointInfo& checkpoint,
                             const v1::FinishCheckpointRequest& req) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The nodes a pending or running job names.
  std::set<uint64_t> NodesInUse() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Membership forgot the nodes `ids`: deleted from the state store.
  void DeleteNodes(const std::vector<uint64_t>& ids, Changes* changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED if options_.max_pending_jobs jobs are PENDING already.
  absl::Status CheckPendingRoom() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Placement (scheduler/placement.h decides; these apply). Schedule() gives idle workers to
  // RUNNING jobs short of workers, starts the PENDING jobs it can, fails those whose
  // from_checkpoint no longer resolves when their turn comes, and sets the reason of the others.
  void Schedule(absl::Time now, Changes* changes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddWorkers(Job* job, const std::vector<uint64_t>& joining, absl::Time now, Changes* changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Start(Job* job, const Placement::Start& start, absl::Time now, Changes* changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The snapshot placement decides from: every node; the pending and running jobs.
  std::vector<PlacementNode> PlacementNodes() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::vector<PlacementJob> PlacementJobs() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  v1::WorkerAssignment Assignment(const Job& job, int index) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SchedulerOptions options_;
  const Clock clock_;
  const std::unique_ptr<StateStore> store_;
  SchedulerMetrics* const metrics_;  // null: none
  JobDropper* const dropper_;        // null: none

  mutable absl::Mutex mu_;
  Membership membership_ ABSL_GUARDED_BY(mu_);         // the nodes
  std::map<uint64_t, Job> jobs_ ABSL_GUARDED_BY(mu_);  // by job number: submit order
  uint64_t next_job_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::string checkpoint_root_;  // absolute
  JobLimits job_limits_;         // checkpoint_roots: checkpoint_root_ and options' ones, normal
};

}  // namespace ps

#endif  // PS_SCHEDULER_SCHEDULER_H_
