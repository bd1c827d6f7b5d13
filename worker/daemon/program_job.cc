// The worker daemon's side of a program job: the program as a child process (ProgramProcess),
// the WorkerAgent service it reaches on a Unix socket (its Session), progress and log tails for
// the heartbeats, membership orders and checkpoints through a data-plane client of the daemon.
#include <glog/logging.h>
#include <grpcpp/server_builder.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/printable.h"
#include "common/scheduler_link.h"
#include "common/security.h"
#include "common/status_macros.h"
#include "ps/v1/agent.grpc.pb.h"
#include "worker/daemon/agent_listener.h"
#include "worker/daemon/data_leaser.h"
#include "worker/daemon/job_checkpointer.h"
#include "worker/daemon/program_folder.h"
#include "worker/daemon/program_process.h"
#include "worker/daemon/program_users.h"
#include "worker/daemon/worker_daemon.h"

namespace ps {
namespace {

constexpr absl::Duration kPollEvery = absl::Milliseconds(100);
// A heartbeat carries the program's log tail when it changed, and at least this often (a
// restarted scheduler learns it again).
constexpr absl::Duration kLogResendEvery = absl::Seconds(10);
constexpr size_t kLogLines = 100;
constexpr size_t kReasonLines = 10;

}  // namespace

// One program job run by this worker (valid while RunProgramJob runs; guarded by the daemon's
// mu_ unless said otherwise).
struct WorkerDaemon::ProgramRun {
  std::string key;  // "job/worker id"
  std::string dir;
  std::string log_path;
  std::optional<ProgramUser> user;  // the program's own user (--program_uids), else none
  int starts = 0;
  ProgramProcess* process = nullptr;
  v1::WorkerProgress progress;  // the program's last report
  absl::Time last_report;
  std::string fatal;      // a report that ends the job (a non-finite loss)
  bool ending = false;    // the agent's waits return
  uint64_t log_sent = 0;  // lines_read() of the last tail sent
  absl::Time log_sent_at = absl::InfinitePast();
  std::vector<std::string> last_tail;  // of a program that ended

  // The daemon's own data-plane client for the latest shard map (membership orders, the
  // checkpoints' snapshots) and the checkpointer over it. `client` and `client_epoch` are
  // replaced holding both checkpoint_mu and the daemon's mu_, so either lock reads them (which
  // the annotations cannot say); the checkpointer is checkpoint_mu's alone.
  absl::Mutex checkpoint_mu;
  std::unique_ptr<RpcClient> client;
  uint64_t client_epoch = 0;
  std::unique_ptr<JobCheckpointer> checkpointer ABSL_GUARDED_BY(checkpoint_mu);
  uint64_t checkpoint_requests_done ABSL_GUARDED_BY(checkpoint_mu) = 0;
  std::shared_ptr<WorkerMetrics::Job> metrics;  // null: no metrics
};

class WorkerDaemon::Agent final : public v1::WorkerAgent::Service {
 public:
  Agent(WorkerDaemon* daemon, ProgramRun* run) : daemon_(daemon), run_(run) {}

  grpc::Status GetAssignment(grpc::ServerContext* ctx, const v1::GetAssignmentRequest* req,
                             v1::WorkerAssignment* resp) override {
    const absl::Duration wait =
        std::min(absl::Milliseconds(std::max<int64_t>(0, req->wait_ms())), absl::Seconds(60));
    absl::MutexLock l(&daemon_->mu_);
    auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(daemon_->mu_) {
      return daemon_->stopping_ || run_->ending || ctx->IsCancelled() || !Ours() ||
             daemon_->assignment_->shard_epoch() > req->min_shard_epoch();
    };
    if (wait > absl::ZeroDuration()) {
      daemon_->mu_.AwaitWithTimeout(absl::Condition(&ready), wait);
    }
    if (!Ours()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "this worker no longer runs the job (cancelled or reassigned)");
    }
    *resp = *daemon_->assignment_;
    return grpc::Status::OK;
  }

  grpc::Status Report(grpc::ServerContext*, const v1::ReportRequest* req,
                      v1::ReportResponse* resp) override {
    const v1::WorkerProgress& p = req->progress();
    bool checkpoint = false;
    {
      absl::MutexLock l(&daemon_->mu_);
      if (!Ours()) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            "this worker no longer runs the job (cancelled or reassigned)");
      }
      if (!std::isfinite(p.loss())) {
        run_->fatal = absl::StrCat("the program reported a non-finite loss (", p.loss(),
                                   ") at step ", p.clock() + 1);
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, run_->fatal);
      }
      const v1::WorkerProgress before = run_->progress;
      run_->progress = p;
      run_->progress.clear_log();
      run_->progress.clear_finished();
      run_->progress.clear_error();
      if (p.test_accuracy() < 0 && before.test_accuracy() >= 0) {
        run_->progress.set_test_accuracy(before.test_accuracy());
        run_->progress.set_test_loss(before.test_loss());
      }
      run_->last_report = absl::Now();
      if (run_->metrics != nullptr) {
        JobProgress jp;
        jp.clock = p.clock();
        jp.total_clocks = p.total_clocks();
        jp.epoch = p.epoch();
        jp.loss = p.loss();
        jp.accuracy = p.accuracy();
        jp.samples_per_second = p.samples_per_second();
        jp.test_loss = run_->progress.test_loss();
        jp.test_accuracy = run_->progress.test_accuracy();
        run_->metrics->SetProgress(jp);
        // Names as the scheduler keeps them (name characters, bounded); the first 16.
        std::map<std::string, double> metrics;
        for (const auto& [name, value] : p.metrics()) {
          if (name.size() <= 64 && CheckName("metric", name, 1).ok()) metrics[name] = value;
        }
        run_->metrics->SetProgramMetrics(metrics);
      }
      const v1::WorkerAssignment& a = *daemon_->assignment_;
      resp->set_membership_epoch(a.membership_epoch());
      resp->set_rank(a.rank());
      resp->set_num_workers(static_cast<uint32_t>(a.worker_ids_size()));
      resp->set_shard_epoch(a.shard_epoch());
      resp->set_checkpoint_requests(a.checkpoint_requests());
      checkpoint = a.rank() == 0;
    }
    if (checkpoint) {
      // Between two steps of the worker of rank 0: the snapshot is the model after p.clock()
      // steps (sync: nobody applies the next clock before this worker pushes it).
      absl::MutexLock l(&run_->checkpoint_mu);
      if (run_->checkpointer != nullptr && run_->client_epoch == p.shard_epoch()) {
        run_->checkpointer->MaybeCheckpoint(p.clock());
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status RequestCheckpoint(grpc::ServerContext*, const v1::RequestCheckpointRequest* req,
                                 v1::RequestCheckpointResponse* resp) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::RequestCheckpointRequest forward;
    {
      absl::MutexLock l(&daemon_->mu_);
      if (!Ours()) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no job");
      forward.set_job_id(daemon_->assignment_->job_id());
    }
    // Asked as this node, which runs the job: the cluster token is enough.
    const NodeIdentity node = daemon_->Identity();
    forward.set_node_id(node.node_id);
    forward.set_node_secret(node.secret);
    if (forward.node_id() == 0) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not registered with the scheduler yet");
    }
    return daemon_->scheduler_->RequestCheckpoint(&ctx, forward, resp);
  }

  grpc::Status ReportRestoreFailure(grpc::ServerContext*,
                                    const v1::ReportRestoreFailureRequest* req,
                                    v1::ReportResponse*) override {
    v1::WorkerAssignment a;
    {
      absl::MutexLock l(&daemon_->mu_);
      if (!Ours()) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no job");
      a = *daemon_->assignment_;
    }
    if (a.shard_epoch() != req->shard_epoch()) return grpc::Status::OK;  // an older order
    daemon_->ReportRestoreFailure(
        a, absl::Status(static_cast<absl::StatusCode>(req->code()), req->error()));
    return grpc::Status::OK;
  }

  grpc::Status LeaseData(grpc::ServerContext* ctx, const v1::LeaseDataRequest* req,
                         v1::LeaseDataResponse* resp) override {
    v1::WorkerAssignment a;
    {
      absl::MutexLock l(&daemon_->mu_);
      if (!Ours()) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            "this worker no longer runs the job (cancelled or reassigned)");
      }
      a = *daemon_->assignment_;
    }
    if (a.spec().data_assignment() != v1::DYNAMIC) {
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrCat("job ", a.job_id(),
                       " reads its data by STATIC assignment (its spec's data_assignment): pick "
                       "each step's examples by the session's rank and num_workers"));
    }
    if (daemon_->scheduler_ == nullptr) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no scheduler to lease from");
    }
    SchedulerDataLeaser leaser(
        daemon_->scheduler_.get(), [this] { return daemon_->Identity(); }, a.job_id(),
        a.worker_id(), daemon_->options_.recovery_wait,
        [this, ctx]() {
          absl::MutexLock l(&daemon_->mu_);
          return daemon_->stopping_ || run_->ending || ctx->IsCancelled() || !Ours();
        });
    absl::StatusOr<v1::LeaseDataResponse> lease = leaser.Lease(*req);
    if (!lease.ok()) return ToGrpcStatus(lease.status());
    *resp = *std::move(lease);
    return grpc::Status::OK;
  }

 private:
  bool Ours() const ABSL_SHARED_LOCKS_REQUIRED(daemon_->mu_) {
    return daemon_->assignment_.has_value() && KeyOf(*daemon_->assignment_) == run_->key;
  }

  WorkerDaemon* const daemon_;
  ProgramRun* const run_;
};

void WorkerDaemon::FillProgramProgress(v1::WorkerProgress* p) {
  ProgramRun& run = *program_;
  *p = run.progress;
  p->set_job_id(assignment_->job_id());
  p->set_membership_epoch(running_epoch_);
  p->set_finished(false);
  if (run.process == nullptr) return;
  const uint64_t lines = run.process->lines_read();
  const absl::Time now = absl::Now();
  if (lines != run.log_sent || now - run.log_sent_at > kLogResendEvery) {
    v1::ProgramLog* log = p->mutable_log();
    for (std::string& line : run.process->Tail(kLogLines)) log->add_lines(std::move(line));
    log->set_path(run.log_path);
    log->set_hostname(options_.hostname);
    log->set_starts(run.starts);
    run.log_sent = lines;
    run.log_sent_at = now;
  }
}

void WorkerDaemon::RefreshProgramClient(ProgramRun* run) {
  v1::WorkerAssignment a;
  {
    absl::MutexLock l(&mu_);
    if (!assignment_.has_value() || KeyOf(*assignment_) != run->key ||
        assignment_->shard_epoch() <= run->client_epoch) {
      return;
    }
    a = *assignment_;
  }
  RpcClientOptions co;
  co.servers.assign(a.servers().begin(), a.servers().end());
  co.slot_owners.assign(a.slot_owners().begin(), a.slot_owners().end());
  co.shard_epoch = std::max<uint64_t>(1, a.shard_epoch());
  co.job_id = a.job_id();
  co.worker_id = a.worker_id();
  co.rpc_timeout = options_.rpc_timeout;
  co.reject_nonfinite = false;  // the servers' --nonfinite policy decides
  auto client = RpcClient::Connect(co);
  if (!client.ok()) {
    LOG(WARNING) << run->key << ": no client for shard epoch " << a.shard_epoch() << ": "
                 << client.status();
    return;
  }
  absl::MutexLock cl(&run->checkpoint_mu);
  if (run->checkpointer != nullptr) {
    run->checkpoint_requests_done = run->checkpointer->requests_done();
    run->checkpointer.reset();  // reports a write in flight; it uses the old client
  }
  {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(
        +[](bool* applying) { return !*applying; }, &applying_));  // ApplyMembership uses it
    run->client = std::move(*client);
    run->client_epoch = a.shard_epoch();
    client_ = run->client.get();
    running_shard_epoch_ = a.shard_epoch();
  }
  if (scheduler_ != nullptr) {
    run->checkpointer = std::make_unique<JobCheckpointer>(
        scheduler_.get(), run->client.get(), a.job_id(), a.spec().checkpoint(), a.shard_epoch(),
        [this]() -> uint64_t {
          absl::MutexLock l(&mu_);
          return assignment_.has_value() ? assignment_->checkpoint_requests() : 0;
        },
        run->checkpoint_requests_done, [this] { return Identity(); });
  }
}

namespace {

// A program under a user of its own cannot read the daemon's TLS files: it gets copies in its
// run's folder, readable by its group only. The environment names them.
absl::Status CopyTlsFiles(const std::string& dir, const ProgramUser& user,
                          std::map<std::string, std::string>* env) {
  const SecurityOptions& o = ProcessSecurity()->options();
  for (const auto& [name, from, to] :
       {std::tuple<const char*, std::string, const char*>{"PS_TLS_CA", o.tls_ca_file, "tls-ca.pem"},
        {"PS_TLS_CERT", o.tls_cert_file, "tls-cert.pem"},
        {"PS_TLS_KEY", o.tls_key_file, "tls-key.pem"}}) {
    if (from.empty()) continue;
    const std::string path = absl::StrCat(dir, "/", to);
    std::error_code ec;
    std::filesystem::copy_file(from, path, std::filesystem::copy_options::overwrite_existing, ec);
    if (ec || chown(path.c_str(), geteuid(), user.gid) != 0 || chmod(path.c_str(), 0640) != 0) {
      return absl::FailedPreconditionError(absl::StrCat("cannot copy ", from,
                                                        " for the program to ", path, ": ",
                                                        ec ? ec.message() : std::strerror(errno)));
    }
    (*env)[name] = path;
  }
  return absl::OkStatus();
}

// How the program is started: its argv and environment (the job's, then what the Session reads:
// PS_AGENT, PS_JOB_ID, ...), folder and log.
ProgramProcessOptions ProgramOptions(const v1::WorkerAssignment& a, const ProgramFolder& folder,
                                     const std::string& log_path, uint64_t max_log_bytes) {
  const v1::ProgramSpec& p = a.spec().program();
  ProgramProcessOptions po;
  po.argv.assign(p.argv().begin(), p.argv().end());
  po.env.insert(p.env().begin(), p.env().end());
  po.env["PS_AGENT"] = "unix:" + folder.socket;
  po.env["PS_JOB_ID"] = a.job_id();
  // The program's credential reaches its own job's calls to the servers only.
  if (const std::string token = ProcessSecurity()->token(); !token.empty()) {
    po.env["PS_CLUSTER_TOKEN"] = JobToken(token, a.job_id());
  }
  po.env["PS_WORKER_ID"] = absl::StrCat(a.worker_id());
  po.env["PS_RANK"] = absl::StrCat(a.rank());
  po.env["PS_NUM_WORKERS"] = absl::StrCat(a.worker_ids_size());
  po.env["PS_WORK_DIR"] = folder.home;
  if (po.env.count("PYTHONUNBUFFERED") == 0) po.env["PYTHONUNBUFFERED"] = "1";
  po.working_dir = p.working_dir().empty() ? folder.home : p.working_dir();
  po.log_path = log_path;
  po.max_log_bytes = max_log_bytes;
  return po;
}

}  // namespace

absl::Status WorkerDaemon::RunProgramJob(const v1::WorkerAssignment& a) {
  ProgramRun run;
  run.key = KeyOf(a);
  if (metrics_ != nullptr) run.metrics = metrics_->ForJob(a.job_id());
  run.dir = absl::StrCat(options_.work_dir, "/", a.job_id(), "/worker-", a.worker_id());
  run.log_path = run.dir + "/program.log";
  if (program_users_ != nullptr) {
    run.user = program_users_->Next();
    // What an earlier run under this uid left (a daemon killed before it could clean up).
    KillAllProcessesOf(*run.user);
  }
  PS_ASSIGN_OR_RETURN(const ProgramFolder folder, MakeProgramFolder(run.dir, run.user));
  ProgramProcessOptions po = ProgramOptions(a, folder, run.log_path, options_.max_log_bytes);
  if (run.user.has_value()) {
    po.user = run.user;
    if (po.env.count("HOME") == 0) po.env["HOME"] = folder.home;
    PS_RETURN_IF_ERROR(CopyTlsFiles(run.dir, *run.user, &po.env));
  }
  // The agent serves the processes of this run's program only: its uid, its session.
  Agent agent(this, &run);
  grpc::ServerBuilder builder;
  builder.RegisterService(&agent);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("cannot serve the agent on ", folder.socket));
  }
  const uid_t program_uid = run.user.has_value() ? run.user->uid : geteuid();
  auto listener = AgentListener::Start(
      folder.socket, program_uid, run.user.has_value() ? run.user->gid : getegid(), server.get(),
      [this, &run, program_uid](const Peer& peer) {
        pid_t pid = 0;
        {
          // A program that calls at once may be quicker than SuperviseProgram's bookkeeping.
          absl::MutexLock l(&mu_);
          mu_.AwaitWithTimeout(
              absl::Condition(
                  +[](ProgramRun* r) { return r->process != nullptr || r->ending; }, &run),
              absl::Seconds(5));
          if (run.process != nullptr) pid = run.process->pid();
        }
        return CheckAgentPeer(peer, program_uid, pid);
      });
  if (!listener.ok()) {
    server->Shutdown();
    return listener.status();
  }
  {
    absl::MutexLock l(&mu_);
    done_report_ = v1::WorkerProgress();
    program_ = &run;
    running_key_ = run.key;
    running_epoch_ = a.membership_epoch();
    consistency_ = a.spec().consistency();
    client_ = nullptr;
  }
  RefreshProgramClient(&run);
  const absl::Status result = SuperviseProgram(a.spec().program(), &run, &po);
  {
    absl::MutexLock l(&mu_);
    run.ending = true;
  }
  listener->reset();
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  server->Wait();
  EndProgramRun(&run);
  // What the program left running outside its group (a double fork) ends with the run.
  if (run.user.has_value()) KillAllProcessesOf(*run.user);
  std::error_code ec;
  std::filesystem::remove(folder.socket, ec);
  return result;
}

absl::Status WorkerDaemon::SuperviseProgram(const v1::ProgramSpec& p, ProgramRun* run,
                                            ProgramProcessOptions* po) {
  for (int start = 1;; ++start) {
    // A first start begins a new log (a scheduler started afresh reuses job ids); restarts add
    // to it.
    po->truncate_log = start == 1;
    auto process = ProgramProcess::Start(*po);
    if (!process.ok()) return process.status();
    {
      absl::MutexLock l(&mu_);
      run->starts = start;
      run->process = process->get();
      run->last_report = absl::Now();
      run->log_sent = 0;
      run->log_sent_at = absl::InfinitePast();
    }
    LOG(INFO) << run->key << ": started program " << p.argv(0) << " (pid " << (*process)->pid()
              << ", start " << start << " of at most " << 1 + p.max_restarts()
              << "); its log: " << run->log_path;
    std::string failure;  // a failure that may be retried
    const std::optional<absl::Status> result = WatchProgram(p, run, process->get(), &failure);
    std::vector<std::string> stderr_tail = (*process)->StderrTail(kReasonLines);
    {
      absl::MutexLock l(&mu_);
      run->last_tail = (*process)->Tail(kLogLines);
      run->process = nullptr;
    }
    process->reset();
    if (result.has_value()) return *result;
    LOG(WARNING) << run->key << ": " << failure;
    if (start <= p.max_restarts()) {
      LOG(INFO) << run->key << ": starting the program again (program.max_restarts "
                << p.max_restarts() << ")";
      continue;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        failure, start > 1 ? absl::StrCat(" (start ", start, ")") : "",
        stderr_tail.empty()
            ? "; it wrote nothing to stderr"
            : absl::StrCat("; the last lines of its stderr: ", absl::StrJoin(stderr_tail, " | "))));
  }
}

std::optional<absl::Status> WorkerDaemon::WatchProgram(const v1::ProgramSpec& p, ProgramRun* run,
                                                       ProgramProcess* process,
                                                       std::string* failure) {
  const absl::Duration grace = absl::Seconds(std::max<int64_t>(1, p.stop_grace_seconds()));
  const absl::Duration progress_timeout = p.progress_timeout_seconds() > 0
                                              ? absl::Seconds(p.progress_timeout_seconds())
                                              : absl::InfiniteDuration();
  for (;;) {
    absl::SleepFor(kPollEvery);
    RefreshProgramClient(run);
    const std::optional<int> status = process->Poll();
    bool withdrawn, stopping;
    std::string fatal;
    absl::Time last_report;
    {
      absl::MutexLock l(&mu_);
      stopping = stopping_;
      withdrawn = !assignment_.has_value() || KeyOf(*assignment_) != run->key;
      fatal = run->fatal;
      last_report = run->last_report;
    }
    if (stopping || withdrawn) {
      LOG(INFO) << run->key << ": stopping the program ("
                << (stopping ? "daemon stopping" : "job withdrawn") << ")";
      process->Stop(grace);
      return absl::CancelledError("the assignment was withdrawn");
    }
    if (!fatal.empty()) {
      process->Stop(grace);
      return absl::FailedPreconditionError(fatal);
    }
    if (status.has_value()) {
      if (ProgramProcess::Succeeded(*status)) return absl::OkStatus();
      *failure = absl::StrCat("the program ", ProgramProcess::DescribeExit(*status));
      return std::nullopt;
    }
    if (absl::Now() - last_report > progress_timeout) {
      process->Stop(grace);
      *failure = absl::StrCat("the program reported no progress for ",
                              absl::FormatDuration(progress_timeout),
                              " (program.progress_timeout_seconds); it was stopped");
      return std::nullopt;
    }
  }
}

void WorkerDaemon::EndProgramRun(ProgramRun* run) {
  {
    absl::MutexLock cl(&run->checkpoint_mu);
    run->checkpointer.reset();
  }
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](bool* applying) { return !*applying; }, &applying_));  // ApplyMembership uses client_
  done_report_ = run->progress;
  done_report_.clear_error();
  v1::ProgramLog* log = done_report_.mutable_log();
  for (const std::string& line : run->last_tail) log->add_lines(line);
  log->set_path(run->log_path);
  log->set_hostname(options_.hostname);
  log->set_starts(run->starts);
  program_ = nullptr;
  client_ = nullptr;
  running_key_.clear();
}

}  // namespace ps
