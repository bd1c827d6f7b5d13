// Placement applied: scheduler/placement.h decides from a snapshot which nodes each job gets;
// these functions take the snapshot and carry the answer out (job state, events, metrics).
#include <glog/logging.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/security.h"  // SignedRestoreOrder
#include "common/shard_map.h"
#include "scheduler/placement.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_internal.h"

namespace ps {
namespace {

using scheduler_internal::Plural;
using scheduler_internal::ToMs;

}  // namespace

void scheduler_internal::PlaceBackups(v1::JobInfo* info) {
  info->clear_slot_backups();
  const int n = info->server_addresses_size();
  if (info->spec().replication().replicas() == 0 || n < 2) return;
  for (uint32_t b : BackupOwners(scheduler_internal::SlotOwners(*info), n)) {
    info->add_slot_backups(b);
  }
}

std::vector<PlacementNode> Scheduler::PlacementNodes() const {
  std::vector<PlacementNode> snapshot;
  snapshot.reserve(membership_.nodes().size());
  for (const auto& [id, node] : membership_.nodes()) {
    PlacementNode n;
    n.id = id;
    n.server = node.role() == v1::SERVER;
    n.alive = node.state() == v1::ALIVE;
    n.draining = node.draining();
    n.in_job = !node.job_id().empty();
    snapshot.push_back(n);
  }
  return snapshot;
}

std::vector<PlacementJob> Scheduler::PlacementJobs() const {
  std::vector<PlacementJob> snapshot;
  for (const auto& [number, job] : jobs_) {
    const v1::JobInfo& info = job.info;
    if (info.state() != v1::RUNNING && info.state() != v1::PENDING) continue;
    PlacementJob j;
    j.number = number;
    j.running = info.state() == v1::RUNNING;
    j.num_workers = info.spec().num_workers();
    j.num_servers = info.spec().num_servers();
    j.workers = info.worker_ids_size();
    j.server_nodes.assign(info.server_nodes().begin(), info.server_nodes().end());
    // Found corrupt since the submission: the job fails when its turn comes, placed nowhere.
    j.fails_at_start =
        !j.running && info.spec().has_from_checkpoint() && !ResolveFromCheckpoint(info.spec()).ok();
    snapshot.push_back(std::move(j));
  }
  return snapshot;
}

void Scheduler::Schedule(absl::Time now, Changes* changes) {
  const Placement placement = Place(PlacementNodes(), PlacementJobs());
  static const std::vector<uint64_t> kNone;
  for (auto& [number, job] : jobs_) {
    if (job.info.state() != v1::RUNNING) continue;
    auto joins = placement.joins.find(number);
    AddWorkers(&job, joins == placement.joins.end() ? kNone : joins->second, now, changes);
  }
  for (uint64_t number : placement.failures) {
    Job& job = jobs_[number];
    EndJob(&job, v1::FAILED, std::string(ResolveFromCheckpoint(job.info.spec()).status().message()),
           now, changes);
  }
  for (const auto& [number, start] : placement.starts) Start(&jobs_[number], start, now, changes);
  // What the jobs still pending wait for, counted after this round's placements.
  for (auto& [number, job] : jobs_) {
    if (job.info.state() != v1::PENDING) continue;
    const v1::JobSpec& spec = job.info.spec();
    SetReason(&job,
              absl::StrCat("waiting for ", Plural(spec.num_workers(), "idle worker"), " (",
                           placement.idle_left, " available) and ",
                           spec.num_servers() == 0 ? "at least 1 server"
                                                   : Plural(spec.num_servers(), "server"),
                           " (", placement.servers_available, " available)"),
              changes);
  }
}

void Scheduler::AddWorkers(Job* job, const std::vector<uint64_t>& joining, absl::Time now,
                           Changes* changes) {
  v1::JobInfo& info = job->info;
  const int wanted = info.spec().num_workers();
  for (uint64_t id : joining) {
    const uint32_t worker_id = info.next_worker_id();
    info.set_next_worker_id(worker_id + 1);
    info.add_worker_nodes(id);
    info.add_worker_ids(worker_id);
    info.set_membership_epoch(info.membership_epoch() + 1);
    if (metrics_ != nullptr) metrics_->MembershipChanged();
    if (!job->deaths.empty()) {  // a replacement
      if (metrics_ != nullptr) metrics_->Recovered(now - job->deaths.front());
      job->deaths.pop_front();
    }
    membership_.FindMutable(id)->set_job_id(info.job_id());  // placement chose a known node
    changes->nodes.insert(id);
    changes->jobs.insert(job->number);
    changes->sync = true;
    AddEvent(job, absl::StrCat("node ", id, " joined as worker ", worker_id), now, changes);
    LOG(INFO) << "job " << info.job_id() << ": node " << id << " joined as worker " << worker_id;
  }
  SetReason(job,
            info.worker_ids_size() < wanted
                ? absl::StrCat("running with ", info.worker_ids_size(), " of ",
                               Plural(wanted, "worker"), "; waiting for idle workers to join")
                : "",
            changes);
}

void Scheduler::Start(Job* job, const Placement::Start& start, absl::Time now, Changes* changes) {
  v1::JobInfo& info = job->info;
  const v1::JobSpec& spec = info.spec();
  std::vector<std::string> servers;
  for (uint64_t id : start.servers) {
    info.add_server_nodes(id);
    const std::string& address = membership_.Get(id).address();
    info.add_server_addresses(address);
    servers.push_back(absl::StrCat("node ", id, " (", address, ")"));
  }
  info.set_shard_epoch(1);
  scheduler_internal::PlaceBackups(&info);
  if (spec.has_from_checkpoint()) {
    // Placement left out the jobs whose checkpoint does not resolve (fails_at_start).
    const v1::CheckpointInfo* from = *ResolveFromCheckpoint(spec);
    v1::RestoreOrder& order = *info.mutable_restore();
    order.set_shard_epoch(1);
    order.set_rollback(true);
    order.set_slots(EncodeSlotBitmap(std::vector<bool>(kNumSlots, true)));
    order.set_reason(absl::StrCat("the job starts from checkpoint ",
                                  spec.from_checkpoint().checkpoint_id(), " of ",
                                  spec.from_checkpoint().job_id()));
    order.set_source_job_id(from->job_id());
    order.set_checkpoint_id(from->checkpoint_id());
    order.set_clock(from->clock());
    *order.mutable_shards() = from->shards();
  }
  std::vector<std::string> workers;
  for (size_t i = 0; i < start.workers.size(); ++i) {
    const uint64_t id = start.workers[i];
    info.add_worker_nodes(id);
    info.add_worker_ids(i);
    membership_.FindMutable(id)->set_job_id(info.job_id());  // placement chose a known node
    changes->nodes.insert(id);
    workers.push_back(absl::StrCat("node ", id, " as worker ", i));
  }
  info.set_next_worker_id(start.workers.size());
  info.set_membership_epoch(1);
  info.set_state(v1::RUNNING);
  info.set_reason("");
  info.set_start_time_unix_ms(ToMs(now));
  changes->jobs.insert(job->number);
  changes->sync = true;
  const std::string event = absl::StrCat("started: servers ", absl::StrJoin(servers, ", "),
                                         "; workers ", absl::StrJoin(workers, ", "));
  AddEvent(job, event, now, changes);
  LOG(INFO) << "job " << info.job_id() << " " << event;
  CheckSharedCheckpointRoot(job, now, changes);
}

void Scheduler::CheckSharedCheckpointRoot(Job* job, absl::Time now, Changes* changes) {
  const std::string root = CheckpointRoot(job->info.spec());
  std::set<std::string> hosts;
  for (uint64_t id : job->info.server_nodes()) hosts.insert(membership_.Get(id).hostname());
  for (uint64_t id : job->info.server_nodes()) {
    const v1::NodeInfo& server = membership_.Get(id);
    const std::string& probe = server.checkpoint_probe();
    // Not reported yet (checked again when it is), or a job root of its own: servers probe the
    // scheduler's --checkpoint_root only.
    if (probe.empty() || root != checkpoint_root_ || job->root_warned.count(id) > 0) continue;
    std::string problem;
    if (probe != "ok") {
      problem = absl::StrCat("server node ", id, " (", server.address(),
                             ") cannot write the checkpoint root ", root, ": ", probe,
                             "; the job's checkpoints will fail and a lost server's rows cannot "
                             "be restored");
    } else if (hosts.size() > 1) {
      std::error_code ec;
      const std::filesystem::path file =
          std::filesystem::path(root) / ".ps-probe" / absl::StrCat("node-", id);
      if (!std::filesystem::exists(file, ec)) {
        problem = absl::StrCat(
            "the checkpoint root ", root, " is not shared: server node ", id, " (host ",
            server.hostname(), ") wrote ", file.string(),
            " there but the scheduler does not see it; servers on other hosts cannot restore "
            "its checkpoints (mount the root on every host, or set checkpoint.root)");
      }
    }
    if (problem.empty()) continue;
    job->root_warned.insert(id);
    LOG(WARNING) << "job " << job->info.job_id() << ": " << problem;
    AddEvent(job, absl::StrCat("WARNING: ", problem), now, changes);
  }
}

v1::WorkerAssignment Scheduler::Assignment(const Job& job, int index) const {
  const v1::JobInfo& info = job.info;
  v1::WorkerAssignment a;
  a.set_job_id(info.job_id());
  *a.mutable_spec() = info.spec();
  a.set_worker_id(info.worker_ids(index));
  *a.mutable_worker_ids() = info.worker_ids();
  a.set_membership_epoch(info.membership_epoch());
  a.set_rank(index);
  *a.mutable_servers() = info.server_addresses();
  a.set_shard_epoch(info.shard_epoch());
  *a.mutable_slot_owners() = info.slot_owners();
  *a.mutable_slot_backups() = info.slot_backups();
  if (info.has_restore() && info.restore().shard_epoch() == info.shard_epoch()) {
    *a.mutable_restore() =
        SignedRestoreOrder(options_.authorizer.get(), a.job_id(), info.restore());
  }
  a.set_checkpoint_requests(info.checkpoint_requests());
  return a;
}

}  // namespace ps
