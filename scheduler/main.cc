// ps_scheduler: the control plane (node membership, job lifecycle and placement).
#include <glog/logging.h>

#include <cstdio>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/flags_usage.h"
#include "common/port_file.h"
#include "common/signals.h"
#include "scheduler/scheduler_server.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:7000", "host:port to serve on (port 0: pick a free one)");
ABSL_FLAG(std::string, state_dir, "",
          "folder of the scheduler's RocksDB state (nodes, jobs); required. A restarted "
          "scheduler with the same folder resumes where it stopped");
ABSL_FLAG(std::string, port_file, "", "if set, write the bound port here once serving");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1), "how often nodes heartbeat");
ABSL_FLAG(absl::Duration, heartbeat_timeout, absl::Seconds(5),
          "a node silent for longer is declared dead");

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

  auto server = ps::SchedulerServer::Start(options);
  if (!server.ok()) {
    std::cerr << "ps_scheduler: " << server.status().message() << "\n";
    return 1;
  }
  LOG(INFO) << "ps_scheduler serving on port " << (*server)->port() << ", state in "
            << options.state_dir;
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    if (absl::Status s = ps::WritePortFile(port_file, (*server)->port()); !s.ok()) {
      std::cerr << "ps_scheduler: " << s.message() << "\n";
      return 1;
    }
  }
  const int sig = ps::WaitForTerminationSignal();
  LOG(INFO) << "ps_scheduler: signal " << sig << ", shutting down";
  (*server)->Shutdown();
  return 0;
}
