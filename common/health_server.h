// A gRPC server that serves only grpc.health.v1.Health (and reflection), in plaintext: every
// daemon's --health_listen port, for probes that cannot speak TLS (Kubernetes' grpc probes).
#ifndef PS_COMMON_HEALTH_SERVER_H_
#define PS_COMMON_HEALTH_SERVER_H_

#include <grpcpp/server.h>

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ps {

// Starts NOT_SERVING; the owner says when it serves. Thread-safe.
class HealthServer {
 public:
  // `listen` is host:port; port 0 picks a free one (port()). UNAVAILABLE if it cannot bind.
  static absl::StatusOr<std::unique_ptr<HealthServer>> Start(const std::string& listen);
  ~HealthServer();

  int port() const { return port_; }  // fixed after Start()
  // SERVING or NOT_SERVING, for the whole server ("") and every service.
  void SetServing(bool serving);
  // Stops serving (waiting up to `grace` for calls in flight). Idempotent.
  void Shutdown(absl::Duration grace = absl::Milliseconds(200));

 private:
  HealthServer() = default;
  int port_ = 0;
  absl::Mutex mu_;
  std::unique_ptr<grpc::Server> server_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_COMMON_HEALTH_SERVER_H_
