// HealthServer over real gRPC: grpc.health.v1.Health/Check called with the generic API.
#include "worker/health_server.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

// Health/Check of the whole server (empty service name): 1 SERVING, 2 NOT_SERVING, -1 on error.
int CheckHealth(int port) {
  grpc::GenericStub stub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  grpc::Slice empty("");  // HealthCheckRequest{service: ""}: no bytes
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (!status.ok()) return -1;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return -1;
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  // HealthCheckResponse{status = 1 (varint)}: 0x08 <status>; absent means UNKNOWN (0).
  if (bytes.empty()) return 0;
  if (bytes.size() != 2 || bytes[0] != 0x08) return -1;
  return bytes[1];
}

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
