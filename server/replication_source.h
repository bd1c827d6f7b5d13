// The primary's side of replicas (JobSpec.replication): the slots it applied an update to,
// copied and numbered for their backup (ParameterServer.Replicate).
#ifndef PS_SERVER_REPLICATION_SOURCE_H_
#define PS_SERVER_REPLICATION_SOURCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ps/v1/parameter_server.pb.h"
#include "server/slot_rows.h"
#include "server/table_store.h"

namespace ps {

// Thread-safe. Numbers each slot's updates of a job 1, 2, 3, ... (per job and slot, as long as
// this server is the slot's primary) and copies the slots' rows into a Replicate request.
// Callers that forward updates of one slot must call Prepare for it in the order they applied
// them (a sync job does: one summed update per slot and clock).
class ReplicationSource {
 public:
  // `store` must outlive this; `self` is this server's data-plane address (the job's server list
  // names it so).
  ReplicationSource(const TableStore* store, std::string self);

  // The request carrying the rows of `slots` (kNumSlots entries) of `job_id` as they are now,
  // each with its next sequence number; `clock` is the sync clock they complete (-1: none).
  // INVALID_ARGUMENT for a malformed slot list; UNAVAILABLE if rows on a disk tier could not be
  // read (nothing is numbered then).
  absl::StatusOr<v1::ReplicateRequest> Prepare(const std::string& job_id,
                                               const std::vector<bool>& slots, int64_t clock);
  // The job was dropped (or its slots left this server): its numbering starts again.
  void ForgetJob(const std::string& job_id);

 private:
  const TableStore* const store_;
  const std::string self_;
  absl::Mutex mu_;
  // By job: the last sequence number of each slot (kNumSlots entries).
  absl::flat_hash_map<std::string, std::vector<uint64_t>> seq_ ABSL_GUARDED_BY(mu_);
};

// One table's rows in one slot, on the wire (ReplicatedRows), and back. Decoding checks the
// sizes only (INVALID_ARGUMENT); TableStore::LoadSlots checks them against the tables.
void EncodeReplicatedRows(const SlotRows& rows, v1::ReplicatedRows* out);
absl::StatusOr<SlotRows> DecodeReplicatedRows(uint32_t slot, const v1::ReplicatedRows& in);

}  // namespace ps

#endif  // PS_SERVER_REPLICATION_SOURCE_H_
