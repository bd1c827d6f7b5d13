// One job's checkpoint catalog: the checkpoints it began, by id, and the transitions between
// their states. No clock, no lock, no state store: the Scheduler persists what changed, tells
// the job's events and metrics, and removes files.
#ifndef PS_SCHEDULER_CHECKPOINT_CATALOG_H_
#define PS_SCHEDULER_CHECKPOINT_CATALOG_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ps/v1/scheduler.pb.h"

namespace ps {

// Invariants (Begin() refuses what would break them; the transitions below are the only way a
// state changes):
//   - every entry is keyed by its checkpoint_id and belongs to job_id();
//   - ids only grow: Begin() takes an id above every id the catalog holds;
//   - at most one checkpoint is WRITING: Begin() fails the one still WRITING (its completion was
//     never reported) before adding the new one;
//   - WRITING ends COMPLETE or FAILED; COMPLETE may become CORRUPT (a restore could not read it)
//     or PRUNED (beyond keep_last); FAILED, CORRUPT and PRUNED are final (only their files go);
//   - entries are never removed: a pruned or failed checkpoint stays listed.
// A catalog loaded from the state store is taken as it is stored (this code never stores two
// WRITING ones; FailWriting() fails them all).
//
// Not thread-safe: the Scheduler's mutex guards it.
class CheckpointCatalog {
 public:
  using Entries = std::map<uint64_t, v1::CheckpointInfo>;  // by checkpoint id

  CheckpointCatalog() = default;
  // `entries` as loaded from the state store.
  explicit CheckpointCatalog(std::string job_id, Entries entries = {});

  const std::string& job_id() const { return job_id_; }
  const Entries& entries() const { return entries_; }
  // Checkpoint `id`; it must be in the catalog (a programmer error otherwise).
  const v1::CheckpointInfo& at(uint64_t id) const { return entries_.at(id); }

  // The newest COMPLETE checkpoint with id < `before` (null: none).
  const v1::CheckpointInfo* LatestComplete(uint64_t before = UINT64_MAX) const;
  // Checkpoint `id` (0: the latest complete one) if COMPLETE; NOT_FOUND for an unknown id,
  // FAILED_PRECONDITION (saying its state and error) otherwise.
  absl::StatusOr<const v1::CheckpointInfo*> FindComplete(uint64_t id) const;

  struct Begun {
    const v1::CheckpointInfo* checkpoint = nullptr;  // the new one, WRITING
    std::vector<uint64_t> superseded;                // the one(s) it failed
  };
  // Adds `checkpoint` (its id, dir, shards ... filled in by the caller) as WRITING. One still
  // WRITING lost its report (a scheduler restart, a rank 0 that died) and never completes: it
  // is FAILED first, ended at `now`. FAILED_PRECONDITION, nothing changed, for an id not above
  // every one held or a checkpoint of another job.
  absl::StatusOr<Begun> Begin(v1::CheckpointInfo checkpoint, absl::Time now);
  // Marks every WRITING checkpoint FAILED with `why`, ended at `now`; returns their ids.
  std::vector<uint64_t> FailWriting(const std::string& why, absl::Time now);

  // The end of WRITING checkpoint `id` as its report tells it: records its end time and write
  // time, then the caller Complete()s or Fail()s it (or leaves it WRITING if the report is
  // refused). NOT_FOUND for an unknown id, FAILED_PRECONDITION (its state) if not WRITING.
  absl::StatusOr<const v1::CheckpointInfo*> RecordEnd(uint64_t id, absl::Time now,
                                                      double write_seconds);
  // WRITING -> COMPLETE, with each shard's rows and bytes from `shards` (the servers' word);
  // FAILED_PRECONDITION unless WRITING with as many shards.
  absl::StatusOr<const v1::CheckpointInfo*> Complete(
      uint64_t id, const google::protobuf::RepeatedPtrField<v1::CheckpointShard>& shards);
  // WRITING -> FAILED with `error`; FAILED_PRECONDITION unless WRITING.
  absl::Status Fail(uint64_t id, const std::string& error);
  // COMPLETE -> CORRUPT with `error`; false (nothing changed) if `id` is not COMPLETE.
  bool MarkCorrupt(uint64_t id, const std::string& error);

  // What pruning would drop, newest first: the COMPLETE checkpoints beyond the newest
  // max(1, keep_last) but those `in_use` (ids a job may still restore), and the files of FAILED
  // or CORRUPT ones older than a COMPLETE one (their entries stay).
  std::vector<uint64_t> ToPrune(int keep_last, const std::set<uint64_t>& in_use) const;
  // The files of `id` (one ToPrune() named) are gone, or not (`files_removed`: its dir stays
  // listed): COMPLETE -> PRUNED; a FAILED or CORRUPT one keeps its state.
  void MarkPruned(uint64_t id, bool files_removed);

 private:
  // Checkpoint `id` if WRITING; NOT_FOUND or FAILED_PRECONDITION (saying its state) otherwise.
  absl::StatusOr<v1::CheckpointInfo*> FindWriting(uint64_t id);

  std::string job_id_;
  Entries entries_;
};

// "writing", "complete", ... as messages and events name a checkpoint state.
std::string CheckpointStateName(v1::CheckpointState state);

}  // namespace ps

#endif  // PS_SCHEDULER_CHECKPOINT_CATALOG_H_
