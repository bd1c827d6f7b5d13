// ps::StartRun: what a worker does before it trains under one shard map, shared by the worker
// daemon (zoo models) and the Session of a program job: connect to the map's servers, declare
// the job's membership (learning this worker's clock), create the job's tables and carry out
// the map's restore order.
#ifndef PS_CLIENT_JOB_RUN_H_
#define PS_CLIENT_JOB_RUN_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/push_resend.h"
#include "client/rpc_client.h"
#include "ps/v1/scheduler.pb.h"

namespace ps {

struct RunStartOptions {
  // Deadline of one data-plane request of the client made.
  absl::Duration rpc_timeout = kDefaultRpcTimeout;
  // This worker's clock before (a restart after a server loss; -1: none, the servers say).
  int64_t last_clock = -1;
  // The job's tables, created on every server (idempotent).
  std::vector<v1::TableSpec> tables;
  // The newest orders for this worker, asked while starting takes long: the assignment, or an
  // error (CANCELLED: the job was withdrawn) that ends the start.
  std::function<absl::StatusOr<v1::WorkerAssignment>()> latest;
  // Told when the restore order could not be carried out because its checkpoint is unusable
  // (DATA_LOSS, NOT_FOUND, INVALID_ARGUMENT): the scheduler then orders another restore.
  std::function<void(const v1::WorkerAssignment&, const absl::Status&)> report_restore_failure;
  // Failover: the push of the clock that was in flight when the previous run failed (null:
  // none). A sync job without a rollback sends it again for the slots whose server changed
  // (client/push_resend.h) before it trains on.
  const InFlightPush* resend = nullptr;
  // Progress lines ("restored ... in 0.4s"); may be empty.
  std::function<void(const std::string&)> log;
};

struct RunStart {
  std::unique_ptr<RpcClient> client;  // its clock set to `clock`
  v1::WorkerAssignment assignment;    // the orders it started under (a newer membership maybe)
  int64_t clock = 0;                  // where this worker trains on from
};

// Starts a run under `a`'s shard map (see the header comment). A server that does not answer
// the membership within 2 s is asked again (up to 60 s), unless `latest` shows a newer shard
// map: then ABORTED for which IsNewShardMap() is true (start again under the new one).
absl::StatusOr<RunStart> StartRun(const v1::WorkerAssignment& a, const RunStartOptions& options);

// True for StartRun's "a newer shard map came while starting".
bool IsNewShardMap(const absl::Status& s);

// True if a data-plane failure `s` may end with a new shard map rather than the job (a server
// died or is unreachable, or answered under another map): wait for the scheduler's next map.
// Only a server's answer (or its absence) counts: the same codes from the worker's own code do
// not.
bool IsRecoverableRpcError(const absl::Status& s);

}  // namespace ps

#endif  // PS_CLIENT_JOB_RUN_H_
