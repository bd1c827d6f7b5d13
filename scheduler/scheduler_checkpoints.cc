// The scheduler's checkpoint catalog and recovery from server loss.
#include <glog/logging.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/node_identity.h"
#include "common/printable.h"
#include "common/security.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "scheduler/data_ledger.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_internal.h"

namespace ps {
namespace {

using scheduler_internal::ToMs;

// A FinishCheckpoint's write_seconds beyond this (11.6 days) is not a measurement.
constexpr double kMaxWriteSeconds = 1e6;

}  // namespace

std::vector<int> scheduler_internal::SlotOwners(const v1::JobInfo& info) {
  std::vector<int> owners(kNumSlots, 0);
  const int n = std::max(1, info.server_addresses_size());
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    owners[s] = info.slot_owners_size() == static_cast<int>(kNumSlots)
                    ? static_cast<int>(info.slot_owners(s))
                    : static_cast<int>(s % n);
  }
  return owners;
}

namespace {

using scheduler_internal::SlotOwners;

// The slots of the job's server `server` (an index in info.server_nodes()).
std::vector<bool> SlotsOf(const v1::JobInfo& info, int server) {
  const std::vector<int> owners = SlotOwners(info);
  std::vector<bool> slots(kNumSlots, false);
  for (uint32_t s = 0; s < kNumSlots; ++s) slots[s] = owners[s] == server;
  return slots;
}

// The slots of the job's server `dead` go round-robin to `survivors` (indexes of its other,
// alive servers); `dead` leaves the job's lists.
void MoveSlotsToSurvivors(int dead, const std::vector<int>& survivors, v1::JobInfo* info) {
  std::vector<int> owners = SlotOwners(*info);
  size_t next = 0;
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    if (owners[s] == dead) owners[s] = survivors[next++ % survivors.size()];
    if (owners[s] > dead) --owners[s];
  }
  info->mutable_server_nodes()->erase(info->mutable_server_nodes()->begin() + dead);
  info->mutable_server_addresses()->erase(info->mutable_server_addresses()->begin() + dead);
  info->clear_slot_owners();
  for (int owner : owners) info->add_slot_owners(static_cast<uint32_t>(owner));
}

std::string MiB(uint64_t bytes) { return absl::StrFormat("%.1f MiB", bytes / 1048576.0); }

}  // namespace

std::string Scheduler::CheckpointRoot(const v1::JobSpec& spec) const {
  return spec.checkpoint().root().empty() ? checkpoint_root_ : spec.checkpoint().root();
}

absl::StatusOr<const v1::CheckpointInfo*> Scheduler::ResolveFromCheckpoint(
    const v1::JobSpec& spec) const {
  const v1::CheckpointRef& ref = spec.from_checkpoint();
  const Job* source = FindJob(ref.job_id());
  if (source == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.from_checkpoint: no job '", ref.job_id(), "'"));
  }
  const v1::JobSpec& other = source->info.spec();
  if (spec.has_program() || other.has_program()) {
    // Rows are matched to tables by name: every table must be there with the same shape.
    bool same = other.tables_size() == spec.tables_size();
    for (int i = 0; same && i < spec.tables_size(); ++i) {
      const v1::TableSpec &a = other.tables(i), &b = spec.tables(i);
      same = a.name() == b.name() && a.kind() == b.kind() && a.dim() == b.dim() &&
             a.num_rows() == b.num_rows();
    }
    if (!same) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.from_checkpoint: job ", ref.job_id(),
          " has other tables (names, kinds, dims and rows must match, in the same order)"));
    }
  } else if (other.model() != spec.model() ||
             !std::equal(other.layers().begin(), other.layers().end(), spec.layers().begin(),
                         spec.layers().end()) ||
             other.hash_bits() != spec.hash_bits()) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.from_checkpoint: job ", ref.job_id(), " trained another model (",
                     other.model(), "); its tables cannot be loaded into ", spec.model()));
  }
  auto checkpoint = source->checkpoints.FindComplete(ref.checkpoint_id());
  if (!checkpoint.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.from_checkpoint: ", checkpoint.status().message()));
  }
  return *checkpoint;
}

absl::StatusOr<v1::RequestCheckpointResponse> Scheduler::RequestCheckpoint(
    const std::string& job_id, const JobCaller& caller) {
  PS_RETURN_IF_ERROR(CheckJobId(job_id));
  absl::MutexLock lock(&mu_);
  Job* job = FindJob(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  PS_RETURN_IF_ERROR(CheckWorkerOf(*job, caller, "a checkpoint request"));
  if (job->info.state() != v1::RUNNING) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " is ", absl::AsciiStrToLower(v1::JobState_Name(job->info.state())),
        "; only a running job can take a checkpoint"));
  }
  const absl::Time now = clock_();
  Changes changes;
  const uint64_t seq = job->info.checkpoint_requests() + 1;
  job->info.set_checkpoint_requests(seq);
  changes.jobs.insert(job->number);
  AddEvent(job, absl::StrCat("checkpoint requested (request ", seq, ")"), now, &changes);
  PS_RETURN_IF_ERROR(Commit(&changes));
  v1::RequestCheckpointResponse resp;
  resp.set_request_seq(seq);
  return resp;
}

absl::StatusOr<std::vector<v1::CheckpointInfo>> Scheduler::ListCheckpoints(
    const std::string& job_id) const {
  PS_RETURN_IF_ERROR(CheckJobId(job_id));
  absl::ReaderMutexLock lock(&mu_);
  const Job* job = FindJob(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  std::vector<v1::CheckpointInfo> out;
  for (const auto& [id, checkpoint] : job->checkpoints.entries()) out.push_back(checkpoint);
  return out;
}

absl::StatusOr<v1::JobInfo> Scheduler::RestoreJob(const std::string& job_id,
                                                  uint64_t checkpoint_id) {
  PS_RETURN_IF_ERROR(CheckJobId(job_id));
  absl::MutexLock lock(&mu_);
  Job* job = FindJob(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  if (job->info.state() == v1::PENDING) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " has not started; cancel it and submit it again with --from_checkpoint"));
  }
  PS_ASSIGN_OR_RETURN(const v1::CheckpointInfo* checkpoint,
                      job->checkpoints.FindComplete(checkpoint_id));
  const absl::Time now = clock_();
  Changes changes;
  switch (job->info.state()) {
    case v1::RUNNING:
      OrderRestore(job, checkpoint, /*rollback=*/true, std::vector<bool>(kNumSlots, true),
                   absl::StrCat("psctl restore: back to checkpoint ", checkpoint->checkpoint_id()),
                   now, &changes);
      PS_RETURN_IF_ERROR(Commit(&changes));
      return JobWithEvents(*job);
    default: {
      v1::JobSpec spec = job->info.spec();
      // A program job's tables carry the ids the scheduler gave them; the new job gets ids of
      // its own, as a submit with --from_checkpoint does.
      for (v1::TableSpec& table : *spec.mutable_tables()) {
        table.clear_table_id();
        table.clear_job_id();
      }
      spec.mutable_from_checkpoint()->set_job_id(job_id);
      spec.mutable_from_checkpoint()->set_checkpoint_id(checkpoint->checkpoint_id());
      PS_ASSIGN_OR_RETURN(std::string new_id, SubmitLocked(std::move(spec), now, &changes));
      AddEvent(job,
               absl::StrCat("restored from checkpoint ", checkpoint->checkpoint_id(), " as job ",
                            new_id),
               now, &changes);
      Schedule(now, &changes);
      PS_RETURN_IF_ERROR(Commit(&changes));
      return JobWithEvents(*FindJob(new_id));
    }
  }
}

void Scheduler::OrderRestore(Job* job, const v1::CheckpointInfo* checkpoint, bool rollback,
                             const std::vector<bool>& slots, const std::string& reason,
                             absl::Time now, Changes* changes) {
  v1::JobInfo& info = job->info;
  // A checkpoint being written belongs to the map this order replaces: it is incomplete for good
  // (completed, it would become the latest and undo this restore at the next recovery).
  FailWritingCheckpoints(job, absl::StrCat("the job's shard map changed: ", reason), now, changes);
  info.set_shard_epoch(info.shard_epoch() + 1);
  v1::RestoreOrder& order = *info.mutable_restore();
  order.Clear();
  order.set_shard_epoch(info.shard_epoch());
  order.set_rollback(rollback);
  order.set_slots(EncodeSlotBitmap(slots));
  order.set_reason(reason);
  if (checkpoint != nullptr) {
    order.set_source_job_id(checkpoint->job_id());
    order.set_checkpoint_id(checkpoint->checkpoint_id());
    order.set_clock(checkpoint->clock());
    *order.mutable_shards() = checkpoint->shards();
  }
  // A rollback takes the data back too: ranges after the checkpoint's clock are read again.
  if (rollback && info.has_data()) {
    ResetLedger(checkpoint == nullptr ? 0 : checkpoint->clock(), info.mutable_data());
  }
  changes->jobs.insert(job->number);
  changes->sync = true;
  const int64_t count = std::count(slots.begin(), slots.end(), true);
  const std::string what = checkpoint == nullptr
                               ? std::string("no complete checkpoint: initial values")
                               : absl::StrCat("checkpoint ", checkpoint->checkpoint_id(),
                                              checkpoint->job_id() == info.job_id()
                                                  ? ""
                                                  : absl::StrCat(" of ", checkpoint->job_id()),
                                              " (clock ", checkpoint->clock(), ")");
  AddEvent(job,
           absl::StrCat(reason, ": restoring ",
                        rollback ? "every slot, workers back to the checkpoint's clock"
                                 : absl::StrCat(count, " slots"),
                        ", from ", what, "; shard epoch ", info.shard_epoch()),
           now, changes);
  LOG(INFO) << "job " << info.job_id() << ": restore ordered (" << reason << ") from " << what
            << ", shard epoch " << info.shard_epoch();
  if (metrics_ != nullptr) {
    metrics_->SetJobEpochs(info.job_id(), info.shard_epoch(), info.membership_epoch());
  }
}

void Scheduler::RecoverFromServerLoss(Job* job, uint64_t node_id, const std::string& why,
                                      absl::Time now, Changes* changes, bool drained) {
  v1::JobInfo& info = job->info;
  auto at = std::find(info.server_nodes().begin(), info.server_nodes().end(), node_id);
  if (at == info.server_nodes().end()) return;
  const int dead = static_cast<int>(at - info.server_nodes().begin());
  const std::string dead_name =
      absl::StrCat("server node ", node_id, " (", info.server_addresses(dead), ")");
  if (!drained) {
    std::string why_not;
    if (PromoteBackups(job, node_id, why, now, changes, &why_not)) return;
    if (!why_not.empty()) {
      AddEvent(job,
               absl::StrCat("no failover onto backups for the death of server node ", node_id, ": ",
                            why_not, "; recovering from the latest checkpoint"),
               now, changes);
    }
  }
  std::vector<bool> lost = SlotsOf(info, dead);
  const int64_t lost_count = std::count(lost.begin(), lost.end(), true);
  // A spare: an alive server outside the job, the least loaded (then the lowest id).
  const uint64_t spare =
      ChooseSpare(PlacementNodes(), PlacementJobs(),
                  std::vector<uint64_t>(info.server_nodes().begin(), info.server_nodes().end()));
  std::string moved_to;
  if (spare != 0) {
    info.set_server_nodes(dead, spare);
    const std::string& address = membership_.Get(spare).address();
    info.set_server_addresses(dead, address);
    moved_to = absl::StrCat("spare server node ", spare, " (", address, ")");
  } else {
    std::vector<int> survivors;
    for (int i = 0; i < info.server_nodes_size(); ++i) {
      const v1::NodeInfo* node = membership_.Find(info.server_nodes(i));
      if (i != dead && node != nullptr && node->state() == v1::ALIVE) {
        survivors.push_back(i);
      }
    }
    if (survivors.empty()) {
      EndJob(job, v1::FAILED,
             absl::StrCat(dead_name, " died (", why, ") and no server is left to take its slots"),
             now, changes);
      return;
    }
    MoveSlotsToSurvivors(dead, survivors, &info);
    moved_to = absl::StrCat("the ", survivors.size(), " surviving server",
                            survivors.size() == 1 ? "" : "s");
  }
  if (metrics_ != nullptr) metrics_->SlotsMoved(lost_count);
  // A checkpoint being written is incomplete for good.
  FailWritingCheckpoints(
      job, absl::StrCat(dead_name, drained ? " left" : " died", " while it was written"), now,
      changes);
  AddEvent(job,
           absl::StrCat(dead_name, drained ? " leaves: " : " dead: ", why, "; its ", lost_count,
                        " slots move to ", moved_to),
           now, changes);
  const bool rollback = info.spec().recovery() != v1::RESTORE_LOST_SLOTS;
  if (!rollback && job->recovery_start.has_value() && info.has_restore() &&
      info.restore().shard_epoch() == info.shard_epoch()) {
    // The previous order is not carried out yet (the job has not trained on its map): this one
    // replaces it, so its slots come along. (A failover since then changed the map without an
    // order: the old order is done, and its slots were not lost.)
    auto pending = DecodeSlotBitmap(info.restore().slots());
    if (pending.ok()) {
      for (uint32_t s = 0; s < kNumSlots; ++s) lost[s] = lost[s] || (*pending)[s];
    }
  }
  const v1::CheckpointInfo* checkpoint = job->checkpoints.LatestComplete();
  if (checkpoint == nullptr && info.spec().has_from_checkpoint()) {
    auto from = ResolveFromCheckpoint(info.spec());
    if (from.ok()) {
      checkpoint = *from;
    } else {
      AddEvent(job,
               absl::StrCat("the checkpoint this job started from cannot be restored (",
                            from.status().message(), ")"),
               now, changes);
    }
  }
  OrderRestore(job, checkpoint, rollback, rollback ? std::vector<bool>(kNumSlots, true) : lost,
               absl::StrCat(dead_name, drained ? " left (drained)" : " died"), now, changes);
  job->recovery_start = now;
  job->recovery_clock =
      rollback ? (checkpoint == nullptr ? 0 : checkpoint->clock()) : info.progress().clock();
  scheduler_internal::PlaceBackups(&info);
}

void Scheduler::FailWritingCheckpoints(Job* job, const std::string& why, absl::Time now,
                                       Changes* changes) {
  ReportFailedCheckpoints(job, job->checkpoints.FailWriting(why, now), now, changes);
}

void Scheduler::ReportFailedCheckpoints(Job* job, const std::vector<uint64_t>& ids, absl::Time now,
                                        Changes* changes) {
  for (uint64_t id : ids) {
    changes->checkpoints.insert({job->number, id});
    if (metrics_ != nullptr) metrics_->CheckpointEnded("failed", absl::ZeroDuration());
    AddEvent(job, absl::StrCat("checkpoint ", id, " failed: ", job->checkpoints.at(id).error()),
             now, changes);
  }
}

absl::StatusOr<v1::CheckpointInfo> Scheduler::BeginCheckpoint(const v1::BeginCheckpointRequest& req,
                                                              const JobCaller& caller) {
  PS_RETURN_IF_ERROR(CheckJobId(req.job_id()));
  absl::MutexLock lock(&mu_);
  Job* job = FindJob(req.job_id());
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", req.job_id(), "'"));
  PS_RETURN_IF_ERROR(CheckWorkerOf(*job, caller, "BeginCheckpoint"));
  v1::JobInfo& info = job->info;
  if (info.state() != v1::RUNNING) {
    return absl::FailedPreconditionError(absl::StrCat("job ", req.job_id(), " is not running"));
  }
  if (req.clock() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint clock ", req.clock(), " is negative"));
  }
  if (req.shard_epoch() != info.shard_epoch()) {
    return absl::FailedPreconditionError(absl::StrCat("shard epoch ", req.shard_epoch(),
                                                      " is not the job's (", info.shard_epoch(),
                                                      "): no checkpoint under an old shard map"));
  }
  const absl::Time now = clock_();
  Changes changes;
  const uint64_t id = std::max<uint64_t>(1, info.next_checkpoint_id());
  v1::CheckpointInfo checkpoint;
  checkpoint.set_job_id(info.job_id());
  checkpoint.set_checkpoint_id(id);
  checkpoint.set_clock(req.clock());
  checkpoint.set_start_time_unix_ms(ToMs(now));
  checkpoint.set_request_seq(req.request_seq());
  checkpoint.set_shard_epoch(info.shard_epoch());
  // The job's folder carries its submit time: a scheduler whose state was wiped numbers its jobs
  // from job-1 again, and must not meet the old job-1's checkpoints (servers never overwrite).
  const std::filesystem::path dir = std::filesystem::path(CheckpointRoot(info.spec())) /
                                    absl::StrCat(info.job_id(), ".", info.submit_time_unix_ms()) /
                                    absl::StrCat("ckpt-", id);
  checkpoint.set_dir(dir.string());
  const std::vector<int> owners = SlotOwners(info);
  for (int k = 0; k < info.server_addresses_size(); ++k) {
    v1::CheckpointShard& shard = *checkpoint.add_shards();
    shard.set_server_index(k);
    shard.set_address(info.server_addresses(k));
    if (k < info.server_nodes_size()) shard.set_node_id(info.server_nodes(k));
    shard.set_path((dir / absl::StrCat("shard-", k)).string());
    std::vector<bool> slots(kNumSlots);
    for (uint32_t s = 0; s < kNumSlots; ++s) slots[s] = owners[s] == k;
    shard.set_slots(EncodeSlotBitmap(slots));
  }
  // Rank 0 begins a checkpoint only once it has reported the previous one: one still WRITING
  // here lost its report (a scheduler restart, a rank 0 that died) and never completes.
  PS_ASSIGN_OR_RETURN(CheckpointCatalog::Begun begun,
                      job->checkpoints.Begin(std::move(checkpoint), now));
  ReportFailedCheckpoints(job, begun.superseded, now, &changes);
  info.set_next_checkpoint_id(id + 1);
  changes.jobs.insert(job->number);
  changes.checkpoints.insert({job->number, id});
  LOG(INFO) << "job " << info.job_id() << ": checkpoint " << id << " at clock " << req.clock()
            << " begins in " << begun.checkpoint->dir();
  PS_RETURN_IF_ERROR(Commit(&changes));
  return *begun.checkpoint;
}

absl::StatusOr<v1::CheckpointInfo> Scheduler::FinishCheckpoint(
    const v1::FinishCheckpointRequest& req, const JobCaller& caller) {
  PS_RETURN_IF_ERROR(CheckJobId(req.job_id()));
  if (!(req.write_seconds() >= 0 && req.write_seconds() <= kMaxWriteSeconds)) {
    return absl::InvalidArgumentError(absl::StrCat("write_seconds = ", req.write_seconds(),
                                                   " must be in [0, ", kMaxWriteSeconds, "]"));
  }
  absl::MutexLock lock(&mu_);
  Job* job = FindJob(req.job_id());
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", req.job_id(), "'"));
  PS_RETURN_IF_ERROR(CheckWorkerOf(*job, caller, "FinishCheckpoint"));
  const absl::Time now = clock_();
  // Recorded even if the report is refused below (PERMISSION_DENIED leaves it WRITING).
  PS_ASSIGN_OR_RETURN(const v1::CheckpointInfo* writing,
                      job->checkpoints.RecordEnd(req.checkpoint_id(), now, req.write_seconds()));
  const v1::CheckpointInfo& checkpoint = *writing;
  Changes changes;
  changes.checkpoints.insert({job->number, req.checkpoint_id()});
  const absl::Duration took = now - absl::FromUnixMillis(checkpoint.start_time_unix_ms());
  std::string error = Printable(req.error(), kMaxReportBytes);  // stored and printed
  if (error.empty() && req.shards_size() != checkpoint.shards_size()) {
    error = req.shards_size() < checkpoint.shards_size()
                ? absl::StrCat(req.shards_size(), " of ", checkpoint.shards_size(),
                               " servers confirmed it")
                : absl::StrCat("the report names ", req.shards_size(), " servers; it was taken on ",
                               checkpoint.shards_size());
  }
  // Rows and bytes are the servers' word, not the caller's.
  if (error.empty()) PS_RETURN_IF_ERROR(CheckReceipts(checkpoint, req));
  if (!error.empty()) {
    PS_RETURN_IF_ERROR(job->checkpoints.Fail(req.checkpoint_id(), error));
    if (metrics_ != nullptr) metrics_->CheckpointEnded("failed", took);
    AddEvent(job, absl::StrCat("checkpoint ", req.checkpoint_id(), " failed: ", error), now,
             &changes);
    PS_RETURN_IF_ERROR(Commit(&changes));
    return checkpoint;
  }
  PS_RETURN_IF_ERROR(job->checkpoints.Complete(req.checkpoint_id(), req.shards()).status());
  uint64_t rows = 0, bytes = 0;
  for (const v1::CheckpointShard& shard : checkpoint.shards()) {
    rows += shard.rows();
    bytes += shard.bytes();
  }
  job->info.set_latest_checkpoint_id(checkpoint.checkpoint_id());
  changes.jobs.insert(job->number);
  if (metrics_ != nullptr) {
    metrics_->CheckpointEnded("complete", took);
    if (job->info.state() == v1::RUNNING) metrics_->SetJobCheckpoint(job->info.job_id(), now);
  }
  AddEvent(job,
           absl::StrFormat("checkpoint %d complete: clock %d, %d rows, %s, %.2f s",
                           checkpoint.checkpoint_id(), checkpoint.clock(), rows, MiB(bytes),
                           absl::ToDoubleSeconds(took)),
           now, &changes);
  const v1::CheckpointInfo result = checkpoint;
  PruneCheckpoints(job, now, &changes);
  FinishDrain(job, result.request_seq(), now, &changes);
  PS_RETURN_IF_ERROR(Commit(&changes));
  return result;
}

bool Scheduler::CheckpointInUse(const std::string& job_id, uint64_t id) const {
  for (const auto& [number, job] : jobs_) {
    const v1::JobInfo& info = job.info;
    if (info.state() != v1::PENDING && info.state() != v1::RUNNING) continue;
    if (info.restore().source_job_id() == job_id && info.restore().checkpoint_id() == id) {
      return true;
    }
    const v1::CheckpointRef& from = info.spec().from_checkpoint();
    if (info.spec().has_from_checkpoint() && from.job_id() == job_id &&
        from.checkpoint_id() == id) {
      return true;
    }
  }
  return false;
}

void Scheduler::PruneCheckpoints(Job* job, absl::Time now, Changes* changes) {
  const int keep = std::max(1, job->info.spec().checkpoint().keep_last());
  const v1::RestoreOrder& order = job->info.restore();
  const std::string& job_id = job->info.job_id();
  std::set<uint64_t> in_use;
  if (order.source_job_id() == job_id) in_use.insert(order.checkpoint_id());
  for (const auto& [id, checkpoint] : job->checkpoints.entries()) {
    if (CheckpointInUse(job_id, id)) in_use.insert(id);
  }
  for (uint64_t id : job->checkpoints.ToPrune(keep, in_use)) {
    const v1::CheckpointInfo& checkpoint = job->checkpoints.at(id);
    std::error_code error;
    std::filesystem::remove_all(checkpoint.dir(), error);
    if (error) {
      LOG(WARNING) << "cannot remove " << checkpoint.dir() << ": " << error.message();
    }
    if (checkpoint.state() == v1::CHECKPOINT_COMPLETE) {
      AddEvent(job,
               absl::StrCat("checkpoint ", id, " pruned (keep last ", keep, ")",
                            error ? absl::StrCat("; its files: ", error.message()) : ""),
               now, changes);
    }
    job->checkpoints.MarkPruned(id, /*files_removed=*/!error);
    changes->checkpoints.insert({job->number, id});
  }
}

absl::StatusOr<v1::JobInfo> Scheduler::ReportRestoreFailure(
    const v1::ReportRestoreFailureRequest& req, const JobCaller& caller) {
  PS_RETURN_IF_ERROR(CheckJobId(req.job_id()));
  absl::MutexLock lock(&mu_);
  Job* job = FindJob(req.job_id());
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", req.job_id(), "'"));
  PS_RETURN_IF_ERROR(CheckWorkerOf(*job, caller, "ReportRestoreFailure"));
  v1::JobInfo& info = job->info;
  const v1::RestoreOrder order = info.restore();
  // Only the first report of a failed order acts: it moves the job to a new epoch.
  if (info.state() != v1::RUNNING || req.shard_epoch() != info.shard_epoch() ||
      order.shard_epoch() != req.shard_epoch()) {
    return JobWithEvents(*job);
  }
  const absl::Time now = clock_();
  Changes changes;
  const std::string error = Printable(req.error(), kMaxReportBytes);  // stored and printed
  const auto code = static_cast<absl::StatusCode>(req.code());
  const bool corrupt = code == absl::StatusCode::kDataLoss || code == absl::StatusCode::kNotFound;
  Job* source = order.source_job_id().empty() ? job : FindJob(order.source_job_id());
  if (!corrupt || order.checkpoint_id() == 0 || source == nullptr) {
    EndJob(job, v1::FAILED,
           absl::StrCat("restore from checkpoint ", order.checkpoint_id(), " failed: ", error), now,
           &changes);
    Schedule(now, &changes);
    PS_RETURN_IF_ERROR(Commit(&changes));
    return JobWithEvents(*job);
  }
  if (source->checkpoints.MarkCorrupt(order.checkpoint_id(), error)) {
    changes.checkpoints.insert({source->number, order.checkpoint_id()});
    if (metrics_ != nullptr) metrics_->CheckpointEnded("corrupt", absl::ZeroDuration());
    if (source->info.latest_checkpoint_id() == order.checkpoint_id()) {
      const v1::CheckpointInfo* latest = source->checkpoints.LatestComplete();
      source->info.set_latest_checkpoint_id(latest == nullptr ? 0 : latest->checkpoint_id());
      changes.jobs.insert(source->number);
    }
  }
  const v1::CheckpointInfo* fallback = source->checkpoints.LatestComplete(order.checkpoint_id());
  AddEvent(job,
           absl::StrCat(
               "checkpoint ", order.checkpoint_id(), " is corrupt: ", error, "; falling back to ",
               fallback == nullptr ? std::string("the initial values")
                                   : absl::StrCat("checkpoint ", fallback->checkpoint_id())),
           now, &changes);
  if (fallback == nullptr && source != job) {
    EndJob(job, v1::FAILED,
           absl::StrCat("checkpoint ", order.checkpoint_id(), " of ", source->info.job_id(),
                        " is corrupt and no earlier one is complete"),
           now, &changes);
    Schedule(now, &changes);
    PS_RETURN_IF_ERROR(Commit(&changes));
    return JobWithEvents(*job);
  }
  auto slots = DecodeSlotBitmap(order.slots());
  OrderRestore(job, fallback, order.rollback(),
               slots.ok() ? *slots : std::vector<bool>(kNumSlots, true),
               absl::StrCat(order.reason(), " (fallback)"), now, &changes);
  if (job->recovery_start.has_value() && order.rollback()) {
    job->recovery_clock = fallback == nullptr ? 0 : fallback->clock();
  }
  PS_RETURN_IF_ERROR(Commit(&changes));
  return JobWithEvents(*job);
}

}  // namespace ps
