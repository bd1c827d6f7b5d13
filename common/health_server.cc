#include "common/health_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ps {

absl::StatusOr<std::unique_ptr<HealthServer>> HealthServer::Start(const std::string& listen) {
  if (listen.empty() || listen.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("health address '", listen, "' is not host:port"));
  }
  // Both are process-wide switches read when a server is built.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::unique_ptr<HealthServer> s(new HealthServer);
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a busy port is an error
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen));
  }
  s->port_ = port;
  {
    absl::MutexLock l(&s->mu_);
    s->server_ = std::move(server);
  }
  s->SetServing(false);
  return s;
}

HealthServer::~HealthServer() { Shutdown(); }

void HealthServer::SetServing(bool serving) {
  absl::MutexLock l(&mu_);
  if (server_ == nullptr) return;
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(serving);
  }
}

void HealthServer::Shutdown(absl::Duration grace) {
  absl::MutexLock l(&mu_);
  if (server_ == nullptr) return;
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
  server_.reset();
}

}  // namespace ps
