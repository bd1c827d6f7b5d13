// HealthServer over real gRPC: grpc.health.v1.Health/Check called with the generic API.
#include "common/health_server.h"

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

namespace ps {
namespace {

int CheckHealth(int port) { return testing::HealthStatus(absl::StrCat("127.0.0.1:", port)); }

TEST(HealthServerTest, NotServingUntilToldThenServing) {
  auto server = HealthServer::Start("127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  EXPECT_EQ(CheckHealth((*server)->port()), 2);
  (*server)->SetServing(true);
  EXPECT_EQ(CheckHealth((*server)->port()), 1);
  (*server)->SetServing(false);
  EXPECT_EQ(CheckHealth((*server)->port()), 2);
  (*server)->Shutdown();
  (*server)->Shutdown();  // idempotent
}

TEST(HealthServerTest, BadAddressIsAnError) { EXPECT_FALSE(HealthServer::Start("no-port").ok()); }

}  // namespace
}  // namespace ps
