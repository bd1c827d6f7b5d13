// Takes a job's checkpoints from its worker of rank 0: at the clocks the job's policy names and
// when `psctl checkpoint` asks, between two steps.
#ifndef PS_WORKER_DAEMON_JOB_CHECKPOINTER_H_
#define PS_WORKER_DAEMON_JOB_CHECKPOINTER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/scheduler_link.h"
#include "ps/v1/job.pb.h"
#include "ps/v1/scheduler.grpc.pb.h"
#include "client/rpc_client.h"

namespace ps {

// One per job run (a client and a shard epoch). MaybeCheckpoint() is called by the training
// loop after every step; a checkpoint is then:
//   1. BeginCheckpoint at the scheduler (which names each server's directory),
//   2. RpcClient::SnapshotCheckpoint: every server copies its rows; the loop waits only for this,
//      so in sync mode the copy is exactly the model after `clock` steps,
//   3. in the background: AwaitCheckpoint on every server, then FinishCheckpoint at the
//      scheduler (COMPLETE, or FAILED with the first server's error).
// One checkpoint at a time: a trigger while the previous one still writes waits for the next
// step. Errors are logged and reported to the scheduler, never fail the job.
class JobCheckpointer {
 public:
  // `requests` returns how many psctl checkpoint requests the scheduler has made so far (from
  // the latest heartbeat answer). `scheduler` and `client` must outlive this.
  JobCheckpointer(v1::Scheduler::StubInterface* scheduler, RpcClient* client, std::string job_id,
                  v1::CheckpointPolicy policy, uint64_t shard_epoch,
                  std::function<uint64_t()> requests, uint64_t requests_done,
                  std::function<NodeIdentity()> identity = nullptr);
  // Stops waiting for a background write that servers have not confirmed (reported FAILED: a
  // server cut off from this worker would otherwise hold the run's end for kAwaitTimeout) and
  // waits for its report.
  ~JobCheckpointer();

  // After a step that moved the clock from `previous` (default clock - 1) to `clock`: every_steps
  // takes one when the step crossed a multiple of it (a worker of a job with dynamic data
  // assignment moves by the data it reads, so its clock may jump or stay).
  void MaybeCheckpoint(int64_t clock, int64_t previous = -1);
  // Psctl requests answered so far (carried to the next run after a restart).
  uint64_t requests_done() const;

 private:
  // Waits for every server's write of checkpoint `id`, then Report()s it.
  void Finish(uint64_t id, absl::Time begun);
  // Tells the scheduler how checkpoint `finish.checkpoint_id()` ended (retrying while it is
  // unreachable, for a while) and lets the next checkpoint begin.
  void Report(v1::FinishCheckpointRequest finish);

  v1::Scheduler::StubInterface* const scheduler_;
  RpcClient* const client_;
  const std::string job_id_;
  const v1::CheckpointPolicy policy_;
  const uint64_t shard_epoch_;
  const std::function<uint64_t()> requests_;
  // This worker node as registered: BeginCheckpoint and FinishCheckpoint carry it (null: none,
  // then the calls need the admin token).
  const std::function<NodeIdentity()> identity_;
  absl::Time last_begin_;
  // After a failed BeginCheckpoint (the scheduler away, the job changing), no new attempt before
  // this: a pending psctl request would otherwise call the scheduler on every step.
  absl::Time retry_after_ = absl::InfinitePast();
  mutable absl::Mutex mu_;
  uint64_t requests_done_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // the destructor runs
  std::thread writer_;
};

}  // namespace ps

#endif  // PS_WORKER_DAEMON_JOB_CHECKPOINTER_H_
