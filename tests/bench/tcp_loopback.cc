#include "tests/bench/tcp_loopback.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "tests/bench/server_fleet.h"

namespace ps {
namespace bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

double MicrosSince(SteadyClock::time_point t0) {
  return std::chrono::duration<double, std::micro>(SteadyClock::now() - t0).count();
}

// Closes a file descriptor on scope exit.
class ScopedFd {
 public:
  explicit ScopedFd(int fd = -1) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::Status WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return absl::ErrnoToStatus(errno, "write");
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

// Reads exactly `n` bytes into `buf` (reused: at most buf.size() per read). *eof is set (and OK
// returned) if the peer closed before the first byte.
absl::Status ReadExactly(int fd, size_t n, std::vector<char>& buf, bool* eof) {
  *eof = false;
  size_t left = n;
  while (left > 0) {
    const ssize_t r = read(fd, buf.data(), std::min(left, buf.size()));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return absl::ErrnoToStatus(errno, "read");
    if (r == 0) {
      if (left == n) *eof = true;
      return left == n ? absl::OkStatus() : absl::DataLossError("peer closed mid-request");
    }
    left -= static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// A listening socket on 127.0.0.1 and an ephemeral port.
absl::StatusOr<int> ListenLoopback(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::ErrnoToStatus(errno, "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 1) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    absl::Status s = absl::ErrnoToStatus(errno, "bind/listen on 127.0.0.1");
    close(fd);
    return s;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

absl::StatusOr<int> ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::ErrnoToStatus(errno, "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    absl::Status s = absl::ErrnoToStatus(errno, "connect to 127.0.0.1");
    close(fd);
    return s;
  }
  SetNoDelay(fd);
  return fd;
}

// The receiving side: reads `size`-byte requests and acknowledges each with one byte.
absl::Status ServeTcpSink(int listen_fd, size_t size) {
  ScopedFd fd(accept(listen_fd, nullptr, nullptr));
  if (fd.get() < 0) return absl::ErrnoToStatus(errno, "accept");
  SetNoDelay(fd.get());
  std::vector<char> buf(kTcpWriteBytes);
  const char ack = 1;
  while (true) {
    bool eof = false;
    PS_RETURN_IF_ERROR(ReadExactly(fd.get(), size, buf, &eof));
    if (eof) return absl::OkStatus();
    PS_RETURN_IF_ERROR(WriteAll(fd.get(), &ack, 1));
  }
}

// "bits_per_second" of iperf3 -J's end.sum_received, or < 0 if absent.
double ParseIperfBitsPerSecond(const std::string& json) {
  const size_t sum = json.find("\"sum_received\"");
  if (sum == std::string::npos) return -1;
  const std::string key = "\"bits_per_second\":";
  const size_t at = json.find(key, sum);
  if (at == std::string::npos) return -1;
  return std::strtod(json.c_str() + at + key.size(), nullptr);
}

}  // namespace

absl::StatusOr<LoopbackRun> RunTcpLoopback(size_t size, absl::Duration duration, int64_t min_ops) {
  int port = 0;
  PS_ASSIGN_OR_RETURN(int listen_fd, ListenLoopback(&port));
  ScopedFd listener(listen_fd);
  absl::Status sink_status;
  std::thread sink([&] { sink_status = ServeTcpSink(listener.get(), size); });
  LoopbackRun run;
  absl::Status status = [&]() -> absl::Status {
    PS_ASSIGN_OR_RETURN(int conn_fd, ConnectLoopback(port));
    ScopedFd conn(conn_fd);
    std::vector<char> payload(std::min(size, kTcpWriteBytes), 1);  // reused by every write
    std::vector<char> ack(1);
    run.latencies_us.reserve(size_t{1} << 16);
    auto request = [&]() -> absl::Status {
      for (size_t off = 0; off < size; off += payload.size()) {
        const size_t n = std::min(payload.size(), size - off);
        PS_RETURN_IF_ERROR(WriteAll(conn.get(), payload.data(), n));
      }
      bool eof = false;
      PS_RETURN_IF_ERROR(ReadExactly(conn.get(), 1, ack, &eof));
      return eof ? absl::DataLossError("sink closed") : absl::OkStatus();
    };
    PS_RETURN_IF_ERROR(request());  // warm-up
    const auto start = SteadyClock::now();
    const auto end = start + absl::ToChronoNanoseconds(duration);
    while (SteadyClock::now() < end || run.ops < min_ops) {
      const auto t0 = SteadyClock::now();
      PS_RETURN_IF_ERROR(request());
      run.latencies_us.push_back(MicrosSince(t0));
      ++run.ops;
    }
    run.seconds = MicrosSince(start) / 1e6;
    return absl::OkStatus();  // closing `conn` ends the sink
  }();
  if (!status.ok()) shutdown(listener.get(), SHUT_RDWR);  // unblocks a sink still in accept()
  sink.join();
  PS_RETURN_IF_ERROR(status);
  PS_RETURN_IF_ERROR(sink_status);
  return run;
}

absl::StatusOr<double> RunIperf3(const std::string& iperf3, int seconds) {
  int port = 0;
  {
    PS_ASSIGN_OR_RETURN(int fd, ListenLoopback(&port));  // a free port, released at once
    close(fd);
  }
  PS_ASSIGN_OR_RETURN(pid_t server,
                      SpawnProcess({iperf3, "-s", "-1", "-p", absl::StrCat(port)}, "/dev/null"));
  const std::string command =
      absl::StrFormat("%s -c 127.0.0.1 -p %d -l 1M -t %d -J 2>&1", iperf3, port, seconds);
  double bps = -1;
  std::string json;
  for (int attempt = 0; attempt < 20 && bps < 0; ++attempt) {
    absl::SleepFor(absl::Milliseconds(200));  // the server needs a moment to listen
    FILE* p = popen(command.c_str(), "r");
    if (p == nullptr) break;
    json.clear();
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) json.append(buf, n);
    pclose(p);
    bps = ParseIperfBitsPerSecond(json);
  }
  StopProcess(server, absl::Seconds(2));
  if (bps < 0) {
    return absl::UnavailableError(absl::StrCat("iperf3 gave no result: ", json.substr(0, 300)));
  }
  return bps / 8;
}

}  // namespace bench
}  // namespace ps
