#include "server/replication_backup.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "server/replication_source.h"

namespace ps {

ReplicationBackup::ReplicationBackup(TableStore* store) : store_(store) {}

absl::Status ReplicationBackup::SetBackupSlots(const std::string& job_id, uint64_t epoch,
                                               std::vector<std::string> primaries,
                                               std::vector<bool>* dropped) {
  if (primaries.size() != kNumSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("backup slots: ", primaries.size(), " entries, want ", kNumSlots));
  }
  if (dropped != nullptr) dropped->assign(kNumSlots, false);
  absl::MutexLock l(&mu_);
  const bool none = std::all_of(primaries.begin(), primaries.end(),
                                [](const std::string& p) { return p.empty(); });
  if (none && !jobs_.contains(job_id)) return absl::OkStatus();  // never a backup here
  Job& job = jobs_[job_id];
  if (epoch < job.epoch) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, ": shard epoch ", epoch, " is older than this server's (", job.epoch, ")"));
  }
  job.progress.resize(kNumSlots);
  job.primaries.resize(kNumSlots);
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    if (primaries[s] != job.primaries[s]) job.progress[s] = SlotProgress();
    if (dropped != nullptr) (*dropped)[s] = !job.primaries[s].empty() && primaries[s].empty();
  }
  job.epoch = epoch;
  job.primaries = std::move(primaries);
  return absl::OkStatus();
}

absl::Status ReplicationBackup::Check(const Job& job, const v1::ReplicateRequest& req,
                                      std::vector<bool>* load) {
  if (req.shard_epoch() != job.epoch) {
    ++counts_.wrong_epoch;
    return absl::FailedPreconditionError(absl::StrCat("replicated update of job ", req.job_id(),
                                                      " under shard epoch ", req.shard_epoch(),
                                                      "; this backup's is ", job.epoch));
  }
  std::vector<bool> listed(kNumSlots, false);
  for (const v1::ReplicatedSlot& r : req.slots()) {
    if (r.slot() >= kNumSlots || listed[r.slot()] || r.seq() == 0) {
      return absl::InvalidArgumentError(absl::StrCat("replicated slot ", r.slot(), " (seq ",
                                                     r.seq(),
                                                     "): out of range, listed twice or "
                                                     "without a sequence number"));
    }
    listed[r.slot()] = true;
    if (job.primaries[r.slot()].empty() || job.primaries[r.slot()] != req.primary()) {
      ++counts_.wrong_primary;
      return absl::FailedPreconditionError(absl::StrCat(
          "replicated slot ", r.slot(), " of job ", req.job_id(), " from ", req.primary(),
          ": not its primary at shard epoch ", job.epoch, " (",
          job.primaries[r.slot()].empty() ? "this server is not its backup"
                                          : absl::StrCat("that is ", job.primaries[r.slot()]),
          ")"));
    }
    const uint64_t last = job.progress[r.slot()].seq;
    // An update carries the whole slot: any later one replaces what the backup holds, so one
    // that was lost (a failed send) is skipped, counted; an earlier or repeated one is ignored.
    if (last > 0 && r.seq() > last + 1) ++counts_.gaps;
    (*load)[r.slot()] = r.seq() > last;
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::ReplicateResponse> ReplicationBackup::Apply(const v1::ReplicateRequest& req) {
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(req.job_id());
  if (it == jobs_.end()) {
    ++counts_.wrong_epoch;
    return absl::FailedPreconditionError(
        absl::StrCat("this server backs up no slot of job ", req.job_id()));
  }
  Job& job = it->second;
  std::vector<bool> load(kNumSlots, false);
  PS_RETURN_IF_ERROR(Check(job, req, &load));
  std::vector<SlotRows> rows;
  uint64_t bytes = 0;
  for (const v1::ReplicatedSlot& r : req.slots()) {
    if (!load[r.slot()]) continue;
    for (const v1::ReplicatedRows& t : r.tables()) {
      PS_ASSIGN_OR_RETURN(SlotRows decoded, DecodeReplicatedRows(r.slot(), t));
      bytes += decoded.bytes();
      rows.push_back(std::move(decoded));
    }
  }
  PS_RETURN_IF_ERROR(store_->LoadSlots(req.job_id(), load, rows));
  v1::ReplicateResponse resp;
  for (const v1::ReplicatedSlot& r : req.slots()) {
    if (!load[r.slot()]) {
      resp.set_duplicates(resp.duplicates() + 1);
      continue;
    }
    job.progress[r.slot()] = SlotProgress{r.seq(), r.clock()};
    resp.set_applied(resp.applied() + 1);
  }
  counts_.applied += resp.applied();
  counts_.duplicates += resp.duplicates();
  counts_.bytes += bytes;
  return resp;
}

void ReplicationBackup::ForgetJob(const std::string& job_id) {
  absl::MutexLock l(&mu_);
  jobs_.erase(job_id);
}

ReplicationBackup::Counts ReplicationBackup::counts() const {
  absl::MutexLock l(&mu_);
  return counts_;
}

ReplicationBackup::SlotProgress ReplicationBackup::Progress(const std::string& job_id,
                                                            uint32_t slot) const {
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || slot >= kNumSlots) return SlotProgress();
  return it->second.progress[slot];
}

}  // namespace ps
