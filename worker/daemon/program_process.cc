#include "worker/daemon/program_process.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

extern char** environ;

namespace ps {
namespace {

constexpr size_t kKeptLines = 100;
constexpr size_t kKeptStderrLines = 20;
constexpr size_t kMaxLineBytes = 1000;

// The executable `command` names: itself if it holds a '/', else the first match in PATH.
absl::StatusOr<std::string> Resolve(const std::string& command) {
  auto check = [](const std::string& path) -> absl::Status {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("program ", path, " does not exist on this worker host"));
    }
    if (!S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("program ", path, " is not a file on this worker host"));
    }
    if (access(path.c_str(), X_OK) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("program ", path, " is not executable on this worker host"));
    }
    return absl::OkStatus();
  };
  if (command.find('/') != std::string::npos) {
    absl::Status s = check(command);
    if (!s.ok()) return s;
    return command;
  }
  const char* path = std::getenv("PATH");
  const std::string dirs = path == nullptr ? "/usr/local/bin:/usr/bin:/bin" : path;
  for (absl::string_view dir : absl::StrSplit(dirs, ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/", command);
    if (check(candidate).ok()) return candidate;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "program ", command, " is not an executable found in the worker's PATH (", dirs, ")"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProgramProcess>> ProgramProcess::Start(
    const ProgramProcessOptions& o) {
  if (o.argv.empty()) return absl::InvalidArgumentError("the program's argv is empty");
  auto resolved = Resolve(o.argv[0]);
  if (!resolved.ok()) return resolved.status();
  std::error_code ec;
  if (!std::filesystem::is_directory(o.working_dir, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the program's working directory ", o.working_dir, " does not exist on this worker host"));
  }
  // Everything the child needs is made before fork: after it, only async-signal-safe calls.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    absl::string_view entry(*e);
    const std::string name(entry.substr(0, entry.find('=')));
    if (o.env.count(name) == 0) env_strings.emplace_back(entry);
  }
  for (const auto& [name, value] : o.env) env_strings.push_back(absl::StrCat(name, "=", value));
  std::vector<char*> envp, argv;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = o.argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string exe = *resolved;

  int out[2], err[2], exec_error[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 ||
      pipe2(exec_error, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    // The child. In a session (so a process group) of its own, so that stopping it stops its
    // children too, and that its agent can tell its processes (their session) from others'.
    // Under its user, if given, from here on (before chdir: it enters its folder as itself).
    // Dies with the daemon (the thread that forked it: the daemon's job loop, which lives as
    // long as the daemon); set after the user changed, which clears it.
    setsid();
    int code = o.user.has_value() ? BecomeProgramUser(*o.user) : 0;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(devnull, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    if (code != 0) {
      // reported below
    } else if (chdir(o.working_dir.c_str()) != 0) {
      code = errno;
    } else {
      execve(exe.c_str(), argv.data(), envp.data());
      code = errno;
    }
    ssize_t ignored = write(exec_error[1], &code, sizeof(code));
    (void)ignored;
    _exit(127);
  }
  close(devnull);
  close(out[1]);
  close(err[1]);
  close(exec_error[1]);
  // The child ran setsid() before its exec (or its failure) ends the read below: nothing can
  // signal its group before it exists.
  int code = 0;
  ssize_t n;
  do {
    n = read(exec_error[0], &code, sizeof(code));
  } while (n < 0 && errno == EINTR);
  close(exec_error[0]);
  if (n == sizeof(code)) {
    int status;
    waitpid(pid, &status, 0);
    close(out[0]);
    close(err[0]);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot start program ", exe, ": ", std::strerror(code)));
  }
  return std::unique_ptr<ProgramProcess>(new ProgramProcess(pid, out[0], err[0], o));
}

ProgramProcess::ProgramProcess(pid_t pid, int out_fd, int err_fd, ProgramProcessOptions options)
    : pid_(pid), options_(std::move(options)), out_fd_(out_fd), err_fd_(err_fd) {
  log_fd_ =
      open(options_.log_path.c_str(),
           O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (options_.truncate_log ? O_TRUNC : 0), 0640);
  if (log_fd_ >= 0) {
    struct stat st;
    if (fstat(log_fd_, &st) == 0) log_bytes_ = static_cast<uint64_t>(st.st_size);
  }
  reader_ = std::thread([this] { ReadOutput(); });
}

ProgramProcess::~ProgramProcess() {
  if (!status_.has_value()) Stop(absl::ZeroDuration());
  if (reader_.joinable()) reader_.join();
  if (log_fd_ >= 0) close(log_fd_);
}

void ProgramProcess::WriteLog(const char* data, size_t size) {
  while (size > 0 && log_fd_ >= 0) {
    if (log_bytes_ >= options_.max_log_bytes) {
      // Capped: the full log becomes .1 (replacing the older one) and a new one begins.
      close(log_fd_);
      std::rename(options_.log_path.c_str(), (options_.log_path + ".1").c_str());
      log_fd_ = open(options_.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
      log_bytes_ = 0;
      if (log_fd_ < 0) return;
    }
    const size_t room = std::min<uint64_t>(size, options_.max_log_bytes - log_bytes_);
    const ssize_t n = write(log_fd_, data, room);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a full disk: the tail in memory goes on
    data += n;
    size -= static_cast<size_t>(n);
    log_bytes_ += static_cast<uint64_t>(n);
  }
}

void ProgramProcess::Append(int stream, const char* data, size_t size) {
  absl::MutexLock l(&mu_);
  bytes_read_ += size;
  std::string& partial = partial_[stream];
  for (size_t i = 0; i < size; ++i) {
    if (data[i] != '\n') {
      if (partial.size() < kMaxLineBytes) partial.push_back(data[i]);
      continue;
    }
    lines_.push_back(partial);
    if (lines_.size() > kKeptLines) lines_.pop_front();
    if (stream == 1) {
      err_lines_.push_back(partial);
      if (err_lines_.size() > kKeptStderrLines) err_lines_.pop_front();
    }
    partial.clear();
    ++lines_read_;
  }
}

void ProgramProcess::ReadOutput() {
  std::vector<char> buffer(1 << 16);
  pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, buffer.data(), buffer.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      WriteLog(buffer.data(), static_cast<size_t>(n));
      Append(i, buffer.data(), static_cast<size_t>(n));
    }
  }
  absl::MutexLock l(&mu_);
  for (int stream = 0; stream < 2; ++stream) {  // a last line without a newline
    if (partial_[stream].empty()) continue;
    lines_.push_back(partial_[stream]);
    if (stream == 1) err_lines_.push_back(partial_[stream]);
    partial_[stream].clear();
    ++lines_read_;
  }
  while (lines_.size() > kKeptLines) lines_.pop_front();
  while (err_lines_.size() > kKeptStderrLines) err_lines_.pop_front();
  output_done_ = true;
}

std::optional<int> ProgramProcess::Poll() {
  if (status_.has_value()) return status_;
  int status;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
  status_ = status;
  // The output to its end (a child of the program may hold the pipes: not waited for long).
  absl::MutexLock l(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&output_done_), absl::Seconds(2));
  return status_;
}

int ProgramProcess::Stop(absl::Duration grace) {
  if (status_.has_value()) return *status_;
  if (grace > absl::ZeroDuration()) {
    kill(-pid_, SIGTERM);
    const absl::Time deadline = absl::Now() + grace;
    while (absl::Now() < deadline) {
      if (Poll().has_value()) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  kill(-pid_, SIGKILL);  // the group: what the program started too
  if (!status_.has_value()) {
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    status_ = status;
  }
  return *status_;
}

std::vector<std::string> ProgramProcess::Tail(size_t n) const {
  absl::MutexLock l(&mu_);
  const size_t first = lines_.size() > n ? lines_.size() - n : 0;
  return std::vector<std::string>(lines_.begin() + first, lines_.end());
}

std::vector<std::string> ProgramProcess::StderrTail(size_t n) const {
  absl::MutexLock l(&mu_);
  const size_t first = err_lines_.size() > n ? err_lines_.size() - n : 0;
  return std::vector<std::string>(err_lines_.begin() + first, err_lines_.end());
}

uint64_t ProgramProcess::lines_read() const {
  absl::MutexLock l(&mu_);
  return lines_read_;
}

uint64_t ProgramProcess::bytes_read() const {
  absl::MutexLock l(&mu_);
  return bytes_read_;
}

std::string ProgramProcess::DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("was killed by signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  }
  return absl::StrCat("ended with wait status ", status);
}

bool ProgramProcess::Succeeded(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

}  // namespace ps
