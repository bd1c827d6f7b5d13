// A program job's program, run as a child process of the worker daemon: started as the leader
// of a session (and process group) of its own, under a user of its own where one is given,
// killed with the daemon (PR_SET_PDEATHSIG), its stdout and stderr written to a capped log file
// while the last lines are kept in memory.
#ifndef PS_WORKER_DAEMON_PROGRAM_PROCESS_H_
#define PS_WORKER_DAEMON_PROGRAM_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/daemon/program_users.h"

namespace ps {

struct ProgramProcessOptions {
  std::vector<std::string> argv;           // argv[0]: an absolute path or a name in PATH
  std::map<std::string, std::string> env;  // added to (or replacing in) the daemon's environment
  std::string working_dir;                 // must exist
  std::string log_path;                    // stdout and stderr, appended
  bool truncate_log = false;               // start the log afresh (a job's first start)
  // When the log reaches this size it is moved to log_path + ".1" (replacing an older one) and
  // a new one begins: at most twice this on disk.
  uint64_t max_log_bytes = uint64_t{64} << 20;
  // The user it runs as (program_users.h; needs root), else the daemon's own.
  std::optional<ProgramUser> user;
};

class ProgramProcess {
 public:
  // Checks argv[0] (FAILED_PRECONDITION: not found, not a file, not executable; the message
  // names the path and this host's PATH), then starts it. An exec that fails in the child is
  // reported the same way.
  static absl::StatusOr<std::unique_ptr<ProgramProcess>> Start(const ProgramProcessOptions& o);
  // Kills the process group if the program still runs, and reaps it.
  ~ProgramProcess();
  ProgramProcess(const ProgramProcess&) = delete;
  ProgramProcess& operator=(const ProgramProcess&) = delete;

  // The wait status once the program has exited (and its output was read to the end).
  std::optional<int> Poll();
  // SIGTERM to the process group, SIGKILL after `grace`; returns the wait status.
  int Stop(absl::Duration grace);

  pid_t pid() const { return pid_; }
  // The last `n` lines of its output (stdout and stderr, interleaved as read), and of stderr.
  std::vector<std::string> Tail(size_t n) const;
  std::vector<std::string> StderrTail(size_t n) const;
  // Grows with every line read (to tell whether the tail changed).
  uint64_t lines_read() const;
  uint64_t bytes_read() const;

  // "exited with status 3", "was killed by signal 9 (Killed)".
  static std::string DescribeExit(int wait_status);
  // True if `wait_status` is a clean exit (status 0).
  static bool Succeeded(int wait_status);

 private:
  ProgramProcess(pid_t pid, int out_fd, int err_fd, ProgramProcessOptions options);
  void ReadOutput();  // the reader thread
  void Append(int stream, const char* data, size_t size);
  void WriteLog(const char* data, size_t size);

  const pid_t pid_;
  const ProgramProcessOptions options_;
  int out_fd_, err_fd_;
  int log_fd_ = -1;
  uint64_t log_bytes_ = 0;
  std::thread reader_;
  std::optional<int> status_;

  mutable absl::Mutex mu_;
  bool output_done_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::string> lines_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> err_lines_ ABSL_GUARDED_BY(mu_);
  std::string partial_[2] ABSL_GUARDED_BY(mu_);  // a line not yet ended, per stream
  uint64_t lines_read_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_read_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ps

#endif  // PS_WORKER_DAEMON_PROGRAM_PROCESS_H_
