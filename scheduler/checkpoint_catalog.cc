#include "scheduler/checkpoint_catalog.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "scheduler/scheduler_internal.h"

namespace ps {
namespace {

using scheduler_internal::ToMs;

// " (its error)" when a checkpoint has one.
std::string ErrorSuffix(const v1::CheckpointInfo& checkpoint) {
  return checkpoint.error().empty() ? "" : absl::StrCat(" (", checkpoint.error(), ")");
}

}  // namespace

std::string CheckpointStateName(v1::CheckpointState state) {
  return absl::AsciiStrToLower(absl::StripPrefix(v1::CheckpointState_Name(state), "CHECKPOINT_"));
}

CheckpointCatalog::CheckpointCatalog(std::string job_id, Entries entries)
    : job_id_(std::move(job_id)), entries_(std::move(entries)) {}

const v1::CheckpointInfo* CheckpointCatalog::LatestComplete(uint64_t before) const {
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->first < before && it->second.state() == v1::CHECKPOINT_COMPLETE) return &it->second;
  }
  return nullptr;
}

absl::StatusOr<const v1::CheckpointInfo*> CheckpointCatalog::FindComplete(uint64_t id) const {
  if (id == 0) {
    const v1::CheckpointInfo* latest = LatestComplete();
    if (latest == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id_, " has no complete checkpoint"));
    }
    return latest;
  }
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("job ", job_id_, " has no checkpoint ", id));
  }
  const v1::CheckpointInfo& checkpoint = it->second;
  if (checkpoint.state() != v1::CHECKPOINT_COMPLETE) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", id, " of ", job_id_, " is ", CheckpointStateName(checkpoint.state()),
        ErrorSuffix(checkpoint), "; only a complete checkpoint can be restored"));
  }
  return &checkpoint;
}

absl::StatusOr<CheckpointCatalog::Begun> CheckpointCatalog::Begin(v1::CheckpointInfo checkpoint,
                                                                  absl::Time now) {
  const uint64_t id = checkpoint.checkpoint_id();
  if (checkpoint.job_id() != job_id_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", id, " of job ", checkpoint.job_id(), " in job ", job_id_, "'s catalog"));
  }
  if (id == 0 || (!entries_.empty() && id <= entries_.rbegin()->first)) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint id ", id, " of job ", job_id_, " is not above the last one (",
                     entries_.empty() ? 0 : entries_.rbegin()->first, ")"));
  }
  Begun begun;
  begun.superseded = FailWriting("superseded: its completion was never reported", now);
  checkpoint.set_state(v1::CHECKPOINT_WRITING);
  v1::CheckpointInfo& added = entries_[id];
  added = std::move(checkpoint);
  begun.checkpoint = &added;
  return begun;
}

std::vector<uint64_t> CheckpointCatalog::FailWriting(const std::string& why, absl::Time now) {
  std::vector<uint64_t> failed;
  for (auto& [id, checkpoint] : entries_) {
    if (checkpoint.state() != v1::CHECKPOINT_WRITING) continue;
    checkpoint.set_state(v1::CHECKPOINT_FAILED);
    checkpoint.set_error(why);
    checkpoint.set_end_time_unix_ms(ToMs(now));
    failed.push_back(id);
  }
  return failed;
}

absl::StatusOr<v1::CheckpointInfo*> CheckpointCatalog::FindWriting(uint64_t id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("job ", job_id_, " has no checkpoint ", id));
  }
  v1::CheckpointInfo& checkpoint = it->second;
  if (checkpoint.state() != v1::CHECKPOINT_WRITING) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", id, " of ", job_id_, " is ",
                                                      CheckpointStateName(checkpoint.state()),
                                                      ErrorSuffix(checkpoint)));
  }
  return &checkpoint;
}

absl::StatusOr<const v1::CheckpointInfo*> CheckpointCatalog::RecordEnd(uint64_t id, absl::Time now,
                                                                       double write_seconds) {
  absl::StatusOr<v1::CheckpointInfo*> checkpoint = FindWriting(id);
  if (!checkpoint.ok()) return checkpoint.status();
  (*checkpoint)->set_end_time_unix_ms(ToMs(now));
  (*checkpoint)->set_write_seconds(write_seconds);
  return *checkpoint;
}

absl::StatusOr<const v1::CheckpointInfo*> CheckpointCatalog::Complete(
    uint64_t id, const google::protobuf::RepeatedPtrField<v1::CheckpointShard>& shards) {
  absl::StatusOr<v1::CheckpointInfo*> found = FindWriting(id);
  if (!found.ok()) return found.status();
  v1::CheckpointInfo& checkpoint = **found;
  if (shards.size() != checkpoint.shards_size()) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", id, " of ", job_id_, " has ",
                                                      checkpoint.shards_size(), " shards, not ",
                                                      shards.size()));
  }
  for (int k = 0; k < checkpoint.shards_size(); ++k) {
    checkpoint.mutable_shards(k)->set_rows(shards[k].rows());
    checkpoint.mutable_shards(k)->set_bytes(shards[k].bytes());
  }
  checkpoint.set_state(v1::CHECKPOINT_COMPLETE);
  return &checkpoint;
}

absl::Status CheckpointCatalog::Fail(uint64_t id, const std::string& error) {
  absl::StatusOr<v1::CheckpointInfo*> checkpoint = FindWriting(id);
  if (!checkpoint.ok()) return checkpoint.status();
  (*checkpoint)->set_state(v1::CHECKPOINT_FAILED);
  (*checkpoint)->set_error(error);
  return absl::OkStatus();
}

bool CheckpointCatalog::MarkCorrupt(uint64_t id, const std::string& error) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.state() != v1::CHECKPOINT_COMPLETE) return false;
  it->second.set_state(v1::CHECKPOINT_CORRUPT);
  it->second.set_error(error);
  return true;
}

std::vector<uint64_t> CheckpointCatalog::ToPrune(int keep_last,
                                                 const std::set<uint64_t>& in_use) const {
  const int keep = std::max(1, keep_last);
  std::vector<uint64_t> drop;
  int complete = 0;  // COMPLETE ones seen so far, newest first
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    const v1::CheckpointInfo& checkpoint = it->second;
    if (checkpoint.state() == v1::CHECKPOINT_COMPLETE) {
      if (++complete <= keep || in_use.count(it->first) > 0) continue;
    } else if (checkpoint.state() == v1::CHECKPOINT_FAILED ||
               checkpoint.state() == v1::CHECKPOINT_CORRUPT) {
      // Their files are useless once a newer checkpoint is complete; the entry stays.
      if (complete == 0 || checkpoint.dir().empty()) continue;
    } else {
      continue;
    }
    drop.push_back(it->first);
  }
  return drop;
}

void CheckpointCatalog::MarkPruned(uint64_t id, bool files_removed) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  v1::CheckpointInfo& checkpoint = it->second;
  if (checkpoint.state() == v1::CHECKPOINT_COMPLETE) checkpoint.set_state(v1::CHECKPOINT_PRUNED);
  if (files_removed) checkpoint.clear_dir();
}

}  // namespace ps
