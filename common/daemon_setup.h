// What every daemon's main sets up the same way: the Prometheus exporter (registry, process
// metrics, the /metrics endpoint and its port file), the addresses a node advertises, and port
// files. Errors name the flag they came from.
#ifndef PS_COMMON_DAEMON_SETUP_H_
#define PS_COMMON_DAEMON_SETUP_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metrics_server.h"
#include "common/process_metrics.h"
#include "prometheus/registry.h"

namespace ps {

// A daemon's /metrics. Declare it before everything that registers in its registry, so that it
// is destroyed last. Thread-safe after Start.
class DaemonExporter {
 public:
  // `role` labels the process metrics ("server", "worker", "scheduler"). `listen` is
  // --metrics_listen (host:port; port 0: a free one; "off": no endpoint and a null registry);
  // `port_file`, if not empty, is --metrics_port_file, written once serving.
  static absl::StatusOr<std::unique_ptr<DaemonExporter>> Start(const std::string& role,
                                                               const std::string& listen,
                                                               const std::string& port_file);

  // Null with --metrics_listen=off.
  prometheus::Registry* registry() const { return registry_.get(); }
  // The bound port; 0 when off.
  int port() const { return server_ == nullptr ? 0 : server_->port(); }
  // Where a scraper finds /metrics: the listen host and port, with `host` for a listen on every
  // interface. Empty when off.
  std::string Address(const std::string& host) const;

 private:
  DaemonExporter() = default;
  std::string listen_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<ProcessMetrics> process_;
  std::unique_ptr<MetricsServer> server_;
};

// This machine's host name ("localhost" if it has none).
std::string HostName();

// The address a node registers with: `advertise` (--advertise) if given, else the listen host
// with the bound port, the host name standing in for a listen on every interface.
std::string NodeAddress(const std::string& advertise, const std::string& listen, int port);

// Writes `port` to the file `path` names (nothing if `path` is empty); an error names `flag`.
absl::Status WritePortFileFlag(const std::string& flag, const std::string& path, int port);

}  // namespace ps

#endif  // PS_COMMON_DAEMON_SETUP_H_
