// SchedulerServer over real gRPC: the health service (called with the generic API, as a probe
// would) and the metrics address ListNodes reports.
#include "scheduler/scheduler_server.h"

#include <grpcpp/completion_queue.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <memory>
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

// SIGTERM's path (Drain, then Shutdown with a deadline) ends in bounded time even while clients
// hold calls open: calls that never finish sending are cancelled at the deadline.
TEST(SchedulerServerTest, ShutdownIsBoundedWithCallsHeldOpen) {
  ScopedTempDir dir;
  SchedulerOptions options;
  options.listen = "127.0.0.1:0";
  options.state_dir = dir.path() + "/state";
  auto server = SchedulerServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  grpc::CompletionQueue cq;
  constexpr int kCalls = 8;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::GenericClientAsyncReaderWriter>> calls;
  for (int i = 0; i < kCalls; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    calls.push_back(generic.PrepareCall(contexts.back().get(), "/ps.v1.Scheduler/ListNodes", &cq));
    calls.back()->StartCall(reinterpret_cast<void*>(static_cast<intptr_t>(i)));
  }
  for (int i = 0; i < kCalls; ++i) {  // every call started: the server holds them open
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(cq.Next(&tag, &ok));
  }
  // And a well-behaved client is still served meanwhile.
  auto stub = v1::Scheduler::NewStub(channel);
  {
    grpc::ClientContext ctx;
    v1::ListNodesResponse nodes;
    ASSERT_TRUE(stub->ListNodes(&ctx, v1::ListNodesRequest(), &nodes).ok());
  }

  const absl::Time start = absl::Now();
  (*server)->Drain();
  (*server)->Shutdown(absl::Milliseconds(200));
  const absl::Duration took = absl::Now() - start;
  EXPECT_LT(took, absl::Seconds(5)) << "Shutdown took " << took;

  for (auto& context : contexts) context->TryCancel();
  // Finish writes each status when its tag comes out of cq below: they outlive the loop.
  std::vector<grpc::Status> statuses(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    calls[i]->Finish(&statuses[i], reinterpret_cast<void*>(static_cast<intptr_t>(100 + i)));
  }
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace ps
