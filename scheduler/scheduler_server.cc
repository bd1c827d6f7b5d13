#include "scheduler/scheduler_server.h"

#include <glog/logging.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ps {

absl::StatusOr<std::unique_ptr<SchedulerServer>> SchedulerServer::Start(
    const SchedulerOptions& options, Scheduler::Clock clock) {
  PS_RETURN_IF_ERROR(options.Validate());
  if (options.listen.empty()) return absl::InvalidArgumentError("--listen is empty");
  std::unique_ptr<SchedulerServer> s(new SchedulerServer);
  PS_ASSIGN_OR_RETURN(s->scheduler_, Scheduler::Open(options, std::move(clock)));
  s->service_ = std::make_unique<SchedulerService>(s->scheduler_.get());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &s->port_);
  builder.RegisterService(s->service_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen));
  }
  s->ticker_ = std::thread(
      [server = s.get(), interval = options.tick_interval] { server->TickLoop(interval); });
  return s;
}

SchedulerServer::~SchedulerServer() { Shutdown(); }

void SchedulerServer::TickLoop(absl::Duration interval) {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval)) return;
    }
    absl::Status s = scheduler_->Tick();
    if (!s.ok()) {
      LOG_EVERY_N(ERROR, 50) << "scheduler tick: " << s;
    }
  }
}

void SchedulerServer::Shutdown(absl::Duration grace) {
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoSeconds(grace));
  }
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (ticker_.joinable()) ticker_.join();
}

}  // namespace ps
