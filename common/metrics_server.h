// /metrics over HTTP (Prometheus text format) for a daemon's registry.
#ifndef PS_COMMON_METRICS_SERVER_H_
#define PS_COMMON_METRICS_SERVER_H_

#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ps {

// Serves `registry` at http://<listen>/metrics. Owns the HTTP server; the registry is shared
// with the components that own the metric families. Thread-safe.
class MetricsServer {
 public:
  // `listen` is host:port; port 0 picks a free one (port()). prometheus-cpp's exceptions (a busy
  // port, a bad address) become UNAVAILABLE / INVALID_ARGUMENT here, nowhere else.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& listen, std::shared_ptr<prometheus::Registry> registry);

  int port() const { return port_; }

 private:
  MetricsServer() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  int port_ = 0;
};

}  // namespace ps

#endif  // PS_COMMON_METRICS_SERVER_H_
