#include "common/daemon_setup.h"

#include <arpa/inet.h>
#include <glog/logging.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/cpu_set.h"
#include "common/daemon_flags.h"
#include "common/port_file.h"
#include "common/scheduler_link.h"
#include "common/version.h"

namespace ps {

absl::StatusOr<std::unique_ptr<DaemonExporter>> DaemonExporter::Start(
    const std::string& role, const std::string& listen, const std::string& port_file) {
  std::unique_ptr<DaemonExporter> e(new DaemonExporter());
  e->listen_ = listen;
  if (listen == "off") return e;
  e->registry_ = std::make_shared<prometheus::Registry>();
  auto process = ProcessMetrics::Start(*e->registry_, role);
  if (!process.ok()) return process.status();
  e->process_ = std::move(*process);
  auto server = MetricsServer::Start(listen, e->registry_);
  if (!server.ok()) {
    return absl::Status(server.status().code(),
                        absl::StrCat("--metrics_listen=", listen, ": ", server.status().message()));
  }
  e->server_ = std::move(*server);
  if (absl::Status s = WritePortFileFlag("--metrics_port_file", port_file, e->port()); !s.ok()) {
    return s;
  }
  return e;
}

std::string DaemonExporter::Address(const std::string& host) const {
  return server_ == nullptr ? "" : AdvertisedAddress(listen_, server_->port(), host);
}

std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

namespace {

// Splits "host:port", "[v6]:port", "host" or "[v6]" (port -1 when absent).
void SplitHostPort(const std::string& address, std::string* host, int* port) {
  *port = -1;
  std::string rest = address;
  if (!rest.empty() && rest[0] == '[') {
    const size_t close = rest.find(']');
    if (close != std::string::npos) {
      *host = rest.substr(1, close - 1);
      if (close + 1 < rest.size() && rest[close + 1] == ':') {
        if (!absl::SimpleAtoi(rest.substr(close + 2), port)) *port = -1;
      }
      return;
    }
  }
  const size_t colon = rest.rfind(':');
  if (colon != std::string::npos && rest.find(':') == colon) {
    *host = rest.substr(0, colon);
    if (!absl::SimpleAtoi(rest.substr(colon + 1), port)) *port = -1;
    return;
  }
  *host = rest;  // a bare host (or a bare IPv6 address)
}

bool IsWildcard(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]";
}

std::string JoinHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Security>> SetUpDaemon(const char* argv0) {
  google::InitGoogleLogging(argv0);
  const LogOptions log = LogOptionsFromFlags();
  if (log.dir.empty()) {
    FLAGS_logtostderr = true;
  } else {
    if (mkdir(log.dir.c_str(), 0750) != 0 && errno != EEXIST) {
      return absl::InvalidArgumentError(
          absl::StrCat("--log_dir=", log.dir, ": cannot create it: ", std::strerror(errno)));
    }
    if (access(log.dir.c_str(), W_OK) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--log_dir=", log.dir, ": not writable: ", std::strerror(errno)));
    }
    if (log.max_mb < 1 || log.keep_days < 1) {
      return absl::InvalidArgumentError("--max_log_mb and --log_keep_days must be at least 1");
    }
    FLAGS_logtostderr = false;
    FLAGS_log_dir = log.dir;
    FLAGS_max_log_size = static_cast<uint32_t>(log.max_mb);
    FLAGS_stderrthreshold = google::GLOG_ERROR;
    google::EnableLogCleaner(static_cast<unsigned int>(log.keep_days));
  }
  if (const std::string cpus = CpusFromFlags(); !cpus.empty()) {
    const absl::StatusOr<std::vector<int>> before = AllowedCpus();
    absl::StatusOr<std::vector<int>> pinned = PinToCpus(cpus);
    if (!pinned.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--cpus: ", pinned.status().message()));
    }
    LOG(INFO) << "running on CPUs " << FormatCpuList(*pinned) << " (" << pinned->size() << " of "
              << (before.ok() ? before->size() : pinned->size()) << ")";
  }
  absl::StatusOr<std::shared_ptr<const Security>> security = DaemonSecurityFromFlags();
  if (!security.ok()) return security.status();
  SetProcessSecurity(*security);
  LOG(INFO) << "version " << VersionString() << "; transport: " << (*security)->Describe();
  if ((*security)->token().empty()) {
    LOG(WARNING) << "no cluster token (--cluster_token_file, $PS_CLUSTER_TOKEN): this cluster is "
                    "open: anyone who reaches its ports may register nodes and read, write or "
                    "restore any job (fine for development on one machine; see "
                    "docs/operations.md, Security)";
  }
  return security;
}

absl::StatusOr<std::string> LocalAddressToward(const std::string& host_port) {
  std::string host;
  int port = -1;
  SplitHostPort(host_port, &host, &port);
  if (host.empty()) return absl::InvalidArgumentError(absl::StrCat("no host in '", host_port, "'"));
  addrinfo hints = {};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int rc =
          getaddrinfo(host.c_str(), port > 0 ? std::to_string(port).c_str() : "9", &hints, &found);
      rc != 0) {
    return absl::NotFoundError(absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  absl::Status last = absl::NotFoundError(absl::StrCat("no address for ", host));
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local = {};
    socklen_t len = sizeof(local);
    // A UDP connect only picks the route and the source address: nothing is sent.
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
      last = absl::UnavailableError(absl::StrCat("no route to ", host, ": ", std::strerror(errno)));
      close(fd);
      continue;
    }
    close(fd);
    char text[INET6_ADDRSTRLEN] = {};
    const void* addr =
        local.ss_family == AF_INET6
            ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&local)->sin6_addr)
            : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&local)->sin_addr);
    if (inet_ntop(local.ss_family, addr, text, sizeof(text)) == nullptr) continue;
    freeaddrinfo(found);
    return std::string(text);
  }
  freeaddrinfo(found);
  return last;
}

std::string AdvertiseHost(const std::string& advertise, const std::string& listen,
                          const std::string& scheduler) {
  std::string host;
  int port = -1;
  if (!advertise.empty()) {
    SplitHostPort(advertise, &host, &port);
    return host;
  }
  SplitHostPort(listen, &host, &port);
  if (!IsWildcard(host)) return host;
  if (!scheduler.empty()) {
    absl::StatusOr<std::string> local = LocalAddressToward(scheduler);
    if (local.ok()) return *local;
    LOG(WARNING) << "no --advertise, and the address toward the scheduler " << scheduler
                 << " is unknown (" << local.status().message() << "): advertising host name "
                 << HostName();
  }
  return HostName();
}

std::string NodeAddress(const std::string& advertise, const std::string& listen, int port,
                        const std::string& scheduler) {
  std::string host;
  int advertised_port = -1;
  SplitHostPort(advertise, &host, &advertised_port);
  if (!advertise.empty() && advertised_port > 0) return advertise;
  return JoinHostPort(AdvertiseHost(advertise, listen, scheduler), port);
}

absl::Status WritePortFileFlag(const std::string& flag, const std::string& path, int port) {
  if (path.empty()) return absl::OkStatus();
  absl::Status s = WritePortFile(path, port);
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(flag, ": ", s.message()));
}

}  // namespace ps
