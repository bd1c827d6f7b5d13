// The primary's forwarding of replicas (JobSpec.replication): after a sync clock is applied, the
// slots this server owns go to their backups (ParameterServer.Replicate) before the clock
// completes, so that a backup holds every completed clock.
#ifndef PS_SERVER_REPLICATION_FORWARDER_H_
#define PS_SERVER_REPLICATION_FORWARDER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ps/v1/parameter_server.grpc.pb.h"
#include "server/replication_source.h"
#include "server/table_store.h"

namespace ps {

// Thread-safe. Per job: the backup of each slot this server owns, and one ReplicationSource
// (the slots' sequence numbers). ForwardClock() sends one Replicate per backup server, to all
// of them at once, and waits for the answers, asking again a few times within one `rpc_timeout`
// in all (the same request: a retry is a duplicate there);
// a backup that still refuses or cannot be reached is left out of the job's forwarding until
// the job's next shard map (logged, counted). Each update carries the whole slot, so the first
// one a backup gets seeds it (ReplicationBackup).
class ReplicationForwarder {
 public:
  struct Counts {
    uint64_t slots = 0;     // slot updates a backup acknowledged (applied or duplicate)
    uint64_t bytes = 0;     // request bytes acknowledged
    uint64_t failures = 0;  // backups left out after failed sends
  };

  // `store` must outlive this. `rpc_timeout` bounds a clock's forwarding (all its attempts).
  explicit ReplicationForwarder(const TableStore* store,
                                absl::Duration rpc_timeout = absl::Seconds(2));

  // Under shard map `epoch`, this server is `self` (its address in the job's server list) and
  // the backup of its slot s is `backups[s]` (kNumSlots entries; empty: none, or not owned
  // here). All empty: the job forwards nothing (HasTargets false). An older epoch is
  // FAILED_PRECONDITION.
  absl::Status SetTargets(const std::string& job_id, uint64_t epoch, const std::string& self,
                          std::vector<std::string> backups);
  // Forwards the job's slots that have a backup, as they are after `clock` was applied. A no-op
  // for a job without backups.
  void ForwardClock(const std::string& job_id, int64_t clock);
  void ForgetJob(const std::string& job_id);
  // Whether the job has backups to forward to.
  bool HasTargets(const std::string& job_id) const;
  // Whether any job has: a clock may then block on the network (no lock taken).
  bool Active() const { return active_.load() > 0; }

  Counts counts() const;

 private:
  struct Job {
    uint64_t epoch = 0;
    std::vector<std::string> backups;           // kNumSlots entries
    std::map<std::string, bool> left_out;       // backup address -> true once given up on
    std::shared_ptr<ReplicationSource> source;  // shared: a forward in flight holds it
    // Held across the job's forwarding: one clock's updates go out after the previous clock's
    // (the sequence numbers' order). Per job: one job's slow backup holds up no other job.
    std::shared_ptr<absl::Mutex> forward_mu = std::make_shared<absl::Mutex>();
  };
  // Sends `req` to `address`, asking again on failure; OK once answered.
  absl::Status Send(const std::string& address, const v1::ReplicateRequest& req,
                    absl::Time deadline);
  v1::ParameterServer::Stub* StubFor(const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TableStore* const store_;
  const absl::Duration rpc_timeout_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::unique_ptr<v1::ParameterServer::Stub>> stubs_
      ABSL_GUARDED_BY(mu_);
  Counts counts_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> active_{0};  // jobs with a source
};

}  // namespace ps

#endif  // PS_SERVER_REPLICATION_FORWARDER_H_
