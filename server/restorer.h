// Restore orders: load slots from a checkpoint (or empty them) and, for a rollback, reset the
// job's clocks, once per (job, shard map epoch).
#ifndef PS_SERVER_RESTORER_H_
#define PS_SERVER_RESTORER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ps/v1/parameter_server.pb.h"
#include "server/checkpoint_roots.h"
#include "server/consistency_gate.h"
#include "server/server_metrics.h"
#include "server/table_store.h"

namespace ps {

// Thread-safe. The first Restore() of a (job, epoch) carries the order out; concurrent and later
// calls with the same order wait for it and get its answer, error included (a failed restore is
// not retried: the scheduler issues a new epoch). A different order for an epoch that already
// had one is FAILED_PRECONDITION (it would be answered OK without being carried out); orders
// are compared without their informational fields (reason, shard address / rows / bytes) and
// their signature (ParameterService checks it).
// Requests refused before anything is read (unknown job, another epoch than this server's, a
// malformed order, no tables yet) are not recorded.
class Restorer {
 public:
  // `store`, `gate` and `metrics` (may be null) must outlive this. Orders may read checkpoints
  // under `roots` only (none: orders that name a checkpoint are refused).
  Restorer(TableStore* store, ConsistencyGate* gate, ServerMetrics* metrics = nullptr,
           CheckpointRoots roots = {});

  // A call that finds the order of its epoch still running waits for it until `deadline`, then
  // answers UNAVAILABLE (call again); the first call runs to the end whatever its deadline.
  absl::StatusOr<v1::RestoreResponse> Restore(const v1::RestoreRequest& req,
                                              absl::Time deadline = absl::InfiniteFuture());
  // The job was dropped: forgets its orders (a restore still running ends with an error).
  void ForgetJob(const std::string& job_id);

 private:
  struct Outcome {
    v1::RestoreOrder order;  // as carried out, without its informational fields
    bool done = false;
    absl::StatusOr<v1::RestoreResponse> result;
  };
  // Validates the request; fills the slots the order names (all when rolling back).
  absl::Status Check(const v1::RestoreRequest& req, std::vector<bool>* slots) const;
  // Reads the rows, then loads them (and resets the clocks).
  absl::StatusOr<v1::RestoreResponse> Run(const v1::RestoreRequest& req,
                                          const std::vector<bool>& slots);

  static constexpr int kKeepPerJob = 8;  // outcomes remembered per job (latest epochs)

  TableStore* const store_;
  ConsistencyGate* const gate_;
  ServerMetrics* const metrics_;
  const CheckpointRoots roots_;
  absl::Mutex mu_;
  absl::CondVar done_;
  // By job, then shard epoch. Shared: callers waiting for an outcome hold it (ForgetJob).
  absl::flat_hash_map<std::string, std::map<uint64_t, std::shared_ptr<Outcome>>> outcomes_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_SERVER_RESTORER_H_
