#include "worker/worker_daemon.h"

#include <glog/logging.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/scheduler_link.h"
#include "common/status_macros.h"
#include "worker/model_zoo.h"

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
  return line;
}

}  // namespace

WorkerDaemon::WorkerDaemon(WorkerDaemonOptions options, WorkerMetrics* metrics,
                           HealthServer* health)
    : options_(std::move(options)), metrics_(metrics), health_(health) {}

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
    p->set_finished(false);  // finished is reported once Run() returned
  } else if (!done_key_.empty() && assignment_.has_value() && KeyOf(*assignment_) == done_key_) {
    *p = done_report_;
  } else {
    req->clear_progress();
  }
}

void WorkerDaemon::ApplyMembership(Client* client, const v1::ConsistencySpec& consistency,
                                   const v1::WorkerAssignment& a) {
  // No lock held: ConfigureJob may take long (a slow server), and heartbeats must go on. The
  // client stays alive: RunJob waits for applying_ to clear before it destroys the client.
  std::vector<uint32_t> workers(a.worker_ids().begin(), a.worker_ids().end());
  absl::Status s = client->ConfigureJob(consistency, workers, a.membership_epoch());
  absl::MutexLock l(&mu_);
  applying_ = false;
  if (!s.ok() && s.code() != absl::StatusCode::kFailedPrecondition) {
    LOG(WARNING) << a.job_id() << ": telling the servers membership epoch " << a.membership_epoch()
                 << " failed: " << s << " (retrying on the next order)";
    return;
  }
  // FAILED_PRECONDITION: another worker told them a newer epoch already.
  if (runner_ == nullptr || KeyOf(a) != running_key_) return;
  running_epoch_ = std::max(running_epoch_, a.membership_epoch());
  runner_->SetShard(a.rank(), static_cast<uint32_t>(a.worker_ids_size()));
  LOG(INFO) << a.job_id() << ": membership epoch " << a.membership_epoch() << ", "
            << a.worker_ids_size() << " workers; this worker is rank " << a.rank();
}

bool WorkerDaemon::TakeMembershipOrder(MembershipOrder* order) {
  if (runner_ == nullptr || applying_ || !assignment_.has_value() ||
      KeyOf(*assignment_) != running_key_ || assignment_->membership_epoch() <= running_epoch_) {
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
    LOG(INFO) << "assigned " << a.job_id() << " (model " << a.spec().model() << ") as worker "
              << a.worker_id() << ", rank " << a.rank() << " of " << a.worker_ids_size();
    absl::Status s = RunJob(a);
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

absl::Status WorkerDaemon::RunJob(v1::WorkerAssignment a) {
  {
    absl::MutexLock l(&mu_);
    done_report_ = v1::WorkerProgress();  // nothing of the previous job leaks into this one
  }
  ClientOptions co;
  co.servers.assign(a.servers().begin(), a.servers().end());
  co.job_id = a.job_id();
  co.worker_id = a.worker_id();
  co.rpc_timeout = options_.rpc_timeout;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(co));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, MakeModel(a.spec()));
  const JobRunnerOptions ro = RunnerOptionsOf(a.spec());
  // Tell the servers the job and its workers; a worker joining a running job learns its clock.
  // FAILED_PRECONDITION: the servers have a newer membership already (it changed while this
  // worker started); the newer order comes with the next heartbeat.
  int64_t clock = -1;
  for (int attempt = 0;; ++attempt) {
    std::vector<uint32_t> workers(a.worker_ids().begin(), a.worker_ids().end());
    absl::Status s =
        client->ConfigureJob(a.spec().consistency(), workers, a.membership_epoch(), &clock);
    if (s.ok()) break;
    if (s.code() != absl::StatusCode::kFailedPrecondition || attempt == 20) return s;
    LOG(INFO) << a.job_id() << ": " << s.message() << "; waiting for the newer order";
    absl::SleepFor(absl::Milliseconds(500));
    absl::MutexLock l(&mu_);
    if (stopping_ || !assignment_.has_value() || KeyOf(*assignment_) != KeyOf(a)) {
      return absl::CancelledError("the assignment was withdrawn while starting");
    }
    a = *assignment_;
  }
  for (const v1::TableSpec& t : model->Tables(a.job_id(), FirstTableIdOf(a.job_id()))) {
    PS_RETURN_IF_ERROR(client->CreateTable(t));
  }
  client->SetClock(std::max<int64_t>(clock, 0));  // -1 cannot happen: this worker is in the set
  MembershipOrder membership;
  bool apply_now = false;
  JobRunner runner(model.get(), client.get(), ro, metrics_);
  runner.SetShard(a.rank(), static_cast<uint32_t>(a.worker_ids_size()));
  {
    absl::MutexLock l(&mu_);
    client_ = client.get();
    runner_ = &runner;
    running_key_ = KeyOf(a);
    running_epoch_ = a.membership_epoch();
    consistency_ = a.spec().consistency();
    if (stopping_) runner.Cancel();
    // An order that came while this worker was starting.
    if (!assignment_.has_value() || KeyOf(*assignment_) != running_key_) {
      runner.Cancel();
    } else {
      apply_now = TakeMembershipOrder(&membership);
    }
  }
  if (apply_now) {
    ApplyMembership(membership.client, membership.consistency, membership.assignment);
  }
  const std::string who = absl::StrCat(a.job_id(), " worker ", a.worker_id());
  LOG(INFO) << who << ": starting at clock " << client->clock() << " of " << runner.total_clocks();
  absl::Status s = runner.Run([&](const JobProgress& p) { LOG(INFO) << ProgressLine(who, p); },
                              [&](const JobProgress& p) { LOG(INFO) << ProgressLine(who, p); },
                              options_.log_every_steps);
  if (s.code() == absl::StatusCode::kCancelled && !runner.cancelled()) {
    // A CANCELLED that this worker did not ask for is a failure to report, not a stop.
    s = absl::UnavailableError(absl::StrCat("a request was cancelled: ", s.message()));
  }
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](bool* applying) { return !*applying; }, &applying_));  // ApplyMembership uses client
  done_report_ = v1::WorkerProgress();
  FillProgress(runner.progress(), &done_report_);
  client_ = nullptr;
  runner_ = nullptr;
  running_key_.clear();
  return s;
}

}  // namespace ps
