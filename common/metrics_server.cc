#include "common/metrics_server.h"

#include <exception>

#include "absl/strings/str_cat.h"

namespace ps {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& listen, std::shared_ptr<prometheus::Registry> registry) {
  if (listen.empty() || listen.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", listen, "' is not host:port"));
  }
  std::unique_ptr<MetricsServer> server(new MetricsServer);
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(listen, /*num_threads=*/1);
    server->exposer_->RegisterCollectable(registry);
    const auto ports = server->exposer_->GetListeningPorts();
    if (!ports.empty()) server->port_ = ports.front();
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", listen, ": ", e.what()));
  }
  server->registry_ = std::move(registry);
  return server;
}

}  // namespace ps
