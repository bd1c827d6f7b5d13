#include "worker/daemon/agent_listener.h"

#include <errno.h>
#include <fcntl.h>
#include <glog/logging.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ps {

absl::Status CheckAgentPeer(const Peer& peer, uid_t program_uid, pid_t program_pid) {
  if (program_pid <= 0) {
    return absl::FailedPreconditionError("no program of this agent's job runs now");
  }
  if (peer.uid != program_uid) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the caller runs as uid ", peer.uid, ", this agent's program as uid ", program_uid));
  }
  const pid_t session = getsid(peer.pid);
  if (session != program_pid) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the caller (pid ", peer.pid, ", session ", session, ") is not this agent's program (pid ",
        program_pid, ") or one of its processes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<AgentListener>> AgentListener::Start(
    const std::string& path, uid_t owner_uid, gid_t owner_gid, grpc::Server* server, Admit admit) {
  auto fail = [&](const char* what) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot serve the agent on ", path, ": ", what, ": ", std::strerror(errno)));
  };
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::FailedPreconditionError(absl::StrCat("socket path ", path, " is too long"));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail("socket");
  unlink(path.c_str());
  // Nobody can connect before listen(): the owner and mode are set first.
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return fail("bind");
  }
  if (chmod(path.c_str(), 0600) != 0 || chown(path.c_str(), owner_uid, owner_gid) != 0) {
    close(fd);
    return fail("chmod/chown");
  }
  if (listen(fd, 16) != 0) {
    close(fd);
    return fail("listen");
  }
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    close(fd);
    return fail("pipe");
  }
  return std::unique_ptr<AgentListener>(
      new AgentListener(fd, wake[0], wake[1], path, server, std::move(admit)));
}

AgentListener::AgentListener(int fd, int wake_read, int wake_write, std::string path,
                             grpc::Server* server, Admit admit)
    : fd_(fd),
      wake_read_(wake_read),
      wake_write_(wake_write),
      path_(std::move(path)),
      server_(server),
      admit_(std::move(admit)) {
  thread_ = std::thread([this] { AcceptLoop(); });
}

AgentListener::~AgentListener() {
  const char byte = 0;
  ssize_t ignored = write(wake_write_, &byte, 1);
  (void)ignored;
  thread_.join();
  close(fd_);
  close(wake_read_);
  close(wake_write_);
}

void AgentListener::AcceptLoop() {
  pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      LOG(ERROR) << "agent " << path_ << ": poll: " << std::strerror(errno);
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    const int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (conn < 0) continue;  // the peer went away, or out of descriptors: the next one
    ucred cred{};
    socklen_t len = sizeof(cred);
    absl::Status admitted;
    if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      admitted = absl::InternalError(absl::StrCat("SO_PEERCRED: ", std::strerror(errno)));
    } else {
      admitted = admit_(Peer{cred.pid, cred.uid, cred.gid});
    }
    if (!admitted.ok()) {
      close(conn);
      // A hostile program may connect in a loop: the first refusals and then every 100th.
      const uint64_t n = ++refused_;
      if (n <= 5 || n % 100 == 0) {
        LOG(WARNING) << "agent " << path_ << ": refused a connection from pid " << cred.pid
                     << " (uid " << cred.uid << "): " << admitted.message() << " (" << n
                     << " refused)";
      }
      continue;
    }
    grpc::AddInsecureChannelFromFd(server_, conn);  // takes the descriptor
  }
}

}  // namespace ps
