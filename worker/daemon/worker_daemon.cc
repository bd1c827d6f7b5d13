#include "worker/daemon/worker_daemon.h"

#include <glog/logging.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/job_admin.h"
#include "client/job_run.h"
#include "common/grpc_status.h"
#include "common/scheduler_link.h"
#include "common/security.h"
#include "common/status_macros.h"
#include "worker/daemon/data_leaser.h"
#include "worker/daemon/job_checkpointer.h"
#include "worker/daemon/model_zoo.h"
#include "worker/daemon/params_digest.h"

namespace ps {
namespace {

void FillProgress(const JobProgress& p, v1::WorkerProgress* out) {
  out->set_clock(p.clock);
  out->set_total_clocks(p.total_clocks);
  out->set_epoch(p.epoch);
  out->set_loss(p.loss);
  out->set_accuracy(p.accuracy);
  out->set_test_loss(p.test_loss);
  out->set_test_accuracy(p.test_accuracy);
  out->set_samples_per_second(p.samples_per_second);
  out->set_finished(p.finished);
}

std::string ProgressLine(const std::string& who, const JobProgress& p) {
  std::string line =
      absl::StrFormat("%s epoch %d step %d/%d loss %.4f acc %.2f%% %.0f samples/s", who, p.epoch,
                      p.clock, p.total_clocks, p.loss, 100 * p.accuracy, p.samples_per_second);
  if (p.test_accuracy >= 0) {
    absl::StrAppendFormat(&line, "; test loss %.4f acc %.2f%%", p.test_loss, 100 * p.test_accuracy);
  }
  absl::StrAppend(&line, "; ", FormatTimeSplit(p));
  return line;
}

}  // namespace

WorkerDaemon::WorkerDaemon(WorkerDaemonOptions options, WorkerMetrics* metrics,
                           HealthServer* health)
    : options_(std::move(options)), metrics_(metrics), health_(health) {
  if (options_.program_uids.has_value()) {
    program_users_ = std::make_unique<ProgramUsers>(*options_.program_uids);
  }
}

std::string WorkerDaemon::KeyOf(const v1::WorkerAssignment& a) {
  return absl::StrCat(a.job_id(), "/", a.worker_id());
}

void WorkerDaemon::Stop() {
  absl::MutexLock l(&mu_);
  stopping_ = true;
  if (health_ != nullptr) health_->SetServing(false);
  if (runner_ != nullptr) runner_->Cancel();
}

void WorkerDaemon::FillHeartbeat(v1::HeartbeatRequest* req) {
  absl::MutexLock l(&mu_);
  v1::WorkerProgress* p = req->mutable_progress();
  if (runner_ != nullptr && assignment_.has_value()) {
    FillProgress(runner_->progress(), p);
    p->set_job_id(assignment_->job_id());
    p->set_membership_epoch(running_epoch_);
    p->set_shard_epoch(running_shard_epoch_);
    p->set_finished(false);  // finished is reported once Run() returned
  } else if (program_ != nullptr && assignment_.has_value()) {
    FillProgramProgress(p);
  } else if (!done_key_.empty() && assignment_.has_value() && KeyOf(*assignment_) == done_key_) {
    *p = done_report_;
  } else {
    req->clear_progress();
  }
}

void WorkerDaemon::ApplyMembership(RpcClient* client, const v1::ConsistencySpec& consistency,
                                   const v1::WorkerAssignment& a) {
  // No lock held: ConfigureJob may take long (a slow server), and heartbeats must go on. The
  // client stays alive: RunJob waits for applying_ to clear before it destroys the client.
  std::vector<uint32_t> workers(a.worker_ids().begin(), a.worker_ids().end());
  absl::Status s = JobAdmin(*client).ConfigureJob(consistency, workers, a.membership_epoch());
  absl::MutexLock l(&mu_);
  applying_ = false;
  if (!s.ok() && s.code() != absl::StatusCode::kFailedPrecondition) {
    LOG(WARNING) << a.job_id() << ": telling the servers membership epoch " << a.membership_epoch()
                 << " failed: " << s << " (retrying on the next order)";
    return;
  }
  // FAILED_PRECONDITION: another worker told them a newer epoch already.
  if ((runner_ == nullptr && program_ == nullptr) || KeyOf(a) != running_key_) return;
  running_epoch_ = std::max(running_epoch_, a.membership_epoch());
  if (runner_ != nullptr) runner_->SetShard(a.rank(), static_cast<uint32_t>(a.worker_ids_size()));
  LOG(INFO) << a.job_id() << ": membership epoch " << a.membership_epoch() << ", "
            << a.worker_ids_size() << " workers; this worker is rank " << a.rank();
}

bool WorkerDaemon::TakeMembershipOrder(MembershipOrder* order) {
  if ((runner_ == nullptr && program_ == nullptr) || client_ == nullptr || applying_ || restart_ ||
      !assignment_.has_value() || KeyOf(*assignment_) != running_key_ ||
      assignment_->membership_epoch() <= running_epoch_) {
    return false;
  }
  applying_ = true;
  order->client = client_;
  order->consistency = consistency_;
  order->assignment = *assignment_;
  return true;
}

void WorkerDaemon::OnHeartbeat(const v1::HeartbeatResponse& resp, bool reregistered) {
  MembershipOrder membership;
  bool apply = false;
  {
    absl::MutexLock l(&mu_);
    apply = HandleOrders(resp, reregistered, &membership);
  }
  if (apply) ApplyMembership(membership.client, membership.consistency, membership.assignment);
}

bool WorkerDaemon::HandleOrders(const v1::HeartbeatResponse& resp, bool reregistered,
                                MembershipOrder* membership) {
  if (health_ != nullptr && !stopping_) health_->SetServing(true);  // registered
  std::optional<v1::WorkerAssignment> order;
  if (resp.has_assignment() && !resp.assignment().job_id().empty()) order = resp.assignment();
  if (runner_ != nullptr) {
    const bool withdrawn = reregistered || !order.has_value() || KeyOf(*order) != running_key_;
    if (withdrawn) {
      LOG(WARNING) << running_key_ << ": the scheduler withdrew the assignment"
                   << (reregistered ? " (this node was declared dead)" : "") << "; stopping";
      runner_->Cancel();
    }
  }
  assignment_ = std::move(order);
  if (runner_ != nullptr && !restart_ && assignment_.has_value() &&
      KeyOf(*assignment_) == running_key_ && assignment_->shard_epoch() > running_shard_epoch_) {
    LOG(WARNING) << running_key_ << ": new shard map (epoch " << assignment_->shard_epoch()
                 << (assignment_->has_restore() ? ": " + assignment_->restore().reason() : "")
                 << "); stopping this run to restart on it";
    restart_ = true;
    runner_->Cancel();
  }
  return TakeMembershipOrder(membership);
}

void WorkerDaemon::Run() {
  SchedulerLinkOptions lo;
  lo.scheduler = options_.scheduler;
  lo.role = v1::WORKER;
  lo.hostname = options_.hostname;
  lo.pid = options_.pid;
  lo.metrics_address = options_.metrics_address;
  SchedulerLink link(
      lo, [this](v1::HeartbeatRequest* req) { FillHeartbeat(req); },
      [this](const v1::HeartbeatResponse& resp, bool reregistered) {
        OnHeartbeat(resp, reregistered);
      });
  scheduler_ = v1::Scheduler::NewStub(DialChannel(options_.scheduler));
  link_ = &link;
  link.Start();
  LOG(INFO) << "worker daemon: waiting for jobs from scheduler " << options_.scheduler;
  while (true) {
    v1::WorkerAssignment a;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopping_ || (assignment_.has_value() && KeyOf(*assignment_) != done_key_);
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      a = *assignment_;
    }
    const std::string key = KeyOf(a);
    LOG(INFO) << "assigned " << a.job_id() << " ("
              << (a.spec().has_program() ? "program " + a.spec().program().argv(0)
                                         : "model " + a.spec().model())
              << ") as worker " << a.worker_id() << ", rank " << a.rank() << " of "
              << a.worker_ids_size();
    absl::Status s = a.spec().has_program() ? RunProgramJob(a) : RunJob(a);
    absl::MutexLock l(&mu_);
    done_key_ = key;
    done_report_.set_job_id(a.job_id());
    if (s.ok()) {
      done_report_.set_finished(true);
      LOG(INFO) << key << ": finished";
    } else if (s.code() == absl::StatusCode::kCancelled) {
      LOG(INFO) << key << ": stopped";
    } else {
      done_report_.set_error(std::string(s.message()));
      LOG(ERROR) << key << ": failed: " << s;
    }
  }
}

absl::StatusOr<v1::WorkerAssignment> WorkerDaemon::LatestOrder(const v1::WorkerAssignment& a) {
  absl::MutexLock l(&mu_);
  if (stopping_ || !assignment_.has_value() || KeyOf(*assignment_) != KeyOf(a)) {
    return absl::CancelledError("the assignment was withdrawn while starting");
  }
  return *assignment_;
}

std::optional<v1::WorkerAssignment> WorkerDaemon::WaitForNewerShardMap(
    const v1::WorkerAssignment& a, absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  auto newer = [this, &a]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stopping_ || !assignment_.has_value() || KeyOf(*assignment_) != KeyOf(a) ||
           assignment_->shard_epoch() > a.shard_epoch();
  };
  mu_.AwaitWithTimeout(absl::Condition(&newer), timeout);
  if (stopping_ || !assignment_.has_value() || KeyOf(*assignment_) != KeyOf(a) ||
      assignment_->shard_epoch() <= a.shard_epoch()) {
    return std::nullopt;
  }
  return *assignment_;
}

void WorkerDaemon::ReportRestoreFailure(const v1::WorkerAssignment& a, const absl::Status& s) {
  v1::ReportRestoreFailureRequest req;
  req.set_job_id(a.job_id());
  req.set_shard_epoch(a.shard_epoch());
  req.set_checkpoint_id(a.restore().checkpoint_id());
  req.set_error(std::string(s.message()));
  req.set_code(static_cast<int32_t>(s.code()));
  const NodeIdentity node = Identity();
  req.set_node_id(node.node_id);
  req.set_node_secret(node.secret);
  v1::JobInfo ignored;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  grpc::Status rs = scheduler_->ReportRestoreFailure(&ctx, req, &ignored);
  if (!rs.ok()) {
    LOG(WARNING) << a.job_id() << ": cannot report the failed restore: " << rs.error_message();
  }
}

absl::Status WorkerDaemon::RunJob(v1::WorkerAssignment a) {
  {
    absl::MutexLock l(&mu_);
    done_report_ = v1::WorkerProgress();  // nothing of the previous job leaks into this one
  }
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, MakeModel(a.spec(), options_.compute));
  int64_t last_clock = -1;
  uint64_t requests_done = 0;
  std::optional<InFlightPush> resend;
  while (true) {
    bool restart = false;
    absl::Status s = RunOnce(a, model.get(), &last_clock, &requests_done, &restart, &resend);
    if (s.ok()) return s;
    if (!restart) {
      // A data-plane failure (most likely a dead server) is not the job's end: the scheduler
      // moves the server's slots and sends a new shard map. Only a server's answer (or its
      // absence) is; the same codes from this worker's own code (a CUDA kernel that does not
      // fit the GPU, a table of the wrong shape) will not change with a new map.
      if (!IsRecoverableRpcError(s)) return s;
      LOG(WARNING) << a.job_id() << ": " << s << "; waiting up to "
                   << absl::FormatDuration(options_.recovery_wait)
                   << " for the scheduler's new shard map";
    }
    std::optional<v1::WorkerAssignment> next =
        WaitForNewerShardMap(a, restart ? absl::ZeroDuration() : options_.recovery_wait);
    if (!next.has_value()) {
      absl::MutexLock l(&mu_);
      if (stopping_ || !assignment_.has_value() || KeyOf(*assignment_) != KeyOf(a)) {
        return absl::CancelledError("the assignment was withdrawn");
      }
      if (restart) continue;  // an order not newer after all: run again
      return s;
    }
    a = std::move(*next);
    LOG(INFO) << a.job_id() << ": shard epoch " << a.shard_epoch() << " (" << a.servers_size()
              << " servers)" << (a.has_restore() ? absl::StrCat("; ", a.restore().reason()) : "")
              << "; restarting from clock " << last_clock;
  }
}

absl::Status WorkerDaemon::RunOnce(const v1::WorkerAssignment& assignment, Model* model,
                                   int64_t* last_clock, uint64_t* requests_done, bool* restart,
                                   std::optional<InFlightPush>* resend) {
  RunStartOptions so;
  so.rpc_timeout = options_.rpc_timeout;
  so.last_clock = *last_clock;
  so.resend = resend->has_value() ? &**resend : nullptr;
  so.tables = model->Tables(assignment.job_id(), FirstTableIdOf(assignment.job_id()));
  so.latest = [this, &assignment]() { return LatestOrder(assignment); };
  so.report_restore_failure = [this](const v1::WorkerAssignment& a, const absl::Status& s) {
    ReportRestoreFailure(a, s);
  };
  so.log = [](const std::string& line) { LOG(INFO) << line; };
  auto started = StartRun(assignment, so);
  if (!started.ok()) {
    if (IsNewShardMap(started.status())) *restart = true;
    return started.status();
  }
  resend->reset();  // sent (where it had to be)
  std::unique_ptr<RpcClient> client = std::move(started->client);
  const v1::WorkerAssignment a = std::move(started->assignment);
  JobRunnerOptions ro = RunnerOptionsOf(a.spec());
  ro.slow_factor = options_.slow_factor;
  *last_clock = client->clock();
  MembershipOrder membership;
  JobRunner runner(model, client.get(), ro, metrics_);
  runner.SetShard(a.rank(), static_cast<uint32_t>(a.worker_ids_size()));
  std::unique_ptr<JobCheckpointer> checkpointer;
  if (scheduler_ != nullptr) {
    checkpointer = std::make_unique<JobCheckpointer>(
        scheduler_.get(), client.get(), a.job_id(), a.spec().checkpoint(), a.shard_epoch(),
        [this]() -> uint64_t {
          absl::MutexLock l(&mu_);
          return assignment_.has_value() ? assignment_->checkpoint_requests() : 0;
        },
        *requests_done, [this] { return Identity(); });
    runner.set_rank0_step_hook([&checkpointer](int64_t clock, int64_t previous) {
      checkpointer->MaybeCheckpoint(clock, previous);
    });
  }
  std::unique_ptr<SchedulerDataLeaser> leaser;
  if (ro.dynamic_data && scheduler_ != nullptr) {
    leaser = std::make_unique<SchedulerDataLeaser>(
        scheduler_.get(), [this] { return Identity(); }, a.job_id(), a.worker_id(),
        options_.recovery_wait, [&runner]() { return runner.cancelled(); });
    runner.set_data_leaser(leaser.get());
  }
  if (PublishRun(a, client.get(), &runner, &membership)) {
    ApplyMembership(membership.client, membership.consistency, membership.assignment);
  }
  const std::string who = absl::StrCat(a.job_id(), " worker ", a.worker_id());
  LOG(INFO) << who << ": starting at clock " << client->clock() << " of " << runner.total_clocks()
            << " (shard epoch " << a.shard_epoch() << ")";
  absl::Status s = runner.Run([&](const JobProgress& p) { LOG(INFO) << ProgressLine(who, p); },
                              [&](const JobProgress& p) { LOG(INFO) << ProgressLine(who, p); },
                              options_.log_every_steps);
  *last_clock = client->clock();
  // A sync step whose PushPull failed (a server died): its push, for the next run to re-send
  // where its slots moved. The model's buffers still hold it.
  if (!s.ok()) *resend = CopyFailedPushPull(*client);
  // Rank 0 reports a digest of the dense parameters it ended with (params_digest).
  std::optional<uint64_t> digest;
  if (s.ok() && a.rank() == 0) {
    absl::StatusOr<uint64_t> d = ParamsDigest(client.get(), so.tables);
    if (d.ok()) digest = *d;
    if (!d.ok()) LOG(WARNING) << who << ": no params_digest: " << d.status();
  }
  LOG(INFO) << who << ": " << (s.ok() ? "done" : "stopped") << ": "
            << FormatRunTotals(runner.progress());
  if (checkpointer != nullptr) {
    *requests_done = checkpointer->requests_done();
    checkpointer.reset();  // reports a write in flight; it uses the client
  }
  absl::Status ended = EndRun(a, runner, std::move(s), restart);
  if (digest.has_value()) {
    absl::MutexLock l(&mu_);
    (*done_report_.mutable_metrics())["params_digest"] = static_cast<double>(*digest);
  }
  return ended;
}

bool WorkerDaemon::PublishRun(const v1::WorkerAssignment& a, RpcClient* client, JobRunner* runner,
                              MembershipOrder* membership) {
  absl::MutexLock l(&mu_);
  client_ = client;
  runner_ = runner;
  running_key_ = KeyOf(a);
  running_epoch_ = a.membership_epoch();
  running_shard_epoch_ = a.shard_epoch();
  restart_ = false;
  consistency_ = a.spec().consistency();
  if (stopping_) runner->Cancel();
  // An order that came while this worker was starting.
  if (!assignment_.has_value() || KeyOf(*assignment_) != running_key_) {
    runner->Cancel();
  } else if (assignment_->shard_epoch() > a.shard_epoch()) {
    restart_ = true;
    runner->Cancel();
  } else {
    return TakeMembershipOrder(membership);
  }
  return false;
}

absl::Status WorkerDaemon::EndRun(const v1::WorkerAssignment& a, const JobRunner& runner,
                                  absl::Status s, bool* restart) {
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](bool* applying) { return !*applying; }, &applying_));  // ApplyMembership uses client
  *restart = restart_;
  restart_ = false;
  if (s.code() == absl::StatusCode::kCancelled && !runner.cancelled()) {
    // A CANCELLED that this worker did not ask for is a failure to report, not a stop.
    s = absl::UnavailableError(absl::StrCat("a request was cancelled: ", s.message()));
  }
  if (*restart && !s.ok()) s = absl::AbortedError("restarting on a new shard map");
  done_report_ = v1::WorkerProgress();
  FillProgress(runner.progress(), &done_report_);
  done_report_.set_shard_epoch(a.shard_epoch());
  client_ = nullptr;
  runner_ = nullptr;
  running_key_.clear();
  return s;
}

}  // namespace ps
