#include "common/daemon_setup.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/port_file.h"
#include "common/scheduler_link.h"

namespace ps {

absl::StatusOr<std::unique_ptr<DaemonExporter>> DaemonExporter::Start(
    const std::string& role, const std::string& listen, const std::string& port_file) {
  std::unique_ptr<DaemonExporter> e(new DaemonExporter());
  e->listen_ = listen;
  if (listen == "off") return e;
  e->registry_ = std::make_shared<prometheus::Registry>();
  auto process = ProcessMetrics::Start(*e->registry_, role);
  if (!process.ok()) return process.status();
  e->process_ = std::move(*process);
  auto server = MetricsServer::Start(listen, e->registry_);
  if (!server.ok()) {
    return absl::Status(server.status().code(),
                        absl::StrCat("--metrics_listen=", listen, ": ", server.status().message()));
  }
  e->server_ = std::move(*server);
  if (absl::Status s = WritePortFileFlag("--metrics_port_file", port_file, e->port()); !s.ok()) {
    return s;
  }
  return e;
}

std::string DaemonExporter::Address(const std::string& host) const {
  return server_ == nullptr ? "" : AdvertisedAddress(listen_, server_->port(), host);
}

std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

std::string NodeAddress(const std::string& advertise, const std::string& listen, int port) {
  return advertise.empty() ? AdvertisedAddress(listen, port, HostName()) : advertise;
}

absl::Status WritePortFileFlag(const std::string& flag, const std::string& path, int port) {
  if (path.empty()) return absl::OkStatus();
  absl::Status s = WritePortFile(path, port);
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(flag, ": ", s.message()));
}

}  // namespace ps
