// SchedulerServer over real gRPC: the health service (called with the generic API, as a probe
// would) and the metrics address ListNodes reports.
#include "scheduler/scheduler_server.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/testing/daemon_probes.h"
#include "gtest/gtest.h"
#include "ps/v1/scheduler.grpc.pb.h"
#include "scheduler/internal/test_util.h"

namespace ps {
namespace {

int CheckHealth(int port, const std::string& service = "") {
  return testing::HealthStatus(absl::StrCat("127.0.0.1:", port), service);
}

TEST(SchedulerServerTest, HealthIsServingUntilDrained) {
  ScopedTempDir dir;
  SchedulerOptions options;
  options.listen = "127.0.0.1:0";
  options.state_dir = dir.path() + "/state";
  options.metrics_address = "example:9100";
  auto server = SchedulerServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  EXPECT_EQ(CheckHealth(port), 1);
  EXPECT_EQ(CheckHealth(port, "ps.v1.Scheduler"), 1);

  // ListNodes tells the scheduler's own metrics address.
  auto stub = v1::Scheduler::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::ListNodesResponse nodes;
  ASSERT_TRUE(stub->ListNodes(&ctx, v1::ListNodesRequest(), &nodes).ok());
  EXPECT_EQ(nodes.metrics_address(), "example:9100");

  (*server)->Drain();
  EXPECT_EQ(CheckHealth(port), 2);
  EXPECT_EQ(CheckHealth(port, "ps.v1.Scheduler"), 2);
  (*server)->Shutdown();
}

}  // namespace
}  // namespace ps
