// Flags every daemon shares (common/daemon_flags.cc), besides --tls_* (common/tls_flags.h):
// --cluster_token_file, the log destination, --cpus and /metrics. (--listen, --advertise and
// --health_listen stay each daemon's own: their defaults and meanings differ.)
#ifndef PS_COMMON_DAEMON_FLAGS_H_
#define PS_COMMON_DAEMON_FLAGS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/security.h"

namespace ps {

// The process's transport security from --tls_* and the cluster token (--cluster_token_file,
// else $PS_CLUSTER_TOKEN). Errors name the flag.
absl::StatusOr<std::shared_ptr<const Security>> DaemonSecurityFromFlags();

struct LogOptions {
  std::string dir;        // --log_dir; empty: stderr only
  int32_t max_mb = 64;    // --max_log_mb: a file is closed and a new one begun at this size
  int32_t keep_days = 7;  // --log_keep_days: older files in dir are deleted
};
LogOptions LogOptionsFromFlags();

// --metrics_listen and --metrics_port_file: where the daemon serves /metrics.
struct MetricsFlags {
  std::string listen;
  std::string port_file;
};
MetricsFlags MetricsFromFlags();

// --cpus: the CPUs to pin the daemon to (common/cpu_set.h); empty: no pinning.
std::string CpusFromFlags();

}  // namespace ps

#endif  // PS_COMMON_DAEMON_FLAGS_H_
