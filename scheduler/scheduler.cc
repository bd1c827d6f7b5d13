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

namespace ps {
namespace {

constexpr char kJobIdPrefix[] = "job-";

int64_t ToMs(absl::Time t) { return absl::ToUnixMillis(t); }

bool IsFinished(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

std::string Plural(int64_t n, absl::string_view word) {
  return absl::StrCat(n, " ", word, n == 1 ? "" : "s");
}

std::string RoleName(v1::NodeRole role) { return absl::AsciiStrToLower(v1::NodeRole_Name(role)); }

}  // namespace

namespace {

bool ParseJobNumber(absl::string_view job_id, uint64_t* number) {
  return absl::ConsumePrefix(&job_id, kJobIdPrefix) && absl::SimpleAtoi(job_id, number) &&
         *number > 0;
}

template <typename Field, typename T>
int IndexOf(const Field& field, T value) {
  auto it = std::find(field.begin(), field.end(), value);
  return it == field.end() ? -1 : static_cast<int>(it - field.begin());
}

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

}  // namespace

Scheduler::Scheduler(const SchedulerOptions& options, Clock clock,
                     std::unique_ptr<StateStore> store, SchedulerMetrics* metrics,
                     JobDropper* dropper)
    : options_(options),
      clock_(std::move(clock)),
      store_(std::move(store)),
      metrics_(metrics),
      dropper_(dropper) {
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
  next_node_id_ = state.next_node_id;
  next_job_id_ = state.next_job_id;
  for (v1::NodeInfo& node : state.nodes) {
    // A fresh grace period: nobody is declared dead for the scheduler's own absence.
    if (node.state() == v1::ALIVE) {
      node.set_last_heartbeat_unix_ms(ToMs(now));
      changes.nodes.insert(node.node_id());
    }
    next_node_id_ = std::max(next_node_id_, node.node_id() + 1);
    nodes_[node.node_id()] = std::move(node);
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
    if (checkpoints != state.checkpoints.end()) job.checkpoints = std::move(checkpoints->second);
    if (!IsFinished(job.info.state())) AddEvent(&job, "scheduler restarted", now, &changes);
  }
  LOG(INFO) << "scheduler state from " << options_.state_dir << ": " << nodes_.size() << " nodes, "
            << jobs_.size() << " jobs; checkpoints under " << checkpoint_root_;
  Schedule(now, &changes);
  return Commit(&changes);
}

absl::Status Scheduler::Commit(Changes* changes) {
  for (uint64_t id : changes->nodes) changes->batch.PutNode(nodes_.at(id));
  for (uint64_t number : changes->jobs) changes->batch.PutJob(jobs_.at(number).info);
  for (const auto& [number, id] : changes->checkpoints) {
    changes->batch.PutCheckpoint(jobs_.at(number).checkpoints.at(id));
  }
  if (changes->counters) {
    changes->batch.PutNextNodeId(next_node_id_);
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
  for (const auto& [id, node] : nodes_) ++nodes[{node.role(), node.state()}];
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

absl::StatusOr<v1::RegisterResponse> Scheduler::Register(const v1::RegisterRequest& req) {
  PS_RETURN_IF_ERROR(CheckRegisterRequest(req));
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_();
  Changes changes;
  PS_RETURN_IF_ERROR(CheckRegistrationRate(now));
  absl::StatusOr<std::vector<uint64_t>> replaced = ServersToReplace(req, now);
  if (!replaced.ok()) return replaced.status();
  last_heard_ = now;
  PS_RETURN_IF_ERROR(MakeRoomForNode(req, &changes));
  changes.sync = true;
  changes.counters = true;
  const uint64_t id = next_node_id_++;
  v1::NodeInfo& node = nodes_[id];
  node.set_node_id(id);
  node.set_role(req.role());
  node.set_state(v1::ALIVE);
  node.set_address(req.address());
  node.set_hostname(req.hostname());
  node.set_pid(req.pid());
  node.set_metrics_address(req.metrics_address());
  node.set_version(req.version());
  node.set_last_heartbeat_unix_ms(ToMs(now));
  node.set_registered_unix_ms(ToMs(now));
  node.set_node_secret(NewSecret());
  changes.nodes.insert(id);
  // The new server is registered first, so that it can take the old one's slots as a spare.
  for (uint64_t old : *replaced) {
    MarkDead(&nodes_.at(old), "a new server registered at its address", now, &changes);
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
  auto it = nodes_.find(req.node_id());
  if (it == nodes_.end() || it->second.state() != v1::ALIVE) {
    resp.set_reregister(true);
    return resp;
  }
  v1::NodeInfo& node = it->second;
  // Only the daemon that registered as this node may speak for it (nodes registered before
  // secrets existed have none).
  if (!node.node_secret().empty() && !ConstantTimeEquals(req.node_secret(), node.node_secret())) {
    return absl::PermissionDeniedError(
        absl::StrCat("heartbeat for node ", req.node_id(),
                     ": node_secret does not match (only the daemon that registered as that node "
                     "may heartbeat for it)"));
  }
  const absl::Time now = clock_();
  Changes changes;
  last_heard_ = now;
  if (cut_off_) {
    // The first heartbeat after the scheduler heard nobody: it was the one cut off. Every node
    // gets a fresh grace period, as after a scheduler restart.
    cut_off_ = false;
    LOG(WARNING) << "scheduler: heartbeats again after "
                 << absl::FormatDuration(now - cut_off_since_)
                 << " of silence from every node; nobody was declared dead meanwhile";
    for (auto& [id, other] : nodes_) {
      if (other.state() == v1::ALIVE) {
        other.set_last_heartbeat_unix_ms(ToMs(now));
        changes.nodes.insert(id);
      }
    }
  }
  if (metrics_ != nullptr) {
    metrics_->ObserveHeartbeatLag(now - absl::FromUnixMillis(node.last_heartbeat_unix_ms()));
  }
  node.set_last_heartbeat_unix_ms(ToMs(now));
  changes.nodes.insert(node.node_id());
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
    auto it = nodes_.find(id);
    if (it != nodes_.end() && it->second.job_id() == info.job_id()) {
      it->second.clear_job_id();
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
  nodes.reserve(nodes_.size());
  for (const auto& [id, node] : nodes_) {
    nodes.push_back(node);
    nodes.back().clear_node_secret();  // the scheduler's own
  }
  return nodes;
}

absl::Status Scheduler::Tick() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_();
  Changes changes;
  const std::string why =
      absl::StrCat("no heartbeat for ", absl::FormatDuration(options_.heartbeat_timeout));
  // Every node that timed out is dead before any job recovers: a server that died in the same
  // tick must not be chosen to take another one's slots.
  std::vector<v1::NodeInfo*> dead;
  int alive = 0;
  for (auto& [id, node] : nodes_) {
    if (node.state() != v1::ALIVE) continue;
    ++alive;
    if (now - absl::FromUnixMillis(node.last_heartbeat_unix_ms()) > options_.heartbeat_timeout) {
      dead.push_back(&node);
    }
  }
  // Nobody of several live nodes heard for two heartbeat intervals (at most half the timeout):
  // the scheduler is the one
  // cut off (a partition, a frozen process), not all of them dead. Heartbeats are staggered,
  // so waiting for all to time out together would declare the first ones dead one by one.
  // Declare nobody dead until a heartbeat arrives, which then gives everyone a fresh grace
  // period.
  if (options_.suspect_own_partition && alive >= 2 && !dead.empty() &&
      last_heard_ != absl::InfinitePast() &&
      now - last_heard_ >
          std::min(2 * options_.heartbeat_interval, options_.heartbeat_timeout / 2)) {
    if (!cut_off_) {
      cut_off_ = true;
      cut_off_since_ = last_heard_;
      LOG(WARNING) << "scheduler: no heartbeat from any of the " << alive << " live nodes for "
                   << absl::FormatDuration(now - last_heard_)
                   << ": this scheduler is probably cut off from them; declaring nobody dead "
                      "until they are heard again";
    }
    dead.clear();
  }
  for (v1::NodeInfo* node : dead) node->set_state(v1::DEAD);
  for (v1::NodeInfo* node : dead) MarkDead(node, why, now, &changes);
  ForgetDeadNodes(now, &changes);
  Schedule(now, &changes);
  return Commit(&changes);
}

void Scheduler::MarkDead(v1::NodeInfo* node, const std::string& why, absl::Time now,
                         Changes* changes) {
  node->set_state(v1::DEAD);
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

std::vector<uint64_t> Scheduler::IdleWorkers() const {
  std::vector<uint64_t> idle;  // ascending node ids (nodes_ is ordered)
  for (const auto& [id, node] : nodes_) {
    if (node.role() == v1::WORKER && node.state() == v1::ALIVE && node.job_id().empty()) {
      idle.push_back(id);
    }
  }
  return idle;
}

std::map<uint64_t, int> Scheduler::ServerLoad() const {
  std::map<uint64_t, int> load;
  for (const auto& [number, job] : jobs_) {
    if (job.info.state() != v1::RUNNING) continue;
    for (uint64_t id : job.info.server_nodes()) ++load[id];
  }
  return load;
}

std::vector<uint64_t> Scheduler::AliveServers() const {
  std::vector<uint64_t> servers;
  for (const auto& [id, node] : nodes_) {
    // A draining server takes no new job and no other's slots.
    if (node.role() == v1::SERVER && node.state() == v1::ALIVE && !node.draining()) {
      servers.push_back(id);
    }
  }
  return servers;
}

void Scheduler::Schedule(absl::Time now, Changes* changes) {
  std::vector<uint64_t> idle = IdleWorkers();
  // Running jobs that lost workers come first: they are older than any pending job.
  for (auto& [number, job] : jobs_) {
    if (job.info.state() == v1::RUNNING) AddWorkers(&job, &idle, now, changes);
  }
  for (auto& [number, job] : jobs_) {
    if (job.info.state() == v1::PENDING) TryStart(&job, &idle, now, changes);
  }
  // What the jobs still pending wait for, counted after this round's placements.
  const size_t servers = AliveServers().size();
  for (auto& [number, job] : jobs_) {
    if (job.info.state() != v1::PENDING) continue;
    const v1::JobSpec& spec = job.info.spec();
    SetReason(&job,
              absl::StrCat("waiting for ", Plural(spec.num_workers(), "idle worker"), " (",
                           idle.size(), " available) and ",
                           spec.num_servers() == 0 ? "at least 1 server"
                                                   : Plural(spec.num_servers(), "server"),
                           " (", servers, " available)"),
              changes);
  }
}

void Scheduler::AddWorkers(Job* job, std::vector<uint64_t>* idle, absl::Time now,
                           Changes* changes) {
  v1::JobInfo& info = job->info;
  const int wanted = info.spec().num_workers();
  while (!idle->empty() && info.worker_ids_size() < wanted) {
    const uint64_t id = idle->front();
    idle->erase(idle->begin());
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
    nodes_[id].set_job_id(info.job_id());
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

bool Scheduler::TryStart(Job* job, std::vector<uint64_t>* idle, absl::Time now, Changes* changes) {
  v1::JobInfo& info = job->info;
  const v1::JobSpec& spec = info.spec();
  const size_t num_workers = spec.num_workers();
  std::vector<uint64_t> servers = AliveServers();
  const size_t num_servers = std::max(1, spec.num_servers());
  if (idle->size() < num_workers || servers.size() < num_servers) return false;
  if (spec.num_servers() > 0) {  // the least loaded: fewest running jobs, then lowest id
    std::map<uint64_t, int> load = ServerLoad();
    std::stable_sort(servers.begin(), servers.end(),
                     [&load](uint64_t a, uint64_t b) { return load[a] < load[b]; });
    servers.resize(num_servers);
    std::sort(servers.begin(), servers.end());
  }
  const v1::CheckpointInfo* from = nullptr;
  if (spec.has_from_checkpoint()) {
    auto resolved = ResolveFromCheckpoint(spec);
    if (!resolved.ok()) {
      // Found corrupt since the submission: the job fails at once, placed nowhere.
      EndJob(job, v1::FAILED, std::string(resolved.status().message()), now, changes);
      return true;
    }
    from = *resolved;
  }
  std::vector<std::string> placement;
  for (uint64_t id : servers) {
    info.add_server_nodes(id);
    info.add_server_addresses(nodes_[id].address());
    placement.push_back(absl::StrCat("node ", id, " (", nodes_[id].address(), ")"));
  }
  info.set_shard_epoch(1);
  if (from != nullptr) {
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
  for (size_t i = 0; i < num_workers; ++i) {
    const uint64_t id = (*idle)[i];
    info.add_worker_nodes(id);
    info.add_worker_ids(i);
    nodes_[id].set_job_id(info.job_id());
    changes->nodes.insert(id);
    workers.push_back(absl::StrCat("node ", id, " as worker ", i));
  }
  idle->erase(idle->begin(), idle->begin() + num_workers);
  info.set_next_worker_id(num_workers);
  info.set_membership_epoch(1);
  info.set_state(v1::RUNNING);
  info.set_reason("");
  info.set_start_time_unix_ms(ToMs(now));
  changes->jobs.insert(job->number);
  changes->sync = true;
  const std::string event = absl::StrCat("started: servers ", absl::StrJoin(placement, ", "),
                                         "; workers ", absl::StrJoin(workers, ", "));
  AddEvent(job, event, now, changes);
  LOG(INFO) << "job " << info.job_id() << " " << event;
  CheckSharedCheckpointRoot(job, now, changes);
  return true;
}

void Scheduler::CheckSharedCheckpointRoot(Job* job, absl::Time now, Changes* changes) {
  const std::string root = CheckpointRoot(job->info.spec());
  std::set<std::string> hosts;
  for (uint64_t id : job->info.server_nodes()) hosts.insert(nodes_[id].hostname());
  for (uint64_t id : job->info.server_nodes()) {
    const v1::NodeInfo& server = nodes_[id];
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
  if (info.has_restore() && info.restore().shard_epoch() == info.shard_epoch()) {
    *a.mutable_restore() =
        SignedRestoreOrder(options_.authorizer.get(), a.job_id(), info.restore());
  }
  a.set_checkpoint_requests(info.checkpoint_requests());
  return a;
}

}  // namespace ps
