#include "common/scheduler_link.h"

#include <glog/logging.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/security.h"
#include "common/version.h"

namespace ps {

std::string AdvertisedAddress(const std::string& listen, int port, const std::string& hostname) {
  const size_t colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? "" : listen.substr(0, colon);
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") host = hostname;
  return absl::StrCat(host, ":", port);
}

SchedulerLink::SchedulerLink(SchedulerLinkOptions options, FillFn fill, AnswerFn answer)
    : options_(std::move(options)), fill_(std::move(fill)), answer_(std::move(answer)) {
  // Reconnect within a second of the scheduler coming back: gRPC's default backoff grows to
  // minutes, long enough for a restarted scheduler to declare this node dead.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  stub_ = v1::Scheduler::NewStub(DialChannel(options_.scheduler, args));
}

SchedulerLink::~SchedulerLink() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void SchedulerLink::Start() {
  thread_ = std::thread([this] { Loop(); });
}

uint64_t SchedulerLink::node_id() const {
  absl::MutexLock l(&mu_);
  return node_id_;
}

NodeIdentity SchedulerLink::identity() const {
  absl::MutexLock l(&mu_);
  return NodeIdentity{node_id_, node_secret_};
}

std::string SchedulerLink::node_secret() const {
  absl::MutexLock l(&mu_);
  return node_secret_;
}

absl::Status SchedulerLink::Register() {
  v1::RegisterRequest req;
  req.set_role(options_.role);
  req.set_address(options_.address);
  req.set_hostname(options_.hostname);
  req.set_pid(options_.pid);
  req.set_metrics_address(options_.metrics_address);
  req.set_version(VersionString());
  req.set_node_secret(node_secret());  // registering again: proves it is the same daemon
  v1::RegisterResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  absl::Status s = FromGrpcStatus(stub_->Register(&ctx, req, &resp));
  if (!s.ok()) return s;
  if (options_.on_registered) options_.on_registered(resp);
  absl::MutexLock l(&mu_);
  node_id_ = resp.node_id();
  node_secret_ = resp.node_secret();
  if (resp.heartbeat_interval_ms() > 0)
    interval_ = absl::Milliseconds(resp.heartbeat_interval_ms());
  LOG(INFO) << "registered with scheduler " << options_.scheduler << " as node " << node_id_;
  return absl::OkStatus();
}

void SchedulerLink::Loop() {
  bool registered = false;
  bool reregistered = false;
  int failures = 0;
  absl::Duration interval = absl::Seconds(1);
  while (!stop_.WaitForNotificationWithTimeout(registered ? interval : absl::ZeroDuration())) {
    if (!registered) {
      absl::Status s = Register();
      if (!s.ok()) {
        if (failures++ % 10 == 0) {
          LOG(WARNING) << "cannot register with scheduler " << options_.scheduler << ": " << s
                       << " (retrying)";
        }
        if (stop_.WaitForNotificationWithTimeout(absl::Seconds(1))) return;
        continue;
      }
      registered = true;
      failures = 0;
      absl::MutexLock l(&mu_);
      interval = interval_;
    }
    v1::HeartbeatRequest req;
    if (fill_) fill_(&req);
    req.set_node_id(node_id());
    req.set_node_secret(node_secret());
    v1::HeartbeatResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
    ctx.set_wait_for_ready(true);  // ride out a reconnect instead of failing at once
    absl::Status s = FromGrpcStatus(stub_->Heartbeat(&ctx, req, &resp));
    if (!s.ok()) {
      // The data plane goes on; orders wait for the scheduler to come back.
      if (failures++ % 10 == 0) {
        LOG(WARNING) << "heartbeat to scheduler " << options_.scheduler << " failed: " << s
                     << " (training and serving go on; retrying)";
      }
      continue;
    }
    if (failures > 0) LOG(INFO) << "scheduler " << options_.scheduler << " is back";
    failures = 0;
    if (resp.reregister()) {
      LOG(WARNING) << "scheduler does not know node " << node_id() << "; registering again";
      if (options_.on_declared_dead) options_.on_declared_dead();
      registered = false;
      reregistered = true;
      continue;
    }
    if (answer_) answer_(resp, reregistered);
    reregistered = false;
  }
}

}  // namespace ps
