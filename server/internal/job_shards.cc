#include "server/internal/job_shards.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/shard_map.h"
#include "server/reject_reason.h"

namespace ps {

absl::Status JobDroppedError(const std::string& job_id) {
  return Rejected(RejectReason::kDroppedJob,
                  absl::FailedPreconditionError(absl::StrCat(
                      "job '", job_id,
                      "' was dropped from this server (it ended): its tables and state are gone")));
}

uint32_t JobShards::Shards::NumOwned() const {
  if (owned.empty()) return kNumSlots;
  uint32_t n = 0;
  for (bool o : owned) n += o;
  return n;
}

std::vector<bool> JobShards::Shards::OwnedSlots() const {
  std::vector<bool> slots(kNumSlots);
  for (uint32_t s = 0; s < kNumSlots; ++s) slots[s] = Owns(s);
  return slots;
}

JobShards::JobShards(std::vector<bool> default_owned, uint64_t default_epoch)
    : default_(std::make_shared<Shards>(Shards{std::move(default_owned), default_epoch})),
      fenced_default_(std::make_shared<Shards>(
          Shards{std::vector<bool>(kNumSlots, false), default_epoch, /*fenced=*/true})) {}

std::shared_ptr<const JobShards::Shards> JobShards::Of(const std::string& job_id) const {
  absl::ReaderMutexLock l(&mu_);
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) return it->second;
  return fenced_ ? fenced_default_ : default_;
}

absl::Status JobShards::Set(const std::string& job_id, std::vector<bool> owned, uint64_t epoch) {
  if (owned.size() != kNumSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("owned slots: ", owned.size(), " entries, want ", kNumSlots));
  }
  absl::MutexLock l(&mu_);
  if (dropped_.contains(job_id)) return JobDroppedError(job_id);
  auto& current = jobs_[job_id];
  if (current != nullptr) {
    if (epoch < current->epoch) {
      return absl::FailedPreconditionError(absl::StrCat("shard epoch ", epoch, " of job ", job_id,
                                                        " is older than the current ",
                                                        current->epoch));
    }
    if (epoch == current->epoch && owned != current->owned && !current->fenced) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard epoch ", epoch, " of job ", job_id, " was set with other slots"));
    }
  }
  current = std::make_shared<Shards>(Shards{std::move(owned), epoch});
  return absl::OkStatus();
}

void JobShards::FenceAll() {
  absl::MutexLock l(&mu_);
  fenced_ = true;
  for (auto& [job_id, shards] : jobs_) {
    shards = std::make_shared<Shards>(Shards{std::vector<bool>(kNumSlots, false), shards->epoch,
                                             /*fenced=*/true});
  }
}

absl::Status JobShards::CheckEpoch(const std::string& job_id, uint64_t epoch) const {
  if (epoch == 0) return absl::OkStatus();
  const uint64_t current = Of(job_id)->epoch;
  if (epoch >= current) return absl::OkStatus();
  return Rejected(RejectReason::kWrongShard, absl::FailedPreconditionError(absl::StrCat(
                                                 "stale shard map epoch ", epoch, " of job ",
                                                 job_id, "; this server is at ", current)));
}

bool JobShards::Drop(const std::string& job_id) {
  absl::MutexLock l(&mu_);
  const bool first = dropped_.insert(job_id).second;
  if (first) {
    dropped_order_.push_back(job_id);
    if (dropped_order_.size() > kMaxDroppedJobs) {
      dropped_.erase(dropped_order_.front());
      dropped_order_.pop_front();
    }
  }
  jobs_.erase(job_id);
  return first;
}

bool JobShards::IsDropped(const std::string& job_id) const {
  absl::ReaderMutexLock l(&mu_);
  return dropped_.contains(job_id);
}

}  // namespace ps
