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
#include "common/daemon_flags.h"
#include "common/daemon_setup.h"
#include "common/flags_usage.h"
#include "common/health_server.h"
#include "common/scheduler_link.h"
#include "common/security.h"
#include "common/signals.h"
#include "scheduler/scheduler_metrics.h"
#include "scheduler/scheduler_server.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:7000", "host:port to serve on (port 0: pick a free one)");
ABSL_FLAG(std::string, advertise, "",
          "host peers reach this scheduler at, for the /metrics address it reports (default: "
          "the --listen host, or this machine's host name when listening on every interface)");
ABSL_FLAG(std::string, health_listen, "off",
          "host:port of a plaintext gRPC port serving only grpc.health.v1 (for probes that "
          "cannot speak TLS, e.g. Kubernetes' grpc probes); 'off': none. The main port serves "
          "health too");
ABSL_FLAG(std::string, admin_token_file, "",
          "file holding the admin token (one line, mode 600) that psctl's changing commands "
          "(submit, cancel, checkpoint, restore) must present; the cluster token (nodes) is "
          "then refused there with PERMISSION_DENIED. Default: $PS_ADMIN_TOKEN; neither: those "
          "commands need what every call needs (the cluster token, if any)");
ABSL_FLAG(bool, suspect_own_partition, true,
          "when every live node (two or more) goes silent at once, assume this scheduler is the "
          "one cut off and declare nobody dead until one is heard again (then everyone gets a "
          "fresh heartbeat grace period); false: each is declared dead after "
          "--heartbeat_timeout");
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
ABSL_FLAG(absl::Duration, forget_dead_nodes_after, absl::Hours(1),
          "a node dead for longer is forgotten (psctl nodes no longer lists it) unless a pending "
          "or running job names it; 0: keep dead nodes until --max_nodes needs room");
ABSL_FLAG(int, max_registrations_per_minute, 600,
          "registrations accepted in any minute; more are refused with RESOURCE_EXHAUSTED (the "
          "daemons retry every second)");
ABSL_FLAG(int, max_pending_jobs, 1024,
          "most jobs waiting to start; a submit (or psctl restore of an ended job) beyond it is "
          "refused with RESOURCE_EXHAUSTED");
ABSL_FLAG(std::string, port_file, "", "if set, write the bound port here once serving");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1), "how often nodes heartbeat");
ABSL_FLAG(absl::Duration, heartbeat_timeout, absl::Seconds(5),
          "a node silent for longer is declared dead");
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
  auto security = ps::SetUpDaemon(argv[0]);
  if (!security.ok()) return Fail(std::string(security.status().message()));
  auto admin_token =
      ps::TokenFromFileOrEnv(absl::GetFlag(FLAGS_admin_token_file), "PS_ADMIN_TOKEN");
  if (!admin_token.ok()) {
    return Fail(absl::StrCat("--admin_token_file: ", admin_token.status().message()));
  }
  if (!admin_token->empty() && *admin_token == (*security)->token()) {
    return Fail("the admin token must differ from the cluster token");
  }

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
  options.forget_dead_nodes_after = absl::GetFlag(FLAGS_forget_dead_nodes_after);
  options.max_registrations_per_minute = absl::GetFlag(FLAGS_max_registrations_per_minute);
  options.suspect_own_partition = absl::GetFlag(FLAGS_suspect_own_partition);

  // /metrics first: the scheduler reports its address (ListNodes) and exports from the start.
  // Declared before everything that registers in it: destroyed last.
  const ps::MetricsFlags metrics_flags = ps::MetricsFromFlags();
  auto exporter =
      ps::DaemonExporter::Start("scheduler", metrics_flags.listen, metrics_flags.port_file);
  if (!exporter.ok()) return Fail(std::string(exporter.status().message()));
  std::unique_ptr<ps::SchedulerMetrics> metrics;
  if (prometheus::Registry* registry = (*exporter)->registry(); registry != nullptr) {
    metrics = std::make_unique<ps::SchedulerMetrics>(*registry);
    options.metrics_address =
        (*exporter)->Address(ps::AdvertiseHost(absl::GetFlag(FLAGS_advertise), options.listen, ""));
    LOG(INFO) << "ps_scheduler: metrics on port " << (*exporter)->port() << " (/metrics)";
  }

  options.authorizer =
      std::make_shared<ps::Authorizer>((*security)->token(), *admin_token, (*exporter)->registry());
  if (!options.authorizer->enabled()) {
    LOG(WARNING) << "ps_scheduler: no cluster or admin token: anyone who reaches port "
                 << options.listen << " may submit, cancel and restore jobs";
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
  std::unique_ptr<ps::HealthServer> health;
  if (const std::string listen = absl::GetFlag(FLAGS_health_listen); listen != "off") {
    auto started = ps::HealthServer::Start(listen);
    if (!started.ok()) return Fail(absl::StrCat("--health_listen: ", started.status().message()));
    health = *std::move(started);
    health->SetServing(true);
    LOG(INFO) << "ps_scheduler: plaintext health port " << health->port();
  }
  const int sig = ps::WaitForTerminationSignal();
  LOG(INFO) << "ps_scheduler: signal " << sig << ", draining (health NOT_SERVING), then stopping";
  (*server)->Drain();
  if (health != nullptr) health->SetServing(false);
  absl::SleepFor(absl::GetFlag(FLAGS_drain_grace));
  // Calls still open after kShutdownGrace are cancelled (gRPC Shutdown with a deadline).
  constexpr absl::Duration kShutdownGrace = absl::Seconds(1);
  (*server)->Shutdown(kShutdownGrace);
  LOG(INFO) << "ps_scheduler: stopped";
  return 0;
}
