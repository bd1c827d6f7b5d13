// ps_worker --scheduler: a daemon that runs the jobs the scheduler assigns, one at a time.
#ifndef PS_WORKER_DAEMON_WORKER_DAEMON_H_
#define PS_WORKER_DAEMON_WORKER_DAEMON_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/push_resend.h"
#include "client/rpc_client.h"  // RpcClient; kDefaultRpcTimeout (ps/client.h)
#include "common/health_server.h"
#include "common/scheduler_link.h"
#include "ps/v1/scheduler.grpc.pb.h"
#include "worker/compute/device.h"
#include "worker/daemon/job_runner.h"
#include "worker/daemon/program_users.h"
#include "worker/daemon/worker_metrics.h"
#include "worker/models/model.h"

namespace ps {

class ProgramProcess;
struct ProgramProcessOptions;

class SchedulerLink;

struct WorkerDaemonOptions {
  std::string scheduler;  // host:port
  std::string hostname;
  int64_t pid = 0;
  // host:port of this worker's /metrics, told to the scheduler (empty: none).
  std::string metrics_address;
  // Deadline of one data-plane request (a sync pull waits on the slowest worker this long).
  absl::Duration rpc_timeout = kDefaultRpcTimeout;
  // Log a progress line every this many steps (0: epochs only).
  int log_every_steps = 100;
  // After a data-plane failure (a server died), how long to wait for the scheduler's new shard
  // map before giving up on the job.
  absl::Duration recovery_wait = absl::Seconds(90);
  // Where the models compute (a resolved device; default the CPU), GEMM precision, overlap.
  ComputeOptions compute;
  // Program jobs: the folder of this worker's per-job folders (the program's log, the agent's
  // Unix socket, the program's default working directory).
  std::string work_dir = "/tmp/ps_worker";
  // Program jobs: a log grows to this size, then moves to program.log.1 (at most 2x on disk).
  uint64_t max_log_bytes = uint64_t{64} << 20;
  // Program jobs: the uids their programs run as, one per run in turn (the daemon must be
  // root); none: the daemon's own user (program_job.cc says what that leaves open).
  std::optional<UidRange> program_uids;
  // Testing and benchmarks: every zoo step is followed by a sleep of (slow_factor - 1) x its
  // time (a straggler); 1: none.
  double slow_factor = 1.0;
};

// Registers with the scheduler and heartbeats (progress out, orders in); runs each assigned
// job with a JobRunner. Orders that arrive while a job runs are followed at once: a new
// membership (a worker died or joined) is told to the servers and changes this worker's data
// shard; a withdrawn assignment (cancelled, or this node was declared dead) stops the job; a new
// shard map (a server died, or psctl restore) restarts the run on it: new client, the restore
// order carried out on every server, training on from the clock the servers give.
// Health: SERVING from the first heartbeat answer (registered) until Stop(), NOT_SERVING after.
// Thread-safe: Stop() may be called from any thread.
class WorkerDaemon {
 public:
  class Agent;  // the WorkerAgent service of a program job (program_job.cc)

  // `metrics` and `health` (each may be null) must outlive this.
  explicit WorkerDaemon(WorkerDaemonOptions options, WorkerMetrics* metrics = nullptr,
                        HealthServer* health = nullptr);

  // Runs until Stop().
  void Run();
  void Stop();

 private:
  void FillHeartbeat(v1::HeartbeatRequest* req);
  // A program job (program_job.cc): runs the job's program as a child process, restarted up to
  // max_restarts times, while serving it the WorkerAgent service; OK when it exits 0.
  absl::Status RunProgramJob(const v1::WorkerAssignment& a);
  struct ProgramRun;
  // Starts the program, watches it and starts it again after a failure, up to max_restarts
  // times: its final status.
  absl::Status SuperviseProgram(const v1::ProgramSpec& p, ProgramRun* run,
                                ProgramProcessOptions* po) ABSL_LOCKS_EXCLUDED(mu_);
  // Watches one start of the program until it ends or is stopped: the job's status, or nullopt
  // with `failure` set where a restart may follow (it failed, or made no progress for too long).
  std::optional<absl::Status> WatchProgram(const v1::ProgramSpec& p, ProgramRun* run,
                                           ProgramProcess* process, std::string* failure)
      ABSL_LOCKS_EXCLUDED(mu_);
  // After the program's last exit: the run's last report and log for the scheduler; the daemon
  // holds no program any more.
  void EndProgramRun(ProgramRun* run) ABSL_LOCKS_EXCLUDED(mu_);
  void FillProgramProgress(v1::WorkerProgress* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes the program run's data-plane client (membership orders, checkpoints) match the
  // latest shard map.
  void RefreshProgramClient(ProgramRun* run) ABSL_LOCKS_EXCLUDED(mu_);
  void OnHeartbeat(const v1::HeartbeatResponse& resp, bool reregistered);
  // A membership change to tell the servers, taken under mu_ and applied without it.
  struct MembershipOrder {
    RpcClient* client = nullptr;
    v1::ConsistencySpec consistency;
    v1::WorkerAssignment assignment;
  };
  // Runs one job to its end (or cancellation), restarting on every new shard map.
  absl::Status RunJob(v1::WorkerAssignment assignment);
  // One run under one shard map. Sets *restart (and *next) when a newer map must be used.
  // `resend`: in, the push in flight when the previous run failed (sent again for the slots
  // that moved, client/push_resend.h); out, this run's if it fails in one.
  absl::Status RunOnce(const v1::WorkerAssignment& a, Model* model, int64_t* last_clock,
                       uint64_t* requests_done, bool* restart, std::optional<InFlightPush>* resend);
  // RunOnce's steps. PublishRun makes `runner` (on `client`, for `a`) the running job that
  // heartbeats' orders reach, cancelling it if an order came while it started; true if a
  // membership order taken then must be applied (without mu_). EndRun waits for an
  // ApplyMembership in flight, says whether a newer shard map stopped the run (*restart),
  // records the run's progress for the next heartbeat and unpublishes it: the run's status.
  bool PublishRun(const v1::WorkerAssignment& a, RpcClient* client, JobRunner* runner,
                  MembershipOrder* membership) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status EndRun(const v1::WorkerAssignment& a, const JobRunner& runner, absl::Status s,
                      bool* restart) ABSL_LOCKS_EXCLUDED(mu_);
  // The latest order if it is still for `a`'s job and worker; CANCELLED otherwise.
  absl::StatusOr<v1::WorkerAssignment> LatestOrder(const v1::WorkerAssignment& a)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Waits (up to `timeout`) for an order of the same job with a larger shard epoch than `a`'s.
  std::optional<v1::WorkerAssignment> WaitForNewerShardMap(const v1::WorkerAssignment& a,
                                                           absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_);
  void ReportRestoreFailure(const v1::WorkerAssignment& a, const absl::Status& s);
  // This node as the scheduler registered it (node_id 0 before the first registration): the
  // job calls it makes at the scheduler carry it.
  NodeIdentity Identity() const {
    SchedulerLink* link = link_.load();
    return link == nullptr ? NodeIdentity() : link->identity();
  }
  // Follows a heartbeat's orders; true if `membership` must then be applied (without mu_).
  bool HandleOrders(const v1::HeartbeatResponse& resp, bool reregistered,
                    MembershipOrder* membership) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True (and applying_ set) if the latest order has a newer membership for the running job.
  bool TakeMembershipOrder(MembershipOrder* order) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells the servers a new worker set and moves this worker's shard. Called without mu_.
  void ApplyMembership(RpcClient* client, const v1::ConsistencySpec& consistency,
                       const v1::WorkerAssignment& a) ABSL_LOCKS_EXCLUDED(mu_);
  static std::string KeyOf(const v1::WorkerAssignment& a);

  const WorkerDaemonOptions options_;
  std::unique_ptr<ProgramUsers> program_users_;     // null: programs run as the daemon's user
  std::unique_ptr<v1::Scheduler::Stub> scheduler_;  // checkpoints, restore reports, data leases
  std::atomic<SchedulerLink*> link_{nullptr};       // set while Run() runs: this node's id
  WorkerMetrics* const metrics_;
  HealthServer* const health_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<v1::WorkerAssignment> assignment_ ABSL_GUARDED_BY(mu_);  // the latest order
  // The job being run: valid while running_key_ is set.
  std::string running_key_ ABSL_GUARDED_BY(mu_);  // "job/worker id"
  uint64_t running_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t running_shard_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  bool restart_ ABSL_GUARDED_BY(mu_) = false;  // a newer shard map came: the run stops for it
  RpcClient* client_ ABSL_GUARDED_BY(mu_) = nullptr;
  JobRunner* runner_ ABSL_GUARDED_BY(mu_) = nullptr;
  ProgramRun* program_ ABSL_GUARDED_BY(mu_) = nullptr;  // the program job running
  v1::ConsistencySpec consistency_ ABSL_GUARDED_BY(mu_);
  bool applying_ ABSL_GUARDED_BY(mu_) = false;  // an ApplyMembership runs (uses client_)
  // The last job run: not run again, and reported (finished or error) while still assigned.
  std::string done_key_ ABSL_GUARDED_BY(mu_);
  v1::WorkerProgress done_report_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_WORKER_DAEMON_WORKER_DAEMON_H_
