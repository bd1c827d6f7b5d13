// Kept apart from glog's headers: glog declares a gflags FLAGS_log_dir of its own.
#include "common/daemon_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/tls_flags.h"

ABSL_FLAG(std::string, cluster_token_file, "",
          "file holding the cluster token (one line, mode 600): presented on every call this "
          "daemon makes and required on every call it serves. Default: $PS_CLUSTER_TOKEN; "
          "neither: no token. Never pass a token itself on the command line");
ABSL_FLAG(std::string, log_dir, "",
          "write logs to files in this directory (one per run and severity, a new one every "
          "--max_log_mb, files older than --log_keep_days deleted; errors also go to stderr). "
          "Default: stderr only, for journald, kubectl logs or a supervisor");
ABSL_FLAG(int32_t, max_log_mb, 64, "with --log_dir: start a new log file at this size, MiB");
ABSL_FLAG(int32_t, log_keep_days, 7,
          "with --log_dir: delete this daemon's log files older than this");

ABSL_FLAG(std::string, cpus, "",
          "run this daemon on these CPUs only, e.g. 0-3 or 0,2,4-7 (set at start, before any "
          "thread; gRPC sizes its thread pools from them). Give daemons that share a host CPUs "
          "of their own: a request then stays on a few cores. Default: every CPU the process "
          "may use");

ABSL_FLAG(std::string, metrics_listen, "0.0.0.0:0",
          "host:port to serve Prometheus /metrics on (port 0: a free one, logged and written to "
          "--metrics_port_file); 'off': none");
ABSL_FLAG(std::string, metrics_port_file, "",
          "if set, write the bound /metrics port here once serving");

namespace ps {

MetricsFlags MetricsFromFlags() {
  return MetricsFlags{absl::GetFlag(FLAGS_metrics_listen), absl::GetFlag(FLAGS_metrics_port_file)};
}

absl::StatusOr<std::shared_ptr<const Security>> DaemonSecurityFromFlags() {
  SecurityOptions options = TlsOptionsFromFlags();
  absl::StatusOr<std::string> token =
      TokenFromFileOrEnv(absl::GetFlag(FLAGS_cluster_token_file), "PS_CLUSTER_TOKEN");
  if (!token.ok()) {
    return absl::Status(token.status().code(),
                        absl::StrCat("--cluster_token_file: ", token.status().message()));
  }
  options.token = *std::move(token);
  return Security::Load(options);
}

LogOptions LogOptionsFromFlags() {
  LogOptions options;
  options.dir = absl::GetFlag(FLAGS_log_dir);
  options.max_mb = absl::GetFlag(FLAGS_max_log_mb);
  options.keep_days = absl::GetFlag(FLAGS_log_keep_days);
  return options;
}

std::string CpusFromFlags() { return absl::GetFlag(FLAGS_cpus); }

}  // namespace ps
