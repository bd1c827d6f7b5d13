// JobCheckpointer against real gRPC services on loopback: a scheduler that refuses every
// checkpoint, and one that takes them with a server that never confirms its write.
#include "worker/daemon/job_checkpointer.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "ps/v1/parameter_server.grpc.pb.h"
#include "client/rpc_client.h"

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

// Takes every checkpoint (one shard) and records how each ended.
class AcceptingScheduler final : public v1::Scheduler::Service {
 public:
  grpc::Status BeginCheckpoint(grpc::ServerContext*, const v1::BeginCheckpointRequest*,
                               v1::CheckpointInfo* info) override {
    info->set_checkpoint_id(7);
    info->add_shards()->set_path("/ckpt/shard-0");
    return grpc::Status::OK;
  }
  grpc::Status FinishCheckpoint(grpc::ServerContext*, const v1::FinishCheckpointRequest* req,
                                v1::CheckpointInfo* info) override {
    absl::MutexLock l(&mu);
    finished_error = req->error();
    ++finishes;
    info->set_state(v1::CHECKPOINT_FAILED);
    return grpc::Status::OK;
  }
  absl::Mutex mu;
  std::string finished_error ABSL_GUARDED_BY(mu);
  int finishes ABSL_GUARDED_BY(mu) = 0;
};

// A parameter server that copies its rows at once but never finishes writing them, as one cut
// off from the worker looks: AwaitCheckpoint runs to the caller's deadline.
class NeverWritingServer final : public v1::ParameterServer::Service {
 public:
  grpc::Status Checkpoint(grpc::ServerContext*, const v1::CheckpointRequest*,
                          v1::CheckpointResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status AwaitCheckpoint(grpc::ServerContext* ctx, const v1::AwaitCheckpointRequest*,
                               v1::CheckpointResponse*) override {
    ++awaits;
    while (!ctx->IsCancelled() && absl::FromChrono(ctx->deadline()) > absl::Now()) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "still writing");
  }
  std::atomic<int> awaits{0};
};

// A run that ends while a checkpoint's write is unconfirmed (a new shard map after a server was
// cut off) must not wait for it (it waited up to 30 minutes): the destructor returns, and the
// checkpoint is reported failed.
TEST(JobCheckpointerTest, TheRunsEndStopsWaitingForAnUnconfirmedWrite) {
  AcceptingScheduler scheduler;
  NeverWritingServer ps_service;
  int scheduler_port = 0;
  int ps_port = 0;
  grpc::ServerBuilder sb;
  sb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &scheduler_port);
  sb.RegisterService(&scheduler);
  std::unique_ptr<grpc::Server> scheduler_server = sb.BuildAndStart();
  ASSERT_NE(scheduler_server, nullptr);
  grpc::ServerBuilder pb;
  pb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &ps_port);
  pb.RegisterService(&ps_service);
  std::unique_ptr<grpc::Server> ps_server = pb.BuildAndStart();
  ASSERT_NE(ps_server, nullptr);

  RpcClientOptions options;
  options.servers = {absl::StrCat("127.0.0.1:", ps_port)};
  options.job_id = "job-1";
  auto client = RpcClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  auto stub = v1::Scheduler::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", scheduler_port),
                                                         grpc::InsecureChannelCredentials()));
  v1::CheckpointPolicy policy;
  policy.set_every_steps(1);
  {
    JobCheckpointer checkpointer(
        stub.get(), client->get(), "job-1", policy, /*shard_epoch=*/1, [] { return uint64_t{0}; },
        /*requests_done=*/0);
    checkpointer.MaybeCheckpoint(1);  // begins, copies, and leaves the write to a thread
    while (ps_service.awaits.load() == 0) absl::SleepFor(absl::Milliseconds(5));
  }  // the run ends here
  absl::MutexLock l(&scheduler.mu);
  EXPECT_EQ(scheduler.finishes, 1);
  EXPECT_NE(scheduler.finished_error.find("the run ended"), std::string::npos)
      << scheduler.finished_error;
  ps_server->Shutdown();
  scheduler_server->Shutdown();
}

}  // namespace
}  // namespace ps
