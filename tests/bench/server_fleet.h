// ps_bench's child processes: ps_server daemons on loopback, and the helpers that start them.
#ifndef PS_TESTS_BENCH_SERVER_FLEET_H_
#define PS_TESTS_BENCH_SERVER_FLEET_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ps {
namespace bench {

// fork + execv of argv[0] (a path) with stdout and stderr to `log_path`; the child gets SIGTERM
// if this process dies. Fork before starting threads that hold locks (e.g. gRPC's).
absl::StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv,
                                   const std::string& log_path);
// SIGTERM, then SIGKILL after `grace`; reaps the child.
void StopProcess(pid_t pid, absl::Duration grace);

// `n` ps_server processes on 127.0.0.1 (port 0, reported through --port_file), as servers
// 0..n-1 of a round-robin shard map, each also given `extra_flags`. Stopped when this is
// destroyed. Thread-compatible.
class ServerFleet {
 public:
  static absl::StatusOr<std::unique_ptr<ServerFleet>> Spawn(
      const std::string& binary, int n, const std::vector<std::string>& extra_flags = {});
  ~ServerFleet();
  ServerFleet(const ServerFleet&) = delete;
  ServerFleet& operator=(const ServerFleet&) = delete;

  // "127.0.0.1:port" of each server, in shard-map order.
  const std::vector<std::string>& addresses() const { return addresses_; }
  // The servers' process ids, in the same order.
  const std::vector<pid_t>& pids() const { return pids_; }

 private:
  ServerFleet() = default;
  // Waits for server i's port file; fails if the process exits first.
  absl::Status AwaitPort(int i);

  std::string dir_;         // port files and logs
  bool keep_logs_ = false;  // a server failed: its log stays for the reader
  std::vector<pid_t> pids_;
  std::vector<std::string> addresses_;
};

}  // namespace bench
}  // namespace ps

#endif  // PS_TESTS_BENCH_SERVER_FLEET_H_
