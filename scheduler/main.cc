// ps_scheduler: the control plane (node membership, job lifecycle and placement).
#include <glog/logging.h>
#include <prometheus/registry.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/daemon_setup.h"
#include "common/flags_usage.h"
#include "common/scheduler_link.h"
#include "common/signals.h"
#include "scheduler/scheduler_metrics.h"
#include "scheduler/scheduler_server.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:7000", "host:port to serve on (port 0: pick a free one)");
ABSL_FLAG(std::string, state_dir, "",
          "folder of the scheduler's RocksDB state (nodes, jobs); required. A restarted "
          "scheduler with the same folder resumes where it stopped");
ABSL_FLAG(std::string, checkpoint_root, "",
          "directory where servers write checkpoints (every server must reach it; a job spec's "
          "checkpoint.root overrides it); default: 'checkpoints' beside --state_dir");
ABSL_FLAG(std::vector<std::string>, checkpoint_roots, {},
          "comma-separated absolute directories under which a job spec's checkpoint.root may "
          "lie (after lexical normalization: '..' cannot escape); --checkpoint_root is always "
          "allowed. Default: none besides --checkpoint_root");
ABSL_FLAG(uint64_t, max_model_bytes, uint64_t{4} << 30,
          "a job whose model needs more bytes on the servers (float32 parameters and optimizer "
          "state, e.g. x3 for adam) is refused at submit with RESOURCE_EXHAUSTED; default 4 GiB");
ABSL_FLAG(int, max_nodes, 4096,
          "most nodes the scheduler keeps, alive and dead; a node registering at the cap makes "
          "room by forgetting the oldest dead nodes that no pending or running job names, and is "
          "refused with RESOURCE_EXHAUSTED when every node is alive (or in use)");
ABSL_FLAG(int, max_pending_jobs, 1024,
          "most jobs waiting to start; a submit (or psctl restore of an ended job) beyond it is "
          "refused with RESOURCE_EXHAUSTED");
ABSL_FLAG(std::string, port_file, "", "if set, write the bound port here once serving");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1), "how often nodes heartbeat");
ABSL_FLAG(absl::Duration, heartbeat_timeout, absl::Seconds(5),
          "a node silent for longer is declared dead");
ABSL_FLAG(std::string, metrics_listen, "0.0.0.0:0",
          "host:port of the Prometheus /metrics endpoint (port 0: a free port; 'off': none)");
ABSL_FLAG(std::string, metrics_port_file, "",
          "if set, write the bound /metrics port here once serving");
ABSL_FLAG(absl::Duration, drain_grace, absl::Milliseconds(500),
          "on SIGTERM, how long the health service reports NOT_SERVING before shutting down; "
          "calls still in flight then get at most 1s before they are cancelled, so the daemon "
          "exits within --drain_grace + about 1s whatever clients do");

namespace {

int Fail(const std::string& message) {
  std::cerr << "ps_scheduler: " << message << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  ps::SetUsage(
      "Scheduler daemon: node membership and heartbeats, job lifecycle and placement.\n"
      "Example: ps_scheduler --listen=0.0.0.0:7000 --state_dir=/var/lib/ps/scheduler",
      __FILE__);
  absl::ParseCommandLine(argc, argv);
  ps::BlockTerminationSignals();
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;

  ps::SchedulerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.state_dir = absl::GetFlag(FLAGS_state_dir);
  options.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  options.heartbeat_timeout = absl::GetFlag(FLAGS_heartbeat_timeout);
  options.checkpoint_root = absl::GetFlag(FLAGS_checkpoint_root);
  options.checkpoint_roots = absl::GetFlag(FLAGS_checkpoint_roots);
  options.max_model_bytes = absl::GetFlag(FLAGS_max_model_bytes);
  options.max_nodes = absl::GetFlag(FLAGS_max_nodes);
  options.max_pending_jobs = absl::GetFlag(FLAGS_max_pending_jobs);

  // /metrics first: the scheduler reports its address (ListNodes) and exports from the start.
  // Declared before everything that registers in it: destroyed last.
  auto exporter = ps::DaemonExporter::Start("scheduler", absl::GetFlag(FLAGS_metrics_listen),
                                            absl::GetFlag(FLAGS_metrics_port_file));
  if (!exporter.ok()) return Fail(std::string(exporter.status().message()));
  std::unique_ptr<ps::SchedulerMetrics> metrics;
  if (prometheus::Registry* registry = (*exporter)->registry(); registry != nullptr) {
    metrics = std::make_unique<ps::SchedulerMetrics>(*registry);
    options.metrics_address = (*exporter)->Address(ps::HostName());
    LOG(INFO) << "ps_scheduler: metrics on port " << (*exporter)->port() << " (/metrics)";
  }

  auto server = ps::SchedulerServer::Start(options, absl::Now, metrics.get());
  if (!server.ok()) return Fail(std::string(server.status().message()));
  LOG(INFO) << "ps_scheduler serving on port " << (*server)->port() << ", state in "
            << options.state_dir;
  if (absl::Status s =
          ps::WritePortFileFlag("--port_file", absl::GetFlag(FLAGS_port_file), (*server)->port());
      !s.ok()) {
    return Fail(std::string(s.message()));
  }
  const int sig = ps::WaitForTerminationSignal();
  LOG(INFO) << "ps_scheduler: signal " << sig << ", draining (health NOT_SERVING), then stopping";
  (*server)->Drain();
  absl::SleepFor(absl::GetFlag(FLAGS_drain_grace));
  // Calls still open after kShutdownGrace are cancelled (gRPC Shutdown with a deadline).
  constexpr absl::Duration kShutdownGrace = absl::Seconds(1);
  (*server)->Shutdown(kShutdownGrace);
  LOG(INFO) << "ps_scheduler: stopped";
  return 0;
}
