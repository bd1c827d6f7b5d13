// The Unix socket a program job's agent (the WorkerAgent service) listens on, with a check of
// each connecting process: its credentials as the kernel gives them (SO_PEERCRED: pid, uid,
// gid at connect), not the socket's path alone. Connections that pass are handed to a gRPC
// server (which listens on no port of its own); others are closed before any call is read, so
// their caller sees UNAVAILABLE.
#ifndef PS_WORKER_DAEMON_AGENT_LISTENER_H_
#define PS_WORKER_DAEMON_AGENT_LISTENER_H_

#include <grpcpp/server.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ps {

// Who connected.
struct Peer {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// The agent's rule: the peer runs as `program_uid` and belongs to the program's session (the
// program is started as a session leader: its pid is the session id of it and of every child
// that stays in it). `program_pid` 0 (no program running): refused. FAILED_PRECONDITION saying
// what differs.
absl::Status CheckAgentPeer(const Peer& peer, uid_t program_uid, pid_t program_pid);

class AgentListener {
 public:
  // Decides whether a connection is served. Called on the listener's thread.
  using Admit = std::function<absl::Status(const Peer&)>;

  // Binds `path` (removed first if it is there), makes it owned by `owner_uid`:`owner_gid`
  // with mode 0600 before listening, and hands every connection `admit` passes to `server`
  // (started, serving on no port; must outlive this). FAILED_PRECONDITION naming the path.
  static absl::StatusOr<std::unique_ptr<AgentListener>> Start(const std::string& path,
                                                              uid_t owner_uid, gid_t owner_gid,
                                                              grpc::Server* server, Admit admit);
  // Stops accepting (connections already handed over stay with the server) and closes the
  // socket; does not remove its file.
  ~AgentListener();
  AgentListener(const AgentListener&) = delete;
  AgentListener& operator=(const AgentListener&) = delete;

  uint64_t refused() const { return refused_.load(); }

 private:
  AgentListener(int fd, int wake_read, int wake_write, std::string path, grpc::Server* server,
                Admit admit);
  void AcceptLoop();

  const int fd_;
  const int wake_read_, wake_write_;
  const std::string path_;
  grpc::Server* const server_;
  const Admit admit_;
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
};

}  // namespace ps

#endif  // PS_WORKER_DAEMON_AGENT_LISTENER_H_
