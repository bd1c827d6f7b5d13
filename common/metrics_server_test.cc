// MetricsServer over real HTTP (a plain socket), and the process metrics every daemon exports.
#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/process_metrics.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

// GET http://127.0.0.1:<port><path> over HTTP/1.0; the whole answer (headers and body), or ""
// when the connection fails.
std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string answer;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: localhost\r\n\r\n");
    if (send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) answer.append(buf, n);
    }
  }
  close(fd);
  return answer;
}

std::string Scrape(const prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

// The value of the sample line that starts with `series` (name{labels}); NaN if none.
double Sample(const std::string& text, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, series) || !absl::ConsumePrefix(&line, " ")) continue;
    double v = 0;
    if (absl::SimpleAtod(line.substr(0, line.find(' ')), &v)) return v;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

TEST(MetricsServerTest, ServesTheRegistryOverHttp) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter()
      .Name("ps_test_things_total")
      .Help("things")
      .Register(*registry)
      .Add({{"kind", "a"}})
      .Increment(3);
  auto server = MetricsServer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);

  const std::string answer = HttpGet((*server)->port(), "/metrics");
  EXPECT_EQ(answer.rfind("HTTP/1.", 0), 0u) << answer;
  EXPECT_NE(answer.find(" 200 "), std::string::npos) << answer;
  EXPECT_NE(answer.find("# HELP ps_test_things_total things"), std::string::npos) << answer;
  EXPECT_NE(answer.find("ps_test_things_total{kind=\"a\"} 3"), std::string::npos) << answer;
}

TEST(MetricsServerTest, BusyPortIsUnavailable) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto first = MetricsServer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = MetricsServer::Start(absl::StrCat("127.0.0.1:", (*first)->port()), registry);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
}

TEST(MetricsServerTest, AddressWithoutPortIsInvalidArgument) {
  auto registry = std::make_shared<prometheus::Registry>();
  for (const std::string listen : {"", "localhost", "9100"}) {
    auto server = MetricsServer::Start(listen, registry);
    ASSERT_FALSE(server.ok()) << listen;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << server.status();
  }
}

TEST(ProcessMetricsTest, ExportsSaneValuesOfThisProcess) {
  prometheus::Registry registry;
  auto metrics = ProcessMetrics::Start(registry, "test");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  ASSERT_TRUE((*metrics)->Update().ok());
  const std::string text = Scrape(registry);

  const double resident = Sample(text, "ps_process_resident_memory_bytes{role=\"test\"}");
  const double virt = Sample(text, "ps_process_virtual_memory_bytes{role=\"test\"}");
  const double fds = Sample(text, "ps_process_open_fds{role=\"test\"}");
  const double start = Sample(text, "ps_process_start_time_seconds{role=\"test\"}");
  const double cpu = Sample(text, "ps_process_cpu_seconds_total{role=\"test\"}");
  EXPECT_GT(resident, 1 << 20) << text;
  EXPECT_GE(virt, resident) << text;
  EXPECT_GE(fds, 3) << text;  // stdin, stdout, stderr
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  EXPECT_LE(start, now + 5) << text;
  EXPECT_GT(start, now - 7 * 24 * 3600) << text;  // started less than a week ago
  EXPECT_GE(cpu, 0) << text;
  EXPECT_EQ(
      Sample(text, absl::StrCat("ps_build_info{role=\"test\",version=\"", BuildVersion(), "\"}")),
      1)
      << text;
}

TEST(ProcessMetricsTest, OpenFdsFollowsTheProcess) {
  prometheus::Registry registry;
  auto metrics = ProcessMetrics::Start(registry, "test", absl::ZeroDuration());
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  ASSERT_TRUE((*metrics)->Update().ok());
  const double before = Sample(Scrape(registry), "ps_process_open_fds{role=\"test\"}");
  int fds[10];
  for (int& fd : fds) fd = dup(0);
  ASSERT_TRUE((*metrics)->Update().ok());
  const double during = Sample(Scrape(registry), "ps_process_open_fds{role=\"test\"}");
  for (int fd : fds) close(fd);
  EXPECT_EQ(during - before, 10);
}

TEST(ProcessMetricsTest, RefreshThreadUpdatesTheGauges) {
  prometheus::Registry registry;
  auto metrics = ProcessMetrics::Start(registry, "test", absl::Milliseconds(10));
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const double before = Sample(Scrape(registry), "ps_process_open_fds{role=\"test\"}");
  int fds[10];
  for (int& fd : fds) fd = dup(0);
  double now = before;
  for (int i = 0; i < 500 && now != before + 10; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
    now = Sample(Scrape(registry), "ps_process_open_fds{role=\"test\"}");
  }
  for (int fd : fds) close(fd);
  EXPECT_EQ(now, before + 10);
}

}  // namespace
}  // namespace ps
