// Test support: parameter-server processes on loopback, started and reaped by the test.
#ifndef PS_TESTS_LOCAL_CLUSTER_H_
#define PS_TESTS_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ps {
namespace testing {

// A child process, killed (SIGKILL) and reaped when this object goes away.
class Subprocess {
 public:
  // Starts `argv[0]` with the given arguments; stdout and stderr go to `log_path`.
  static absl::StatusOr<Subprocess> Start(const std::vector<std::string>& argv,
                                          const std::string& log_path);
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  // Sends `signal` and waits for the process to end.
  void Kill(int signal);

 private:
  explicit Subprocess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
};

// N ps_server processes, server i owning slots s with s % N == i, each on a free port of
// 127.0.0.1 (the server binds port 0 and reports the port through --port_file).
class LocalCluster {
 public:
  // `extra_flags` go to every server. Waits (bounded) until each server reported its port.
  static absl::StatusOr<LocalCluster> Start(int num_servers,
                                            const std::vector<std::string>& extra_flags = {});
  LocalCluster(LocalCluster&&) = default;
  LocalCluster& operator=(LocalCluster&&) = default;
  ~LocalCluster();

  const std::vector<std::string>& addresses() const { return addresses_; }
  const std::string& dir() const { return dir_; }

 private:
  LocalCluster() = default;
  std::string dir_;
  std::vector<Subprocess> servers_;
  std::vector<std::string> addresses_;
};

// Reads a port written by `ps_server --port_file`, waiting up to `timeout` for it to appear.
absl::StatusOr<int> WaitForPortFile(const std::string& path, absl::Duration timeout);

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_LOCAL_CLUSTER_H_
