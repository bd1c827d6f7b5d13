// ps_server: one parameter server daemon.
#include <glog/logging.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/daemon_flags.h"
#include "common/daemon_setup.h"
#include "common/flags_usage.h"
#include "common/health_server.h"
#include "common/process_tuning.h"
#include "common/scheduler_link.h"
#include "common/security.h"
#include "common/signals.h"
#include "common/status_macros.h"
#include "common/transport_flags.h"
#include "server/checkpoint_roots.h"
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
ABSL_FLAG(uint64_t, max_job_bytes, uint64_t{16} << 30,
          "most row bytes (as stored: key, values, optimizer state) one job's tables may hold on "
          "this server: "
          "dense tables count with this server's share at CreateTable, sparse rows as new keys "
          "are pulled or pushed; beyond it RESOURCE_EXHAUSTED (default 16 GiB). A job's rows "
          "are freed when it ends (the scheduler's DropJob)");
ABSL_FLAG(bool, huge_pages, false,
          "mark the 2 MiB chunks that hold table rows for transparent huge pages (madvise): "
          "fewer TLB misses on random row lookups of large tables, but new rows cost more to "
          "create where first-touching a huge page is slow (some VMs)");
ABSL_FLAG(std::string, port_file, "", "if set, write the bound port here once serving");
ABSL_FLAG(std::string, scheduler, "",
          "the scheduler's host:port: register there and heartbeat (jobs then configure this "
          "server's slots; --server_index/--num_servers only set the default)");
ABSL_FLAG(std::string, advertise, "",
          "host or host:port workers and the scheduler reach this server at (default: the "
          "--listen host, or, listening on every interface, the address of the interface that "
          "routes to --scheduler; with the bound port). Its /metrics is advertised on that host");
ABSL_FLAG(std::string, health_listen, "off",
          "host:port of a plaintext gRPC port serving only grpc.health.v1 (for probes that "
          "cannot speak TLS, e.g. Kubernetes' grpc probes; port 0: a free one); 'off': none. "
          "The main port serves health too");
ABSL_FLAG(absl::Duration, checkpoint_write_delay, absl::ZeroDuration(),
          "fault-injection test hook: start each checkpoint write this long after its snapshot "
          "(tests kill a server mid-checkpoint); leave 0 in production");
ABSL_FLAG(std::vector<std::string>, checkpoint_roots, {},
          "comma-separated absolute directories under which this server writes checkpoints and "
          "reads them back (a Checkpoint path or restore order path elsewhere, symlinks "
          "resolved, is INVALID_ARGUMENT); pass the scheduler's --checkpoint_root (and any job "
          "spec's checkpoint.root). Default: none, every checkpoint is refused");
ABSL_FLAG(std::vector<std::string>, tier_roots, {},
          "comma-separated absolute directories for the disk tier of tables with tier.disk "
          "(docs/embedding-tables.md#disk-tier): its RocksDB lives in <first root>/tier-<server "
          "index>-<pid>, emptied at start and removed at exit. Default: none, such tables are "
          "refused at CreateTable");
ABSL_FLAG(int64_t, tier_min_free_mb, 1024,
          "MiB the disk tier leaves free on its filesystem: a request that would write rows back "
          "with less free is RESOURCE_EXHAUSTED naming the table (RocksDB's flushes and "
          "compactions need room beside the files they replace, and a RocksDB that meets a full "
          "disk stops writing). 0: no reserve");
ABSL_FLAG(int64_t, tier_block_cache_mb, 32,
          "MiB of the disk tier's RocksDB block cache (recently read blocks of rows on disk; the "
          "table's rows in RAM are the cache of hot rows). 1..65536");
ABSL_FLAG(int64_t, tier_write_buffer_mb, 8,
          "MiB of each of the disk tier's two RocksDB write buffers (rows written back, batched "
          "into sorted files). 1..4096");
ABSL_FLAG(absl::Duration, prefetch_pin, absl::Seconds(30),
          "how long a row that a client prefetched (PullRequest.prefetch: read from the disk "
          "tier into RAM before the step that pulls it) stays pinned in RAM at most when no pull "
          "reads it; eviction passes it by until then (docs/embedding-tables.md#prefetch). "
          "1s..1h");
ABSL_FLAG(absl::Duration, drain_grace, absl::Seconds(1),
          "on SIGTERM/SIGINT: health turns NOT_SERVING, requests are still served this long, "
          "then the server shuts down: requests still running get 0.5 s more, pulls waiting on "
          "slow workers answer UNAVAILABLE, and the process exits at most 3 s after the grace");

namespace {

// Whether this server can write the scheduler's checkpoint root: writes
// <root>/.ps-probe/node-<id> (the scheduler looks for it: a file it cannot see means the root
// is not shared). "ok", or why not.
std::string ProbeCheckpointRoot(const std::string& root, uint64_t node_id,
                                const ps::CheckpointRoots& roots) {
  if (root.empty()) return "";
  if (roots.empty()) return "this server has no --checkpoint_roots";
  // The probe's folder is what must lie under a root: the scheduler's root may be one itself
  // (a root holds checkpoints strictly below it).
  const std::filesystem::path dir = std::filesystem::path(root) / ".ps-probe";
  if (absl::Status s = roots.Check(dir.string(), "the scheduler's checkpoint root"); !s.ok()) {
    return std::string(s.message());
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::StrCat("cannot create ", dir.string(), ": ", ec.message());
  const std::string file = (dir / absl::StrCat("node-", node_id)).string();
  std::ofstream out(file, std::ios::trunc);
  out << ps::HostName() << "\n";
  out.close();
  if (!out) return absl::StrCat("cannot write ", file);
  return "ok";
}

// A flag of MiB in [min, max], in bytes; INVALID_ARGUMENT naming it otherwise.
absl::StatusOr<uint64_t> MiBFlag(absl::string_view name, const absl::Flag<int64_t>& flag,
                                 int64_t min, int64_t max) {
  const int64_t mib = absl::GetFlag(flag);
  if (mib < min || mib > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " must be in [", min, ", ", max, "] (MiB), not ", mib));
  }
  return static_cast<uint64_t>(mib) << 20;
}

// The server's options from the flags; INVALID_ARGUMENT naming a bad flag.
absl::StatusOr<ps::ParameterServerOptions> OptionsFromFlags() {
  ps::ParameterServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.server_index = absl::GetFlag(FLAGS_server_index);
  options.num_servers = absl::GetFlag(FLAGS_num_servers);
  options.shard_map_file = absl::GetFlag(FLAGS_shard_map);
  options.max_pull_wait = absl::GetFlag(FLAGS_max_pull_wait);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_mb) << 20;
  options.max_job_bytes = absl::GetFlag(FLAGS_max_job_bytes);
  options.huge_pages = absl::GetFlag(FLAGS_huge_pages);
  options.checkpoint_write_delay = absl::GetFlag(FLAGS_checkpoint_write_delay);
  options.checkpoint_roots = absl::GetFlag(FLAGS_checkpoint_roots);
  options.prefetch_pin = absl::GetFlag(FLAGS_prefetch_pin);
  if (absl::GetFlag(FLAGS_tier_min_free_mb) < 0 ||
      absl::GetFlag(FLAGS_tier_min_free_mb) > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("--tier_min_free_mb must be in [0, 2^30], not ",
                                                   absl::GetFlag(FLAGS_tier_min_free_mb)));
  }
  options.tier_min_free_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_tier_min_free_mb)) << 20;
  PS_ASSIGN_OR_RETURN(options.tier_block_cache_bytes,
                      MiBFlag("tier_block_cache_mb", FLAGS_tier_block_cache_mb, 1, 65536));
  PS_ASSIGN_OR_RETURN(options.tier_write_buffer_bytes,
                      MiBFlag("tier_write_buffer_mb", FLAGS_tier_write_buffer_mb, 1, 4096));
  options.transport = ps::TransportOptionsFromFlags();
  if (const std::vector<std::string> tier_roots = absl::GetFlag(FLAGS_tier_roots);
      !tier_roots.empty()) {
    auto roots = ps::CheckpointRoots::Create(tier_roots);  // absolute, normalized
    if (!roots.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tier_roots: ",
          absl::StrReplaceAll(roots.status().message(), {{"checkpoint root", "tier root"}})));
    }
    options.tier_dir = (std::filesystem::path(roots->roots().front()) /
                        absl::StrCat("tier-", options.server_index, "-", getpid()))
                           .string();
  }
  const std::string nonfinite = absl::GetFlag(FLAGS_nonfinite);
  if (nonfinite == "reject") {
    options.nonfinite = ps::NonFinitePolicy::kReject;
  } else if (nonfinite == "skip_row") {
    options.nonfinite = ps::NonFinitePolicy::kSkipRow;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--nonfinite must be 'reject' or 'skip_row', not '", nonfinite, "'"));
  }
  if (absl::GetFlag(FLAGS_drain_grace) < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--drain_grace must not be negative");
  }
  return options;
}

// Registers with the scheduler and heartbeats until destroyed: declared dead, the server fences
// its slots; at registration it checks that it can write the scheduler's checkpoint root.
std::unique_ptr<ps::SchedulerLink> StartSchedulerLink(const std::string& scheduler,
                                                      const ps::ParameterServerOptions& options,
                                                      ps::ParameterServer* server,
                                                      const ps::DaemonExporter& exporter) {
  const std::string address =
      ps::NodeAddress(absl::GetFlag(FLAGS_advertise), options.listen, server->port(), scheduler);
  ps::SchedulerLinkOptions lo;
  lo.scheduler = scheduler;
  lo.role = ps::v1::SERVER;
  lo.address = address;
  lo.hostname = ps::HostName();
  lo.pid = getpid();
  // Reachable where the data plane is: a wildcard metrics host becomes the advertised host.
  lo.metrics_address = exporter.Address(address.substr(0, address.rfind(':')));
  // Declared dead (a partition, a freeze): others own this server's slots now. It serves
  // none of them until the scheduler configures it again.
  lo.on_declared_dead = [ps_server = server] {
    LOG(WARNING) << "ps_server: the scheduler had declared this server dead; fencing every "
                    "job's slots until it assigns them again";
    ps_server->store()->FenceAllJobs();
  };
  // The scheduler names its checkpoint root at registration: check that this server can
  // write there, and say so in every heartbeat.
  auto probe = std::make_shared<std::pair<absl::Mutex, std::string>>();
  auto roots = ps::CheckpointRoots::Create(options.checkpoint_roots);
  lo.on_registered = [probe, roots,
                      service = server->service()](const ps::v1::RegisterResponse& resp) {
    service->SetNodeSecret(resp.node_secret());  // for its checkpoint receipts
    const std::string result = ProbeCheckpointRoot(resp.checkpoint_root(), resp.node_id(),
                                                   roots.ok() ? *roots : ps::CheckpointRoots());
    if (result != "ok" && !result.empty()) {
      LOG(ERROR) << "ps_server: cannot write the scheduler's checkpoint root "
                 << resp.checkpoint_root() << ": " << result
                 << "; checkpoints of jobs on this server will fail";
    }
    absl::MutexLock l(&probe->first);
    probe->second = result;
  };
  auto link = std::make_unique<ps::SchedulerLink>(
      lo,
      [probe](ps::v1::HeartbeatRequest* req) {
        absl::MutexLock l(&probe->first);
        req->set_checkpoint_probe(probe->second);
      },
      nullptr);
  link->Start();
  LOG(INFO) << "ps_server: registering with scheduler " << scheduler << " as " << address
            << (lo.metrics_address.empty() ? "" : ", metrics at " + lo.metrics_address);
  return link;
}

// After the drain grace: how long requests in flight get to finish (then they are cancelled),
// and the bound on the whole shutdown, past which the process exits anyway.
constexpr absl::Duration kShutdownGrace = absl::Milliseconds(500);
constexpr absl::Duration kStopLimit = absl::Seconds(3);

// Drains after a termination signal: health NOT_SERVING and the scheduler link closed for
// `drain_grace`, then a shutdown; the process ends within kStopLimit after the grace whatever a
// request is stuck in.
[[noreturn]] void StopAfterSignal(int sig, absl::Duration drain_grace,
                                  std::unique_ptr<ps::ParameterServer> server,
                                  std::unique_ptr<ps::HealthServer> health,
                                  std::unique_ptr<ps::SchedulerLink> link) {
  LOG(INFO) << "ps_server: signal " << sig << ", draining for "
            << absl::FormatDuration(drain_grace);
  // Whatever a request is stuck in, the process ends within the drain grace plus kStopLimit.
  std::thread([drain_grace] {
    absl::SleepFor(drain_grace + kStopLimit);
    LOG(ERROR) << "ps_server: not stopped " << absl::FormatDuration(kStopLimit)
               << " after the drain grace; exiting now";
    google::FlushLogFiles(google::INFO);
    std::_Exit(1);
  }).detach();
  server->Drain();
  if (health != nullptr) health->SetServing(false);
  link.reset();  // stop heartbeating: the scheduler sees this server leave
  absl::SleepFor(drain_grace);
  LOG(INFO) << "ps_server: shutting down";
  server->Shutdown(kShutdownGrace);
  server.reset();
  LOG(INFO) << "ps_server: stopped";
  // Nothing is left to write (checkpoint writes stopped, the scheduler link is gone); skip the
  // metrics HTTP server's stop, which takes 1.5 s of civetweb polling.
  google::FlushLogFiles(google::INFO);
  std::_Exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  ps::SetUsage(
      "Parameter server daemon: holds table rows for its slots, applies optimizers.\n"
      "Example: ps_server --listen=0.0.0.0:7100 --server_index=0 --num_servers=2",
      __FILE__);
  absl::ParseCommandLine(argc, argv);
  ps::TuneProcessForServing();
  ps::BlockTerminationSignals();
  auto security = ps::SetUpDaemon(argv[0]);
  if (!security.ok()) {
    std::cerr << "ps_server: " << security.status().message() << "\n";
    return 2;
  }

  auto options = OptionsFromFlags();
  if (!options.ok()) {
    std::cerr << "ps_server: " << options.status().message() << "\n";
    return 2;
  }
  const absl::Duration drain_grace = absl::GetFlag(FLAGS_drain_grace);
  // Declared before everything that registers in it: destroyed last.
  const ps::MetricsFlags metrics_flags = ps::MetricsFromFlags();
  auto exporter =
      ps::DaemonExporter::Start("server", metrics_flags.listen, metrics_flags.port_file);
  if (!exporter.ok()) {
    std::cerr << "ps_server: " << exporter.status().message() << "\n";
    return 1;
  }
  if ((*exporter)->registry() != nullptr) {
    LOG(INFO) << "ps_server: /metrics on port " << (*exporter)->port();
  } else {
    LOG(INFO) << "ps_server: metrics off";
  }
  // Servers take the cluster token only: psctl's admin commands go to the scheduler.
  options->authorizer =
      std::make_shared<ps::Authorizer>((*security)->token(), "", (*exporter)->registry());
  auto server = ps::ParameterServer::Start(*options, (*exporter)->registry());
  if (!server.ok()) {
    std::cerr << "ps_server: " << server.status().message() << "\n";
    return 1;
  }
  LOG(INFO) << "ps_server " << options->server_index << " serving on port " << (*server)->port();
  if (options->checkpoint_roots.empty()) {
    LOG(WARNING) << "ps_server: no --checkpoint_roots: every checkpoint and restore from one is "
                    "refused";
  } else {
    LOG(INFO) << "ps_server: checkpoint roots " << absl::StrJoin(options->checkpoint_roots, ",");
  }
  if (!options->tier_dir.empty()) {
    LOG(INFO) << "ps_server: disk tier (tables with tier.disk) at " << options->tier_dir;
  }
  if (absl::Status s =
          ps::WritePortFileFlag("--port_file", absl::GetFlag(FLAGS_port_file), (*server)->port());
      !s.ok()) {
    std::cerr << "ps_server: " << s.message() << "\n";
    return 1;
  }
  std::unique_ptr<ps::HealthServer> health;
  if (const std::string listen = absl::GetFlag(FLAGS_health_listen); listen != "off") {
    auto started = ps::HealthServer::Start(listen);
    if (!started.ok()) {
      std::cerr << "ps_server: --health_listen: " << started.status().message() << "\n";
      return 1;
    }
    health = *std::move(started);
    health->SetServing(true);
    LOG(INFO) << "ps_server: plaintext health port " << health->port();
  }
  std::unique_ptr<ps::SchedulerLink> link;
  if (const std::string scheduler = absl::GetFlag(FLAGS_scheduler); !scheduler.empty()) {
    link = StartSchedulerLink(scheduler, *options, server->get(), **exporter);
  }
  const int sig = ps::WaitForTerminationSignal();
  StopAfterSignal(sig, drain_grace, std::move(*server), std::move(health), std::move(link));
}
