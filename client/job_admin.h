// ps::JobAdmin: the calls that administer a job on its parameter servers (its consistency mode
// and worker set, checkpoints, restore orders). The worker daemon and tests use it; programs do
// not (the public client library declares a job at Connect and nothing more).
#ifndef PS_CLIENT_JOB_ADMIN_H_
#define PS_CLIENT_JOB_ADMIN_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/rpc_client.h"
#include "ps/v1/parameter_server.pb.h"

namespace ps {

// Borrows a client (which must outlive it) and speaks for the client's job and worker, with
// its shard map. Cheap to make for each call. Thread-compatible.
class JobAdmin {
 public:
  // `configure_timeout` bounds each server's ConfigureJob (a server not up yet is waited for).
  explicit JobAdmin(RpcClient& client, absl::Duration configure_timeout = absl::Seconds(30))
      : client_(client), configure_timeout_(configure_timeout) {}

  // Declares the job's consistency mode and worker set on every server, and tells each server
  // the slots it owns for the job's tables (the client's shard map). Call before CreateTable.
  // `worker_clock`, if set, receives this worker's clock on the servers afterwards (the largest
  // any server reports; -1 if this worker is not in the set): a worker joining a running job
  // starts there (RpcClient::SetClock).
  // `caller_clock` (>= 0) tells servers that took over slots where this worker is.
  // `even_out_clock`: if the servers hold different clocks for this worker (it joins a running
  // job whose previous worker died between its pushes to two servers), raise it to the highest
  // on all of them, so it can pull there. Not while the job rolls back: the restore sets clocks.
  // Replicas (JobSpec.replication): ConfigureJob also tells each server where every slot is
  // backed up (ConfigureJobRequest.replicas), slot s on server backups[s] (kNumSlots entries);
  // empty (the default): no replicas.
  JobAdmin& WithSlotBackups(std::vector<uint32_t> backups) {
    slot_backups_ = std::move(backups);
    return *this;
  }
  absl::Status ConfigureJob(const v1::ConsistencySpec& consistency,
                            const std::vector<uint32_t>& worker_ids, uint64_t membership_epoch = 1,
                            int64_t* worker_clock = nullptr, int64_t caller_clock = -1,
                            bool even_out_clock = false);

  // Checkpoints (see ParameterServer.Checkpoint). Snapshot asks every server at once to copy its
  // rows for checkpoint `id` into memory, server i writing to paths[i]; it returns once all have
  // (the answers in server order). AwaitCheckpoint waits for every server's write.
  absl::StatusOr<std::vector<v1::CheckpointResponse>> SnapshotCheckpoint(
      uint64_t id, int64_t clock, const std::vector<std::string>& paths);
  absl::StatusOr<std::vector<v1::CheckpointResponse>> AwaitCheckpoint(uint64_t id,
                                                                      absl::Duration timeout);
  // Hands a restore order to every server (each carries it out once); returns this worker's
  // clock afterwards (the largest any server reports; -1 if none knows it).
  absl::StatusOr<int64_t> Restore(const v1::RestoreOrder& order, absl::Duration timeout);

 private:
  RpcClient& client_;
  std::vector<uint32_t> slot_backups_;
  void FillReplicaMap(int server, v1::ReplicaMap* map) const;
  const absl::Duration configure_timeout_;
};

}  // namespace ps

#endif  // PS_CLIENT_JOB_ADMIN_H_
