// Test support: a TCP proxy in front of one gRPC server that can lose the server's replies, as a
// network that drops a connection after the request arrived would. Tests only.
#ifndef PS_COMMON_TESTING_REPLY_LOSING_PROXY_H_
#define PS_COMMON_TESTING_REPLY_LOSING_PROXY_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ps {
namespace testing {

// Listens on 127.0.0.1 and forwards each connection to 127.0.0.1:target_port, both ways. After
// LoseReplies(n), the next n replies are lost: when the server starts an answer (an HTTP/2
// HEADERS frame on a stream, which a unary gRPC server sends once its handler has finished),
// the proxy drops the connection instead of passing the frame on. The server has handled the
// request; the client sees its connection close (UNAVAILABLE) and may send the request again,
// on a new connection. Thread-safe; the destructor closes every connection and joins its threads.
class ReplyLosingProxy {
 public:
  // Null if the listening socket cannot be made.
  static std::unique_ptr<ReplyLosingProxy> Start(int target_port) {
    std::unique_ptr<ReplyLosingProxy> p(new ReplyLosingProxy(target_port));
    p->listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = Loopback(0);
    socklen_t len = sizeof(addr);
    if (p->listen_fd_ < 0 || bind(p->listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(p->listen_fd_, 16) != 0 ||
        getsockname(p->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return nullptr;
    }
    p->port_ = ntohs(addr.sin_port);
    p->accept_thread_ = std::thread([raw = p.get()] { raw->AcceptLoop(); });
    return p;
  }

  ~ReplyLosingProxy() {
    stopping_.store(true);
    shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
    accept_thread_.join();
    close(listen_fd_);
    std::vector<std::unique_ptr<Connection>> connections;
    {
      absl::MutexLock l(&mu_);
      connections.swap(connections_);
    }
    for (auto& c : connections) {
      c->Cut();
      c->up.join();
      c->down.join();
      close(c->client_fd);
      close(c->server_fd);
    }
  }
  ReplyLosingProxy(const ReplyLosingProxy&) = delete;
  ReplyLosingProxy& operator=(const ReplyLosingProxy&) = delete;

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // The next n replies (on any connection) are lost.
  void LoseReplies(int n) { to_lose_.fetch_add(n); }
  // Replies lost so far.
  int lost() const { return lost_.load(); }

 private:
  struct Connection {
    int client_fd = -1;
    int server_fd = -1;
    std::thread up;    // client -> server
    std::thread down;  // server -> client, frame by frame
    // Both sockets shut down: both pumps end, and the client sees the connection close.
    void Cut() const {
      shutdown(client_fd, SHUT_RDWR);
      shutdown(server_fd, SHUT_RDWR);
    }
  };

  explicit ReplyLosingProxy(int target_port) : target_port_(target_port) {}

  static sockaddr_in Loopback(int port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    return addr;
  }

  static bool WriteAll(int fd, const char* p, size_t n) {
    while (n > 0) {
      const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }

  void AcceptLoop() {
    for (;;) {
      const int client_fd = accept(listen_fd_, nullptr, nullptr);
      if (client_fd < 0) return;  // shut down (or failed: no more connections)
      if (stopping_.load()) {
        close(client_fd);
        return;
      }
      const int server_fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in target = Loopback(target_port_);
      if (server_fd < 0 ||
          connect(server_fd, reinterpret_cast<sockaddr*>(&target), sizeof(target)) != 0) {
        if (server_fd >= 0) close(server_fd);
        close(client_fd);
        continue;
      }
      const int one = 1;
      setsockopt(client_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      setsockopt(server_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto c = std::make_unique<Connection>();
      c->client_fd = client_fd;
      c->server_fd = server_fd;
      Connection* raw = c.get();
      c->up = std::thread([raw] { PumpUp(*raw); });
      c->down = std::thread([this, raw] { PumpDown(*raw); });
      absl::MutexLock l(&mu_);
      connections_.push_back(std::move(c));
    }
  }

  // Client to server: bytes as they come.
  static void PumpUp(const Connection& c) {
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = recv(c.client_fd, buf, sizeof(buf), 0);
      if (n <= 0 || !WriteAll(c.server_fd, buf, static_cast<size_t>(n))) break;
    }
    c.Cut();
  }

  // Server to client: whole HTTP/2 frames (a 9-byte header: 24-bit length, type, flags, 31-bit
  // stream id; the server sends no preface), so that a reply's first frame can be held back.
  void PumpDown(const Connection& c) {
    constexpr uint8_t kHeadersFrame = 0x1;
    std::string pending;
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = recv(c.server_fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      pending.append(buf, static_cast<size_t>(n));
      size_t done = 0;
      while (pending.size() - done >= 9) {
        const auto* h = reinterpret_cast<const uint8_t*>(pending.data() + done);
        const size_t length = (size_t{h[0]} << 16) | (size_t{h[1]} << 8) | h[2];
        const uint32_t stream =
            ((uint32_t{h[5]} & 0x7f) << 24) | (uint32_t{h[6]} << 16) | (uint32_t{h[7]} << 8) | h[8];
        if (pending.size() - done < 9 + length) break;
        if (h[3] == kHeadersFrame && stream != 0 && TakeOneToLose()) {
          WriteAll(c.client_fd, pending.data(), done);  // the frames before it
          lost_.fetch_add(1);
          c.Cut();
          return;
        }
        done += 9 + length;
      }
      if (!WriteAll(c.client_fd, pending.data(), done)) break;
      pending.erase(0, done);
    }
    c.Cut();
  }

  bool TakeOneToLose() {
    int n = to_lose_.load();
    while (n > 0) {
      if (to_lose_.compare_exchange_weak(n, n - 1)) return true;
    }
    return false;
  }

  const int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> to_lose_{0};
  std::atomic<int> lost_{0};
  std::thread accept_thread_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace testing
}  // namespace ps

#endif  // PS_COMMON_TESTING_REPLY_LOSING_PROXY_H_
