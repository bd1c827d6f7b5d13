// ps_server: one parameter server daemon.
#include <glog/logging.h>
#include <unistd.h>

#include <iostream>
#include <memory>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/flags_usage.h"
#include "common/process_tuning.h"
#include "common/scheduler_link.h"
#include "common/port_file.h"
#include "common/signals.h"
#include "server/parameter_server.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:7100", "host:port to serve on (port 0: pick a free one)");
ABSL_FLAG(int, server_index, 0, "this server's index in the shard map (0-based)");
ABSL_FLAG(int, num_servers, 1, "servers in the cluster; slot s belongs to server s % num_servers");
ABSL_FLAG(std::string, shard_map, "",
          "static shard map file ('address A-B ...' per server line); overrides --num_servers");
ABSL_FLAG(
    std::string, nonfinite, "reject",
    "pushed NaN/Inf gradients: 'reject' the request, or 'skip_row' (leave such rows as they are)");
ABSL_FLAG(absl::Duration, max_pull_wait, absl::Seconds(120),
          "longest a pull waits for slow workers (sync/ssp) before DEADLINE_EXCEEDED");
ABSL_FLAG(int, max_message_mb, 256, "largest gRPC message accepted, MiB");
ABSL_FLAG(std::string, port_file, "", "if set, write the bound port here once serving");
ABSL_FLAG(std::string, scheduler, "",
          "the scheduler's host:port: register there and heartbeat (jobs then configure this "
          "server's slots; --server_index/--num_servers only set the default)");
ABSL_FLAG(std::string, advertise, "",
          "host:port workers reach this server at (default: the --listen host, or this "
          "machine's hostname when listening on 0.0.0.0, with the bound port)");

int main(int argc, char** argv) {
  ps::SetUsage(
      "Parameter server daemon: holds table rows for its slots, applies optimizers.\n"
      "Example: ps_server --listen=0.0.0.0:7100 --server_index=0 --num_servers=2",
      __FILE__);
  absl::ParseCommandLine(argc, argv);
  ps::TuneProcessForServing();
  ps::BlockTerminationSignals();
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;

  ps::ParameterServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.server_index = absl::GetFlag(FLAGS_server_index);
  options.num_servers = absl::GetFlag(FLAGS_num_servers);
  options.shard_map_file = absl::GetFlag(FLAGS_shard_map);
  options.max_pull_wait = absl::GetFlag(FLAGS_max_pull_wait);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_mb) << 20;
  const std::string nonfinite = absl::GetFlag(FLAGS_nonfinite);
  if (nonfinite == "reject") {
    options.nonfinite = ps::NonFinitePolicy::kReject;
  } else if (nonfinite == "skip_row") {
    options.nonfinite = ps::NonFinitePolicy::kSkipRow;
  } else {
    std::cerr << "ps_server: --nonfinite must be 'reject' or 'skip_row', not '" << nonfinite
              << "'\n";
    return 2;
  }

  auto server = ps::ParameterServer::Start(options);
  if (!server.ok()) {
    std::cerr << "ps_server: " << server.status().message() << "\n";
    return 1;
  }
  LOG(INFO) << "ps_server " << options.server_index << " serving on port " << (*server)->port();
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    if (absl::Status s = ps::WritePortFile(port_file, (*server)->port()); !s.ok()) {
      std::cerr << "ps_server: " << s.message() << "\n";
      return 1;
    }
  }
  std::unique_ptr<ps::SchedulerLink> link;
  if (const std::string scheduler = absl::GetFlag(FLAGS_scheduler); !scheduler.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    std::string address = absl::GetFlag(FLAGS_advertise);
    if (address.empty()) {
      std::string listen_host = options.listen.substr(0, options.listen.rfind(':'));
      if (listen_host.empty() || listen_host == "0.0.0.0" || listen_host == "[::]") {
        listen_host = host;
      }
      address = absl::StrCat(listen_host, ":", (*server)->port());
    }
    ps::SchedulerLinkOptions lo;
    lo.scheduler = scheduler;
    lo.role = ps::v1::SERVER;
    lo.address = address;
    lo.hostname = host;
    lo.pid = getpid();
    link = std::make_unique<ps::SchedulerLink>(lo, nullptr, nullptr);
    link->Start();
    LOG(INFO) << "ps_server: registering with scheduler " << scheduler << " as " << address;
  }
  const int sig = ps::WaitForTerminationSignal();
  link.reset();  // stop heartbeating first: the scheduler sees this server leave
  LOG(INFO) << "ps_server: signal " << sig << ", shutting down";
  (*server)->Shutdown();
  return 0;
}
