#include "scheduler/scheduler.h"

#include <glog/logging.h>

#include <algorithm>
#include <filesystem>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/job_tables.h"
#include "common/node_identity.h"
#include "common/printable.h"
#include "common/security.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "scheduler/data_ledger.h"
#include "scheduler/job_spec.h"
#include "scheduler/scheduler_internal.h"

namespace ps {
namespace {

constexpr char kJobIdPrefix[] = "job-";

bool ParseJobNumber(absl::string_view job_id, uint64_t* number) {
  return absl::ConsumePrefix(&job_id, kJobIdPrefix) && absl::SimpleAtoi(job_id, number) &&
         *number > 0;
}

using scheduler_internal::IndexOf;
using scheduler_internal::IsFinished;
using scheduler_internal::Plural;
using scheduler_internal::ToMs;

}  // namespace

Scheduler::Scheduler(const SchedulerOptions& options, Clock clock,
                     std::unique_ptr<StateStore> store, SchedulerMetrics* metrics,
                     JobDropper* dropper)
    : options_(options),
      clock_(std::move(clock)),
      store_(std::move(store)),
      metrics_(metrics),
      dropper_(dropper),
      membership_(options_) {
  std::error_code error;
  // Beside the state dir by default; "a/state/" normalizes to "a/state/", whose parent_path()
  // would be "a/state" itself: drop the trailing separator first.
  std::filesystem::path state = std::filesystem::path(options_.state_dir).lexically_normal();
  if (!state.has_filename() && state.has_parent_path()) state = state.parent_path();
  const std::filesystem::path root = options_.checkpoint_root.empty()
                                         ? state.parent_path() / "checkpoints"
                                         : std::filesystem::path(options_.checkpoint_root);
  const std::filesystem::path absolute = std::filesystem::absolute(root, error);
  checkpoint_root_ = NormalPath((error ? root : absolute).string());
  job_limits_.checkpoint_roots.push_back(checkpoint_root_);
  job_limits_.max_model_bytes = options_.max_model_bytes;
  for (const std::string& allowed : options_.checkpoint_roots) {
    job_limits_.checkpoint_roots.push_back(NormalPath(allowed));
  }
}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Open(const SchedulerOptions& options,
                                                           Clock clock, SchedulerMetrics* metrics,
                                                           JobDropper* dropper) {
  PS_RETURN_IF_ERROR(options.Validate());
  PS_ASSIGN_OR_RETURN(std::unique_ptr<StateStore> store, StateStore::Open(options.state_dir));
  std::unique_ptr<Scheduler> scheduler(
      new Scheduler(options, std::move(clock), std::move(store), metrics, dropper));
  PS_RETURN_IF_ERROR(scheduler->Load());
  return scheduler;
}

absl::Status Scheduler::Load() {
  PS_ASSIGN_OR_RETURN(StoredState state, store_->Load());
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_();
  Changes changes;
  changes.sync = true;
  next_job_id_ = state.next_job_id;
  // A fresh grace period for every live node: nobody is declared dead for the scheduler's own
  // absence.
  for (uint64_t id : membership_.Load(std::move(state.nodes), state.next_node_id, now)) {
    changes.nodes.insert(id);
  }
  for (v1::JobInfo& info : state.jobs) {
    uint64_t number = 0;
    if (!ParseJobNumber(info.job_id(), &number)) {
      return absl::DataLossError(absl::StrCat("state dir ", options_.state_dir, ": bad job id '",
                                              Printable(info.job_id(), 64), "'"));
    }
    next_job_id_ = std::max(next_job_id_, number + 1);
    Job& job = jobs_[number];
    job.number = number;
    job.info = std::move(info);
    auto events = state.events.find(job.info.job_id());
    if (events != state.events.end()) {
      for (auto& [seq, event] : events->second) {
        job.events.emplace_back(seq, std::move(event));
        job.next_event_seq = seq + 1;
      }
    }
    auto checkpoints = state.checkpoints.find(job.info.job_id());
    job.checkpoints = CheckpointCatalog(job.info.job_id(), checkpoints == state.checkpoints.end()
                                                               ? CheckpointCatalog::Entries()
                                                               : std::move(checkpoints->second));
    if (!IsFinished(job.info.state())) AddEvent(&job, "scheduler restarted", now, &changes);
  }
  LOG(INFO) << "scheduler state from " << options_.state_dir << ": " << membership_.nodes().size()
            << " nodes, " << jobs_.size() << " jobs; checkpoints under " << checkpoint_root_;
  Schedule(now, &changes);
  return Commit(&changes);
}

absl::Status Scheduler::Commit(Changes* changes) {
  for (uint64_t id : changes->nodes) changes->batch.PutNode(membership_.nodes().at(id));
  for (uint64_t number : changes->jobs) changes->batch.PutJob(jobs_.at(number).info);
  for (const auto& [number, id] : changes->checkpoints) {
    changes->batch.PutCheckpoint(jobs_.at(number).checkpoints.at(id));
  }
  if (changes->counters) {
    changes->batch.PutNextNodeId(membership_.next_node_id());
    changes->batch.PutNextJobId(next_job_id_);
  }
  // On failure the change stays in memory (it is written again with the object's next change)
  // and the caller gets the error.
  absl::Status s = store_->Write(changes->batch, changes->sync);
  if (!s.ok()) LOG(ERROR) << "cannot persist the scheduler state: " << s;
  if (s.ok()) SendDrops(changes);
  // Every change of a node's or a job's state is a synced write.
  if (changes->sync) UpdateMetrics();
  return s;
}

void Scheduler::UpdateMetrics() {
  if (metrics_ == nullptr) return;
  std::map<std::pair<v1::NodeRole, v1::NodeState>, int64_t> nodes;
  for (v1::NodeRole role : {v1::SERVER, v1::WORKER}) {
    for (v1::NodeState state : {v1::ALIVE, v1::DEAD}) nodes[{role, state}] = 0;
  }
  for (const auto& [id, node] : membership_.nodes()) ++nodes[{node.role(), node.state()}];
  for (const auto& [key, count] : nodes) metrics_->SetNodeCount(key.first, key.second, count);
  std::map<v1::JobState, int64_t> jobs;
  for (v1::JobState state : {v1::PENDING, v1::RUNNING, v1::SUCCEEDED, v1::FAILED, v1::CANCELLED}) {
    jobs[state] = 0;
  }
  std::set<std::string> running;
  for (const auto& [number, job] : jobs_) {
    ++jobs[job.info.state()];
    if (job.info.state() != v1::RUNNING) continue;
    running.insert(job.info.job_id());
    metrics_->SetJobEpochs(job.info.job_id(), job.info.shard_epoch(), job.info.membership_epoch());
  }
  for (const auto& [state, count] : jobs) metrics_->SetJobCount(state, count);
  metrics_->RemoveJobsExcept(running);
}

Scheduler::Job* Scheduler::FindJob(const std::string& job_id) {
  uint64_t number = 0;
  if (!ParseJobNumber(job_id, &number)) return nullptr;
  auto it = jobs_.find(number);
  return it == jobs_.end() ? nullptr : &it->second;
}

const Scheduler::Job* Scheduler::FindJob(const std::string& job_id) const {
  uint64_t number = 0;
  if (!ParseJobNumber(job_id, &number)) return nullptr;
  auto it = jobs_.find(number);
  return it == jobs_.end() ? nullptr : &it->second;
}

v1::JobInfo Scheduler::JobWithEvents(const Job& job) const {
  v1::JobInfo info = job.info;
  for (const auto& [seq, event] : job.events) *info.add_events() = event;
  return info;
}

void Scheduler::AddEvent(Job* job, const std::string& message, absl::Time now, Changes* changes) {
  v1::JobEvent event;
  event.set_time_unix_ms(ToMs(now));
  event.set_message(message);
  const uint64_t seq = job->next_event_seq++;
  changes->batch.PutEvent(job->info.job_id(), seq, event);
  job->events.emplace_back(seq, std::move(event));
  while (job->events.size() > static_cast<size_t>(options_.max_events_per_job)) {
    changes->batch.DeleteEvent(job->info.job_id(), job->events.front().first);
    job->events.pop_front();
  }
}

void Scheduler::SetReason(Job* job, const std::string& reason, Changes* changes) {
  if (job->info.reason() == reason) return;
  job->info.set_reason(reason);
  changes->jobs.insert(job->number);
}

void Scheduler::MaybeSucceed(Job* job, absl::Time now, Changes* changes) {
  if (job->info.worker_ids().empty()) return;
  for (uint32_t worker_id : job->info.worker_ids()) {
    if (IndexOf(job->info.finished_worker_ids(), worker_id) < 0) return;
  }
  // Rank 0 speaks for the job; if the worker whose report stands died before its final one,
  // the lowest-ranked survivor's final report (its own end, with its final evaluation) does.
  if (!job->info.progress().finished()) {
    for (uint32_t worker_id : job->info.worker_ids()) {
      auto it = job->final_reports.find(worker_id);
      if (it == job->final_reports.end()) continue;
      *job->info.mutable_progress() = it->second;
      AddEvent(job,
               absl::StrCat("worker ", worker_id,
                            "'s final report stands for the job (the "
                            "worker of rank 0 died before its own)"),
               now, changes);
      if (metrics_ != nullptr) {
        metrics_->SetJobProgress(job->info.job_id(), it->second.clock(),
                                 it->second.test_accuracy());
      }
      break;
    }
  }
  EndJob(job, v1::SUCCEEDED, "every worker finished", now, changes);
}

void Scheduler::EndJob(Job* job, v1::JobState state, const std::string& reason, absl::Time now,
                       Changes* changes) {
  v1::JobInfo& info = job->info;
  info.set_state(state);
  info.set_reason(reason);
  info.set_end_time_unix_ms(ToMs(now));
  job->deaths.clear();
  changes->jobs.insert(job->number);
  changes->sync = true;
  for (uint64_t id : info.worker_nodes()) {
    v1::NodeInfo* node = membership_.FindMutable(id);
    if (node != nullptr && node->job_id() == info.job_id()) {
      node->clear_job_id();
      changes->nodes.insert(id);
    }
  }
  const std::string state_name = absl::AsciiStrToLower(v1::JobState_Name(state));
  AddEvent(job, absl::StrCat(state_name, ": ", reason), now, changes);
  LOG(INFO) << "job " << info.job_id() << " " << state_name << ": " << reason;
  DropOnServers(*job, changes);
}

absl::StatusOr<std::string> Scheduler::SubmitJob(v1::JobSpec spec) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_();
  Changes changes;
  PS_ASSIGN_OR_RETURN(std::string job_id, SubmitLocked(std::move(spec), now, &changes));
  Schedule(now, &changes);
  PS_RETURN_IF_ERROR(Commit(&changes));
  return job_id;
}

absl::StatusOr<std::string> Scheduler::SubmitLocked(v1::JobSpec spec, absl::Time now,
                                                    Changes* changes_ptr) {
  Changes& changes = *changes_ptr;
  PS_RETURN_IF_ERROR(CheckPendingRoom());
  // Also for a job submitted again by RestoreJob: the limits may have changed since.
  PS_RETURN_IF_ERROR(NormalizeJobSpec(&spec, job_limits_));
  if (spec.has_from_checkpoint()) {
    PS_ASSIGN_OR_RETURN(const v1::CheckpointInfo* from, ResolveFromCheckpoint(spec));
    spec.mutable_from_checkpoint()->set_checkpoint_id(from->checkpoint_id());
  }
  changes.sync = true;
  changes.counters = true;
  const uint64_t number = next_job_id_++;
  Job& job = jobs_[number];
  job.number = number;
  job.info.set_job_id(absl::StrCat(kJobIdPrefix, number));
  job.checkpoints = CheckpointCatalog(job.info.job_id());
  AssignTableIds(job.info.job_id(), FirstTableIdOf(job.info.job_id()), &spec);
  job.info.set_state(v1::PENDING);
  job.info.set_submit_time_unix_ms(ToMs(now));
  *job.info.mutable_spec() = std::move(spec);
  changes.jobs.insert(number);
  const v1::JobSpec& s = job.info.spec();
  const std::string summary = absl::StrCat(
      s.has_program() ? absl::StrCat("program ", Printable(s.program().argv(0), 64)) : s.model(),
      ", ", Plural(s.num_workers(), "worker"), ", ",
      s.num_servers() == 0 ? "every live server" : Plural(s.num_servers(), "server"));
  AddEvent(&job, absl::StrCat("submitted: ", summary), now, &changes);
  if (s.has_from_checkpoint()) {
    AddEvent(&job,
             absl::StrCat("starts from checkpoint ", s.from_checkpoint().checkpoint_id(), " of ",
                          s.from_checkpoint().job_id()),
             now, &changes);
  }
  LOG(INFO) << "job " << job.info.job_id() << " submitted"
            << (s.name().empty() ? "" : " (" + s.name() + ")") << ": " << summary;
  return job.info.job_id();
}

absl::StatusOr<v1::GetJobLogsResponse> Scheduler::GetJobLogs(
    const v1::GetJobLogsRequest& req) const {
  PS_RETURN_IF_ERROR(CheckJobId(req.job_id()));
  absl::ReaderMutexLock lock(&mu_);
  const Job* job = FindJob(req.job_id());
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", req.job_id(), "'"));
  if (!job->info.spec().has_program()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", req.job_id(), " runs the zoo model ", job->info.spec().model(),
                     "; only program jobs have program logs (see the worker daemons' logs)"));
  }
  v1::GetJobLogsResponse resp;
  for (const auto& [worker_id, log] : job->logs) {
    if (req.has_worker_id() && req.worker_id() != worker_id) continue;
    *resp.add_logs() = log;
  }
  if (req.has_worker_id() && resp.logs().empty()) {
    return absl::NotFoundError(
        absl::StrCat("job ", req.job_id(), " has no log from worker ", req.worker_id(), " (yet)"));
  }
  return resp;
}

absl::StatusOr<v1::JobInfo> Scheduler::GetJob(const std::string& job_id) const {
  PS_RETURN_IF_ERROR(CheckJobId(job_id));
  absl::ReaderMutexLock lock(&mu_);
  const Job* job = FindJob(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  return JobWithEvents(*job);
}

std::vector<v1::JobInfo> Scheduler::ListJobs() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<v1::JobInfo> jobs;
  jobs.reserve(jobs_.size());
  for (const auto& [number, job] : jobs_) jobs.push_back(job.info);
  return jobs;
}

absl::StatusOr<v1::JobInfo> Scheduler::CancelJob(const std::string& job_id) {
  PS_RETURN_IF_ERROR(CheckJobId(job_id));
  absl::MutexLock lock(&mu_);
  Job* job = FindJob(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  if (IsFinished(job->info.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " already ended: ", v1::JobState_Name(job->info.state())));
  }
  const absl::Time now = clock_();
  Changes changes;
  EndJob(job, v1::CANCELLED, "cancelled by user", now, &changes);
  Schedule(now, &changes);
  PS_RETURN_IF_ERROR(Commit(&changes));
  return JobWithEvents(*job);
}

std::vector<v1::NodeInfo> Scheduler::ListNodes() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<v1::NodeInfo> nodes;
  nodes.reserve(membership_.nodes().size());
  for (const auto& [id, node] : membership_.nodes()) {
    nodes.push_back(node);
    nodes.back().clear_node_secret();  // the scheduler's own
  }
  return nodes;
}

}  // namespace ps
