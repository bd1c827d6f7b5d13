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
#include "common/security.h"
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

// Logging (--log_dir: files with rotation; default stderr) and the process's transport
// security (--tls_*, the cluster token: see common/daemon_flags.h), set for every channel the
// process dials. Call right after absl::ParseCommandLine; logs what it set up. Errors name the
// flag.
absl::StatusOr<std::shared_ptr<const Security>> SetUpDaemon(const char* argv0);

// This machine's host name ("localhost" if it has none).
std::string HostName();

// The IP address of the local interface that routes to `host_port` (resolved; no packet is
// sent). Errors say why (unresolvable, no route).
absl::StatusOr<std::string> LocalAddressToward(const std::string& host_port);

// The host peers reach this daemon at: the host of `advertise` (--advertise, host or
// host:port) if given; else the `listen` host when it is a specific address; else the address
// of the interface that routes to `scheduler` (when given and found), else the host name.
std::string AdvertiseHost(const std::string& advertise, const std::string& listen,
                          const std::string& scheduler);

// The host:port a node registers with: `advertise` if it has a port, else AdvertiseHost and
// the bound `port`.
std::string NodeAddress(const std::string& advertise, const std::string& listen, int port,
                        const std::string& scheduler);

// Writes `port` to the file `path` names (nothing if `path` is empty); an error names `flag`.
absl::Status WritePortFileFlag(const std::string& flag, const std::string& path, int port);

}  // namespace ps

#endif  // PS_COMMON_DAEMON_SETUP_H_
