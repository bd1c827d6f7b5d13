// Nodes register and heartbeat (with the progress of their jobs), fall silent and are declared
// dead: Membership (membership.h) keeps the node table and decides; here is what that means for
// the jobs the nodes served.
#include <glog/logging.h>

#include <algorithm>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/printable.h"
#include "common/status_macros.h"
#include "scheduler/data_ledger.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_internal.h"

namespace ps {
namespace {

using scheduler_internal::IndexOf;
using scheduler_internal::IsFinished;
using scheduler_internal::Plural;
using scheduler_internal::ToMs;

// A program's metrics as stored and printed: at most kMaxMetrics names of name characters.
constexpr int kMaxMetrics = 16;
constexpr size_t kMaxLogLines = 100;
constexpr size_t kMaxLogLineBytes = 1000;

void SanitizeMetrics(v1::WorkerProgress* progress) {
  if (progress->metrics().empty()) return;
  google::protobuf::Map<std::string, double> kept;
  for (const auto& [name, value] : progress->metrics()) {
    if (static_cast<int>(kept.size()) >= kMaxMetrics) break;
    if (!CheckName("metric", name, 1).ok() || name.size() > 64) continue;
    kept[name] = value;
  }
  *progress->mutable_metrics() = std::move(kept);
}

// A worker's log as kept and shown: the last kMaxLogLines lines, each clipped and escaped.
v1::ProgramLog SanitizedLog(const v1::ProgramLog& log) {
  v1::ProgramLog out;
  const int first = std::max(0, log.lines_size() - static_cast<int>(kMaxLogLines));
  for (int i = first; i < log.lines_size(); ++i) {
    out.add_lines(Printable(log.lines(i), kMaxLogLineBytes));
  }
  out.set_path(Printable(log.path(), kMaxPathBytes));
  out.set_hostname(Printable(log.hostname(), kMaxNameBytes));
  out.set_starts(log.starts());
  return out;
}

std::string RoleName(v1::NodeRole role) { return absl::AsciiStrToLower(v1::NodeRole_Name(role)); }

}  // namespace

absl::StatusOr<v1::RegisterResponse> Scheduler::Register(const v1::RegisterRequest& req) {
  PS_RETURN_IF_ERROR(CheckRegisterRequest(req));
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_();
  Changes changes;
  PS_ASSIGN_OR_RETURN(Membership::Registration registration,
                      membership_.Register(req, now, NodesInUse()));
  DeleteNodes(registration.forgotten, &changes);
  changes.sync = true;
  changes.counters = true;
  const uint64_t id = registration.node_id;
  const v1::NodeInfo& node = *membership_.Find(id);
  changes.nodes.insert(id);
  // The new server is registered first, so that it can take the old one's slots as a spare.
  for (uint64_t old : registration.replaced) {
    MarkDead(membership_.FindMutable(old), "a new server registered at its address", now, &changes);
  }
  LOG(INFO) << "node " << id << " registered: " << RoleName(req.role()) << " "
            << (req.address().empty() ? "" : req.address() + " ") << "on " << req.hostname()
            << " pid " << req.pid();
  Schedule(now, &changes);
  PS_RETURN_IF_ERROR(Commit(&changes));
  v1::RegisterResponse resp;
  resp.set_node_id(id);
  resp.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
  resp.set_checkpoint_root(checkpoint_root_);
  resp.set_heartbeat_timeout_ms(absl::ToInt64Milliseconds(options_.heartbeat_timeout));
  resp.set_node_secret(node.node_secret());
  return resp;
}

absl::StatusOr<v1::HeartbeatResponse> Scheduler::Heartbeat(const v1::HeartbeatRequest& req) {
  absl::MutexLock lock(&mu_);
  v1::HeartbeatResponse resp;
  v1::NodeInfo* found = membership_.FindMutable(req.node_id());
  if (found == nullptr || found->state() != v1::ALIVE) {
    resp.set_reregister(true);
    return resp;
  }
  v1::NodeInfo& node = *found;
  PS_RETURN_IF_ERROR(membership_.CheckHeartbeatSecret(node.node_id(), req.node_secret()));
  const absl::Time now = clock_();
  Changes changes;
  const Membership::Heard heard = membership_.RecordHeartbeat(node.node_id(), now);
  changes.nodes.insert(heard.refreshed.begin(), heard.refreshed.end());
  if (metrics_ != nullptr) metrics_->ObserveHeartbeatLag(heard.lag);
  if (node.role() == v1::SERVER && req.checkpoint_probe() != node.checkpoint_probe()) {
    node.set_checkpoint_probe(Printable(req.checkpoint_probe(), kMaxReportBytes));
    for (auto& [number, job] : jobs_) {
      if (job.info.state() == v1::RUNNING &&
          absl::c_find(job.info.server_nodes(), node.node_id()) != job.info.server_nodes().end()) {
        CheckSharedCheckpointRoot(&job, now, &changes);
      }
    }
  }
  if (node.role() == v1::WORKER && req.has_progress() && !req.progress().job_id().empty()) {
    HandleProgress(&node, req.progress(), now, &changes);
  }
  // A job ended (sync): its workers are idle now.
  if (changes.sync) Schedule(now, &changes);
  PS_RETURN_IF_ERROR(Commit(&changes));
  if (node.role() == v1::WORKER && !node.job_id().empty()) {
    const Job* job = FindJob(node.job_id());
    const int index = job == nullptr ? -1 : IndexOf(job->info.worker_nodes(), node.node_id());
    if (index >= 0 && job->info.state() == v1::RUNNING) {
      *resp.mutable_assignment() = Assignment(*job, index);
    }
  }
  return resp;
}

void Scheduler::HandleProgress(v1::NodeInfo* node, const v1::WorkerProgress& progress,
                               absl::Time now, Changes* changes) {
  Job* job = FindJob(progress.job_id());
  // A report about a job the worker no longer runs is stale: ignore it.
  if (job == nullptr || job->info.state() != v1::RUNNING || node->job_id() != progress.job_id()) {
    return;
  }
  const int index = IndexOf(job->info.worker_nodes(), node->node_id());
  if (index < 0) return;
  const uint32_t worker_id = job->info.worker_ids(index);
  const std::string worker = absl::StrCat("worker ", worker_id, " (node ", node->node_id(), ")");
  if (progress.has_log()) {
    v1::WorkerLog& log = job->logs[worker_id];
    log.set_worker_id(worker_id);
    log.set_node_id(node->node_id());
    log.set_time_unix_ms(ToMs(now));
    *log.mutable_log() = SanitizedLog(progress.log());
  }
  if (!progress.error().empty()) {
    EndJob(job, v1::FAILED,
           absl::StrCat(worker, ": ", Printable(progress.error(), kMaxReportBytes)), now, changes);
    return;
  }
  if (index == 0) {  // rank 0 (the lowest remaining one) speaks for the job
    NoteReport(job, progress);
    *job->info.mutable_progress() = progress;
    job->info.mutable_progress()->clear_log();  // kept apart, in memory
    SanitizeMetrics(job->info.mutable_progress());
    if (job->info.has_data() && job->info.data().total_ranges() > 0) {
      // Dynamic data: the job's place is the data read by all of its workers, not rank 0's.
      const v1::DataLedger& data = job->info.data();
      v1::WorkerProgress& p = *job->info.mutable_progress();
      p.set_total_clocks(TotalClocks(data));
      p.set_clock(std::min<int64_t>(p.total_clocks(),
                                    static_cast<int64_t>(data.done() / data.clock_workers())));
      if (!p.finished()) p.set_epoch(std::min(data.epochs(), EpochsDone(data) + 1));
    }
    // Stored and printed: a worker's error text is clipped and escaped.
    job->info.mutable_progress()->set_error(Printable(progress.error(), kMaxReportBytes));
    changes->jobs.insert(job->number);
    if (job->recovery_start.has_value() && progress.shard_epoch() >= job->info.shard_epoch() &&
        progress.clock() > job->recovery_clock) {
      const absl::Duration took = now - *job->recovery_start;
      job->recovery_start.reset();
      job->info.set_recoveries(job->info.recoveries() + 1);
      if (metrics_ != nullptr) metrics_->ServerRecovered(took);
      AddEvent(job,
               absl::StrFormat("recovered: training again at clock %d, %.1f s after the server's "
                               "death was detected",
                               progress.clock(), absl::ToDoubleSeconds(took)),
               now, changes);
    }
    if (metrics_ != nullptr) {
      metrics_->SetJobProgress(job->info.job_id(), progress.clock(), progress.test_accuracy());
    }
  }
  if (progress.finished()) {
    v1::WorkerProgress& final_report = job->final_reports[worker_id];
    final_report = progress;
    final_report.clear_log();
    SanitizeMetrics(&final_report);
    final_report.set_error(Printable(progress.error(), kMaxReportBytes));
  }
  if (progress.finished() && IndexOf(job->info.finished_worker_ids(), worker_id) < 0) {
    job->info.add_finished_worker_ids(worker_id);
    changes->jobs.insert(job->number);
    changes->sync = true;
    AddEvent(job, absl::StrCat(worker, " finished"), now, changes);
    MaybeSucceed(job, now, changes);
  }
}

absl::Status Scheduler::Tick() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_();
  Changes changes;
  const std::string why =
      absl::StrCat("no heartbeat for ", absl::FormatDuration(options_.heartbeat_timeout));
  // Every node that timed out is dead before any job recovers: a server that died in the same
  // tick must not be chosen to take another one's slots.
  for (uint64_t id : membership_.DeclareSilentNodesDead(now)) {
    MarkDead(membership_.FindMutable(id), why, now, &changes);
  }
  DeleteNodes(membership_.ForgetDeadNodes(now, NodesInUse()), &changes);
  Schedule(now, &changes);
  return Commit(&changes);
}

void Scheduler::MarkDead(v1::NodeInfo* node, const std::string& why, absl::Time now,
                         Changes* changes) {
  membership_.MarkDead(node->node_id());
  if (metrics_ != nullptr) metrics_->NodeDied(node->role());
  changes->nodes.insert(node->node_id());
  changes->sync = true;
  LOG(INFO) << "node " << node->node_id() << " (" << RoleName(node->role())
            << (node->address().empty() ? "" : " " + node->address()) << ") dead: " << why;
  if (node->role() == v1::WORKER && !node->job_id().empty()) {
    Job* job = FindJob(node->job_id());
    node->clear_job_id();
    if (job != nullptr && job->info.state() == v1::RUNNING) {
      RemoveWorker(job, node->node_id(), why, now, changes);
    }
  }
  if (node->role() == v1::SERVER) {
    for (auto& [number, job] : jobs_) {
      if (job.info.state() == v1::RUNNING &&
          IndexOf(job.info.server_nodes(), node->node_id()) >= 0) {
        RecoverFromServerLoss(&job, node->node_id(), why, now, changes);
      }
    }
  }
}

void Scheduler::RemoveWorker(Job* job, uint64_t node_id, const std::string& why, absl::Time now,
                             Changes* changes) {
  v1::JobInfo& info = job->info;
  const int index = IndexOf(info.worker_nodes(), node_id);
  if (index < 0) return;
  const uint32_t worker_id = info.worker_ids(index);
  info.mutable_worker_nodes()->erase(info.worker_nodes().begin() + index);
  info.mutable_worker_ids()->erase(info.worker_ids().begin() + index);
  const int finished = IndexOf(info.finished_worker_ids(), worker_id);
  if (finished >= 0) {
    info.mutable_finished_worker_ids()->erase(info.finished_worker_ids().begin() + finished);
  }
  info.set_membership_epoch(info.membership_epoch() + 1);
  ReturnDataOf(job, worker_id, now, changes);
  if (metrics_ != nullptr) metrics_->MembershipChanged();
  changes->jobs.insert(job->number);
  changes->sync = true;
  const std::string event = absl::StrCat("worker ", worker_id, " (node ", node_id, ") dead: ", why);
  if (info.worker_ids().empty()) {
    AddEvent(job, event, now, changes);
    EndJob(job, v1::FAILED, "all workers of the job died", now, changes);
    return;
  }
  AddEvent(job, absl::StrCat(event, "; continuing with ", Plural(info.worker_ids_size(), "worker")),
           now, changes);
  job->deaths.push_back(now);
  MaybeSucceed(job, now, changes);
}

}  // namespace ps
