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
#include "gtest/gtest.h"
#include "ps/v1/scheduler.grpc.pb.h"
#include "scheduler/internal/test_util.h"

namespace ps {
namespace {

// Health/Check of `service` ("" = the whole server): 1 SERVING, 2 NOT_SERVING, 0 UNKNOWN, -1 on
// error. The request is hand-encoded: HealthCheckRequest{service = 1 (string)}.
int CheckHealth(int port, const std::string& service = "") {
  grpc::GenericStub stub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  std::string encoded;
  if (!service.empty()) {
    encoded.push_back(0x0a);                               // field 1, length-delimited
    encoded.push_back(static_cast<char>(service.size()));  // names shorter than 128 bytes
    encoded += service;
  }
  grpc::Slice slice(encoded);
  grpc::ByteBuffer request(&slice, 1);
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
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  // HealthCheckResponse{status = 1 (enum varint)}: 0x08 <status>; empty means UNKNOWN (0).
  if (bytes.empty()) return 0;
  if (bytes.size() != 2 || bytes[0] != 0x08) return -1;
  return bytes[1];
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
