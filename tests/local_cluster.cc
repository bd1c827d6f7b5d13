#include "tests/local_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace ps {
namespace testing {

absl::StatusOr<Subprocess> Subprocess::Start(const std::vector<std::string>& argv,
                                             const std::string& log_path) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::ErrnoToStatus(errno, "fork");
  if (pid == 0) {
    // Die with the test: a test killed by ctest's timeout must not leave servers behind.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execv(args[0], args.data());
    _exit(127);
  }
  return Subprocess(pid);
}

Subprocess::Subprocess(Subprocess&& other) noexcept : pid_(other.pid_) { other.pid_ = -1; }

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    Kill(SIGKILL);
    pid_ = other.pid_;
    other.pid_ = -1;
  }
  return *this;
}

Subprocess::~Subprocess() { Kill(SIGKILL); }

void Subprocess::Kill(int signal) {
  if (pid_ <= 0) return;
  ::kill(pid_, signal);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

absl::StatusOr<int> WaitForPortFile(const std::string& path, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::ifstream in(path);
    std::string text;
    if (in && std::getline(in, text)) {
      int port = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &port) && port > 0) return port;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("no port in ", path, " after ", absl::FormatDuration(timeout)));
}

absl::StatusOr<LocalCluster> LocalCluster::Start(int num_servers,
                                                 const std::vector<std::string>& extra_flags) {
  LocalCluster cluster;
  std::string tmpl = "/tmp/ps_cluster_XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return absl::ErrnoToStatus(errno, "mkdtemp");
  cluster.dir_ = tmpl;
  std::vector<std::string> port_files;
  for (int i = 0; i < num_servers; ++i) {
    port_files.push_back(absl::StrCat(cluster.dir_, "/server", i, ".port"));
    std::vector<std::string> argv = {PS_SERVER_BINARY, "--listen=127.0.0.1:0",
                                     absl::StrCat("--server_index=", i),
                                     absl::StrCat("--num_servers=", num_servers),
                                     absl::StrCat("--port_file=", port_files.back())};
    argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
    auto p = Subprocess::Start(argv, absl::StrCat(cluster.dir_, "/server", i, ".log"));
    if (!p.ok()) return p.status();
    cluster.servers_.push_back(std::move(*p));
  }
  for (int i = 0; i < num_servers; ++i) {
    auto port = WaitForPortFile(port_files[i], absl::Seconds(30));
    if (!port.ok()) {
      return absl::Status(port.status().code(),
                          absl::StrCat("server ", i, " did not start (log in ", cluster.dir_,
                                       "): ", port.status().message()));
    }
    cluster.addresses_.push_back(absl::StrCat("127.0.0.1:", *port));
  }
  return cluster;
}

LocalCluster::~LocalCluster() {
  for (Subprocess& s : servers_) s.Kill(SIGKILL);
  if (!dir_.empty()) {
    // The logs are small; keep them only while the cluster lives.
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

}  // namespace testing
}  // namespace ps
