// Which slots this server owns for each job, from which shard-map epoch, and which jobs were
// dropped here: TableStore's ownership records.
#ifndef PS_SERVER_INTERNAL_JOB_SHARDS_H_
#define PS_SERVER_INTERNAL_JOB_SHARDS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace ps {

// FAILED_PRECONDITION (RejectReason::kDroppedJob): `job_id` was dropped from this server.
absl::Status JobDroppedError(const std::string& job_id);

// Thread-safe; its lock is a leaf (taken inside the store's locks, never around them). A job's
// epoch never goes back, and one epoch names one set of slots (until the server is fenced); a
// dropped job gets no shards again. Jobs without shards of their own own the default slots.
class JobShards {
 public:
  // The slots owned for one job (immutable once published: readers hold it as they use it).
  struct Shards {
    std::vector<bool> owned;  // empty: every slot
    uint64_t epoch = 0;
    bool fenced = false;  // FenceAll: none owned until the job is configured again
    bool Owns(uint32_t slot) const { return owned.empty() || owned[slot]; }
    // How many slots are owned, and which (kNumSlots entries).
    uint32_t NumOwned() const;
    std::vector<bool> OwnedSlots() const;
  };
  // Dropped job ids remembered (late requests of older ones just find no table).
  static constexpr size_t kMaxDroppedJobs = 1 << 16;

  // `default_owned`: kNumSlots entries, or empty for every slot.
  JobShards(std::vector<bool> default_owned, uint64_t default_epoch);
  JobShards(const JobShards&) = delete;
  JobShards& operator=(const JobShards&) = delete;

  // The job's own shards, else the default ones (none, once fenced).
  std::shared_ptr<const Shards> Of(const std::string& job_id) const;
  // Sets the job's slots (kNumSlots entries). FAILED_PRECONDITION for a dropped job, an epoch
  // older than the job's current one, or the current epoch with other slots (unless fenced).
  absl::Status Set(const std::string& job_id, std::vector<bool> owned, uint64_t epoch);
  // From now on no job owns a slot here until Set() gives it some (at an epoch not older).
  void FenceAll();
  // FAILED_PRECONDITION if a request routed with shard map `epoch` is older than the job's
  // epoch here; 0 (a client that does not say) always passes.
  absl::Status CheckEpoch(const std::string& job_id, uint64_t epoch) const;

  // Remembers `job_id` as dropped and forgets its shards; true the first time.
  bool Drop(const std::string& job_id);
  bool IsDropped(const std::string& job_id) const;

 private:
  const std::shared_ptr<const Shards> default_;
  const std::shared_ptr<const Shards> fenced_default_;
  mutable absl::Mutex mu_;
  bool fenced_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, std::shared_ptr<const Shards>> jobs_ ABSL_GUARDED_BY(mu_);
  // Dropped jobs (at most kMaxDroppedJobs, oldest first in `dropped_order_`).
  absl::flat_hash_set<std::string> dropped_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> dropped_order_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_SERVER_INTERNAL_JOB_SHARDS_H_
