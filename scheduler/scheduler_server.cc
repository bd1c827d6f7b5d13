#include "scheduler/scheduler_server.h"

#include <glog/logging.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/security.h"
#include "common/status_macros.h"

namespace ps {

absl::StatusOr<std::unique_ptr<SchedulerServer>> SchedulerServer::Start(
    const SchedulerOptions& options, Scheduler::Clock clock, SchedulerMetrics* metrics) {
  PS_RETURN_IF_ERROR(options.Validate());
  if (options.listen.empty()) return absl::InvalidArgumentError("--listen is empty");
  std::unique_ptr<SchedulerServer> s(new SchedulerServer);
  s->dropper_ = std::make_unique<GrpcJobDropper>();
  PS_ASSIGN_OR_RETURN(s->scheduler_,
                      Scheduler::Open(options, std::move(clock), metrics, s->dropper_.get()));
  s->service_ = std::make_unique<SchedulerService>(s->scheduler_.get(), options.authorizer.get());
  // Both are process-wide switches read when a server is built.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, ProcessSecurity()->ServerCredentials(), &s->port_);
  builder.RegisterService(s->service_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen));
  }
  if (grpc::HealthCheckServiceInterface* health = s->server_->GetHealthCheckService()) {
    health->SetServingStatus(v1::Scheduler::service_full_name(), true);
    health->SetServingStatus(true);  // "" (the whole server) and every service
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

void SchedulerServer::Drain() {
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(false);
  }
}

void SchedulerServer::Shutdown(absl::Duration grace) {
  if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (ticker_.joinable()) ticker_.join();
}

}  // namespace ps
