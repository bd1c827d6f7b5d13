#include "tests/bench/server_fleet.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace ps {
namespace bench {

absl::StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv,
                                   const std::string& log_path) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::ErrnoToStatus(errno, "fork");
  if (pid > 0) return pid;
  // Child: only async-signal-safe calls until execv.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(127);
  const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
  }
  execv(args[0], args.data());
  _exit(127);
}

void StopProcess(pid_t pid, absl::Duration grace) {
  kill(pid, SIGTERM);
  const absl::Time deadline = absl::Now() + grace;
  while (absl::Now() < deadline) {
    if (waitpid(pid, nullptr, WNOHANG) != 0) return;
    absl::SleepFor(absl::Milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

absl::StatusOr<std::unique_ptr<ServerFleet>> ServerFleet::Spawn(
    const std::string& binary, int n, const std::vector<std::string>& extra_flags) {
  if (access(binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("ps_server binary ", binary,
                                            " is not executable (build ps_server or pass "
                                            "--server_binary)"));
  }
  std::unique_ptr<ServerFleet> fleet(new ServerFleet);
  char dir[] = "/tmp/ps_bench.XXXXXX";
  if (mkdtemp(dir) == nullptr) return absl::ErrnoToStatus(errno, "mkdtemp");
  fleet->dir_ = dir;
  for (int i = 0; i < n; ++i) {
    const std::string base = absl::StrCat(fleet->dir_, "/server", i);
    std::vector<std::string> argv = {
        binary, "--listen=127.0.0.1:0", absl::StrCat("--port_file=", base, ".port"),
        absl::StrCat("--server_index=", i), absl::StrCat("--num_servers=", n)};
    argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
    PS_ASSIGN_OR_RETURN(pid_t pid, SpawnProcess(argv, base + ".log"));
    fleet->pids_.push_back(pid);
  }
  for (int i = 0; i < n; ++i) PS_RETURN_IF_ERROR(fleet->AwaitPort(i));
  LOG(INFO) << "spawned " << n << " ps_server(s) from " << binary << "; logs in " << fleet->dir_;
  return fleet;
}

absl::Status ServerFleet::AwaitPort(int i) {
  const std::string base = absl::StrCat(dir_, "/server", i);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    std::ifstream in(base + ".port");
    int port = 0;
    if (in >> port && port > 0) {
      addresses_.push_back(absl::StrCat("127.0.0.1:", port));
      return absl::OkStatus();
    }
    int wstatus = 0;
    if (waitpid(pids_[i], &wstatus, WNOHANG) == pids_[i]) {
      pids_[i] = -1;
      keep_logs_ = true;
      return absl::UnavailableError(
          absl::StrCat("ps_server ", i, " exited (status ", wstatus, "); see ", base, ".log"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  keep_logs_ = true;
  return absl::DeadlineExceededError(
      absl::StrCat("ps_server ", i, " wrote no port file in 30 s; see ", base, ".log"));
}

ServerFleet::~ServerFleet() {
  for (pid_t pid : pids_) {
    if (pid > 0) StopProcess(pid, absl::Seconds(5));
  }
  if (keep_logs_) {
    LOG(WARNING) << "ps_server logs kept in " << dir_;
    return;
  }
  for (size_t i = 0; i < pids_.size(); ++i) {
    const std::string base = absl::StrCat(dir_, "/server", i);
    unlink((base + ".port").c_str());
    unlink((base + ".log").c_str());
  }
  if (!dir_.empty()) rmdir(dir_.c_str());
}

}  // namespace bench
}  // namespace ps
