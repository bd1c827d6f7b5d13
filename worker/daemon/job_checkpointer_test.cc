// JobCheckpointer against a real gRPC scheduler service on loopback that refuses every checkpoint.
#include "worker/daemon/job_checkpointer.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

// Answers BeginCheckpoint with UNAVAILABLE, counting the calls; every other method is
// UNIMPLEMENTED (the base class).
class RefusingScheduler final : public v1::Scheduler::Service {
 public:
  grpc::Status BeginCheckpoint(grpc::ServerContext*, const v1::BeginCheckpointRequest*,
                               v1::CheckpointInfo*) override {
    ++begins;
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the scheduler is restarting");
  }
  std::atomic<int> begins{0};
};

TEST(JobCheckpointerTest, AFailedBeginIsNotRetriedOnEveryStep) {
  RefusingScheduler service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = v1::Scheduler::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  {
    // A psctl request is pending; the client is never reached (no checkpoint begins).
    JobCheckpointer checkpointer(
        stub.get(), /*client=*/nullptr, "job-1", v1::CheckpointPolicy(),
        /*shard_epoch=*/1, [] { return uint64_t{1}; },
        /*requests_done=*/0);
    for (int64_t clock = 1; clock <= 50; ++clock) checkpointer.MaybeCheckpoint(clock);
    EXPECT_EQ(checkpointer.requests_done(), 0u);  // still pending: tried again later
  }
  EXPECT_EQ(service.begins.load(), 1);
  server->Shutdown();
}

}  // namespace
}  // namespace ps
