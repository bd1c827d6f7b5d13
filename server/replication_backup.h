// The backup's side of replicas (JobSpec.replication): applies what a slot's primary forwards
// (ParameterServer.Replicate) exactly once and in order.
#ifndef PS_SERVER_REPLICATION_BACKUP_H_
#define PS_SERVER_REPLICATION_BACKUP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ps/v1/parameter_server.pb.h"
#include "server/table_store.h"

namespace ps {

// Thread-safe. Holds, per job, the shard epoch and the primary of each slot this server backs
// up, and the last sequence number applied per slot. Apply() checks a whole request before it
// changes anything: a request of another epoch, or with a slot whose primary is not the sender
// (or that this server does not back up), is refused and nothing of it applied. An update
// carries the whole slot, so any number past the last one applied is applied (the first one
// seeds a backup placed while the job runs; one after a lost update skips it, counted as a
// gap) and a number applied before, or older, is ignored (a duplicate: a retry). Every outcome is
// counted. Applies of one server are serialized.
class ReplicationBackup {
 public:
  struct Counts {
    uint64_t applied = 0;        // slots applied
    uint64_t duplicates = 0;     // slots ignored: their sequence number was applied before
    uint64_t gaps = 0;           // slots applied after a lost update (a number skipped)
    uint64_t wrong_primary = 0;  // requests refused: a slot not backed up here from the sender
    uint64_t wrong_epoch = 0;    // requests refused: another shard epoch (or an unknown job)
    uint64_t bytes = 0;          // row bytes applied (values + optimizer state)
  };
  // A slot's place: the last sequence number applied and the clock it carried (-1: none yet).
  struct SlotProgress {
    uint64_t seq = 0;
    int64_t clock = -1;
  };

  // `store` must outlive this.
  explicit ReplicationBackup(TableStore* store);

  // This server backs up slot s of `job_id` for the server at address `primaries[s]` under
  // shard map `epoch` (kNumSlots entries; empty: not backed up here). An older epoch than the
  // job's is FAILED_PRECONDITION. A slot that keeps its primary keeps its sequence number; one
  // whose primary changed starts again at 0. `dropped` (if set) gets the slots backed up here
  // before and no longer (kNumSlots entries): their rows are the caller's to clear.
  absl::Status SetBackupSlots(const std::string& job_id, uint64_t epoch,
                              std::vector<std::string> primaries,
                              std::vector<bool>* dropped = nullptr);
  // Applies `req` (see the class comment). FAILED_PRECONDITION: another epoch, or a slot the
  // sender is not the primary of; INVALID_ARGUMENT: a malformed request
  // (a slot out of range or listed twice, rows that are not whole rows or do not fit the
  // tables). Errors of TableStore::LoadSlots are passed on.
  absl::StatusOr<v1::ReplicateResponse> Apply(const v1::ReplicateRequest& req);
  // The job was dropped: forgets it.
  void ForgetJob(const std::string& job_id);

  Counts counts() const;
  SlotProgress Progress(const std::string& job_id, uint32_t slot) const;

 private:
  struct Job {
    uint64_t epoch = 0;
    std::vector<std::string> primaries;  // kNumSlots entries
    std::vector<SlotProgress> progress;  // kNumSlots entries
  };
  // What Apply loads: the slots, and which of the request's slots are duplicates.
  absl::Status Check(const Job& job, const v1::ReplicateRequest& req, std::vector<bool>* load)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  TableStore* const store_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  Counts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_SERVER_REPLICATION_BACKUP_H_
