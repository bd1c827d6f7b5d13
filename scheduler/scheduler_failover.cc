// Failover of replicated jobs (JobSpec.replication): a dead server's slots are taken over by
// their backups, which hold every completed clock of them (a sync primary forwards each clock
// to its backups before the clock completes). Nothing is read from a checkpoint and no worker
// clock goes back: the workers re-route on the new shard epoch and re-send the push of the
// clock in flight for the slots that moved (client/job_run.cc), which the new owners apply
// once (server/consistency_gate.h, "catch-up").
#include <glog/logging.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/shard_map.h"
#include "scheduler/placement.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_internal.h"

namespace ps {

void Scheduler::NoteReport(Job* job, const v1::WorkerProgress& progress) {
  if (progress.shard_epoch() == job->reports_epoch) return;
  job->reports_epoch = progress.shard_epoch();
  job->reports_first_clock = progress.clock();
}

bool Scheduler::BackupsSeeded(const Job& job) {
  const v1::WorkerProgress& progress = job.info.progress();
  return job.reports_epoch == job.info.shard_epoch() &&
         progress.shard_epoch() == job.info.shard_epoch() &&
         progress.clock() >= job.reports_first_clock + 2;
}

bool Scheduler::PromoteBackups(Job* job, uint64_t node_id, const std::string& why, absl::Time now,
                               Changes* changes, std::string* why_not) {
  v1::JobInfo& info = job->info;
  const v1::JobSpec& spec = info.spec();
  if (spec.replication().replicas() == 0) return false;  // today's checkpoint recovery, unsaid
  const int dead = scheduler_internal::IndexOf(info.server_nodes(), node_id);
  if (dead < 0) return false;
  if (spec.consistency().mode() != v1::ConsistencySpec::SYNC || spec.has_program()) {
    *why_not = "failover onto backups is built for sync zoo-model jobs only";
    return false;
  }
  if (job->recovery_start.has_value() && info.has_restore() &&
      info.restore().shard_epoch() == info.shard_epoch()) {
    *why_not = "a recovery from a checkpoint is still under way";
    return false;
  }
  if (!info.slot_backups().empty() && !BackupsSeeded(*job)) {
    *why_not = absl::StrCat("the backups placed for shard epoch ", info.shard_epoch(),
                            " do not hold every slot yet (the job has not completed two clocks "
                            "under it)");
    return false;
  }
  std::vector<bool> alive(info.server_nodes_size(), false);
  for (int i = 0; i < info.server_nodes_size(); ++i) {
    const v1::NodeInfo* node = membership_.Find(info.server_nodes(i));
    alive[i] = i != dead && node != nullptr && node->state() == v1::ALIVE;
  }
  const std::vector<int> owners = scheduler_internal::SlotOwners(info);
  const std::vector<uint32_t> backups(info.slot_backups().begin(), info.slot_backups().end());
  std::optional<std::vector<int>> promoted = PromotedOwners(owners, backups, dead, alive, why_not);
  if (!promoted.has_value()) {
    if (backups.empty()) *why_not = "the job's slots have no backups (one server was left)";
    return false;
  }
  // Where the dead server's slots go, for the event: "node 3 (addr): 171 slots, ...".
  std::vector<int> taken(info.server_nodes_size(), 0);
  int64_t moved = 0;
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    if (owners[s] != dead) continue;
    ++taken[backups[s]];
    ++moved;
  }
  std::vector<std::string> to;
  for (int i = 0; i < info.server_nodes_size(); ++i) {
    if (taken[i] == 0) continue;
    to.push_back(absl::StrCat("node ", info.server_nodes(i), " (", info.server_addresses(i),
                              "): ", taken[i]));
  }
  const std::string dead_name =
      absl::StrCat("server node ", node_id, " (", info.server_addresses(dead), ")");
  // A checkpoint being written under the old map is incomplete for good.
  FailWritingCheckpoints(job, absl::StrCat(dead_name, " died while it was written"), now, changes);
  info.mutable_server_nodes()->erase(info.mutable_server_nodes()->begin() + dead);
  info.mutable_server_addresses()->erase(info.mutable_server_addresses()->begin() + dead);
  info.clear_slot_owners();
  for (int owner : *promoted) info.add_slot_owners(static_cast<uint32_t>(owner));
  // New backups for the new map (none with one server left): each primary's next forwarded
  // clock seeds them; until two clocks completed under it, a death recovers from a checkpoint.
  scheduler_internal::PlaceBackups(&info);
  info.set_shard_epoch(info.shard_epoch() + 1);
  changes->jobs.insert(job->number);
  changes->sync = true;
  job->recovery_start = now;
  job->recovery_clock = info.progress().clock();
  if (metrics_ != nullptr) {
    metrics_->SlotsMoved(moved);
    metrics_->FailedOver();
    metrics_->SetJobEpochs(info.job_id(), info.shard_epoch(), info.membership_epoch());
  }
  const std::string event = absl::StrCat(
      dead_name, " dead: ", why, "; failover: its ", moved,
      " slots are promoted to their backups (", absl::StrJoin(to, ", "), " slots), shard epoch ",
      info.shard_epoch(),
      "; no checkpoint is read and no clock goes back (the workers re-send the clock in flight "
      "for those slots). ",
      info.slot_backups().empty()
          ? std::string("One server is left, so no backups: another server death recovers from "
                        "the latest checkpoint")
          : std::string("New backups are placed for every slot, seeded by the next clocks; a "
                        "server death before two clocks completed recovers from the latest "
                        "checkpoint"));
  AddEvent(job, event, now, changes);
  LOG(INFO) << "job " << info.job_id() << ": " << event;
  return true;
}

}  // namespace ps
