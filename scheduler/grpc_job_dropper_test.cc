// GrpcJobDropper against in-process fake parameter servers: every order reaches every server;
// a server that is down or does not answer is skipped within the deadline.
#include "scheduler/grpc_job_dropper.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/v1/parameter_server.grpc.pb.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Answers DropJob (after `delay`, unless the call is cancelled first) and records the job ids.
class FakeServer final : public v1::ParameterServer::Service {
 public:
  explicit FakeServer(absl::Duration delay = absl::ZeroDuration()) : delay_(delay) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~FakeServer() override { server_->Shutdown(absl::ToChronoTime(absl::Now())); }

  grpc::Status DropJob(grpc::ServerContext* ctx, const v1::DropJobRequest* req,
                       v1::DropJobResponse* resp) override {
    {
      absl::MutexLock l(&mu_);
      ++calls_;
    }
    const absl::Time until = absl::Now() + delay_;
    while (absl::Now() < until && !ctx->IsCancelled()) absl::SleepFor(absl::Milliseconds(10));
    absl::MutexLock l(&mu_);
    jobs_.push_back(req->job_id());
    resp->set_tables_dropped(1);
    return grpc::Status::OK;
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  std::vector<std::string> jobs() {
    absl::MutexLock l(&mu_);
    return jobs_;
  }
  // Waits (bounded) until a DropJob call arrived.
  bool Called() {
    absl::MutexLock l(&mu_);
    auto called = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_ > 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&called), absl::Seconds(60));
  }

 private:
  const absl::Duration delay_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  std::vector<std::string> jobs_ ABSL_GUARDED_BY(mu_);
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

// A port nothing listens on (bound and closed).
std::string ClosedAddress() {
  FakeServer gone;
  return gone.address();
}

TEST(GrpcJobDropperTest, EveryOrderReachesEveryOneOfItsServers) {
  FakeServer a, b;
  GrpcJobDropper dropper;
  dropper.Drop({"job-1", {a.address(), b.address()}});
  dropper.Drop({"job-2", {a.address()}});
  dropper.Drop({"job-3", {}});  // nothing to do
  ASSERT_TRUE(dropper.Flush(absl::Seconds(60)));
  EXPECT_THAT(a.jobs(), ElementsAre("job-1", "job-2"));
  EXPECT_THAT(b.jobs(), ElementsAre("job-1"));
}

// A server that is down, or that does not answer within the deadline, is skipped: the other
// servers of the order and the later orders are served all the same.
TEST(GrpcJobDropperTest, ServersDownOrSilentAreSkipped) {
  FakeServer up;
  FakeServer silent(absl::Seconds(60));
  GrpcJobDropperOptions options;
  options.rpc_deadline = absl::Milliseconds(500);
  GrpcJobDropper dropper(options);
  dropper.Drop({"job-1", {ClosedAddress(), silent.address(), up.address()}});
  dropper.Drop({"job-2", {up.address()}});
  ASSERT_TRUE(dropper.Flush(absl::Seconds(60)));
  EXPECT_THAT(up.jobs(), ElementsAre("job-1", "job-2"));
}

// Orders still queued when the dropper goes are abandoned: its destructor does not wait for
// them (only for the calls in flight, bounded by the deadline).
TEST(GrpcJobDropperTest, DestructionAbandonsQueuedOrders) {
  FakeServer silent(absl::Seconds(60));
  FakeServer later;
  {
    GrpcJobDropperOptions options;
    options.rpc_deadline = absl::Milliseconds(500);
    GrpcJobDropper dropper(options);
    dropper.Drop({"job-1", {silent.address()}});
    for (int i = 2; i < 100; ++i) dropper.Drop({absl::StrCat("job-", i), {later.address()}});
    EXPECT_FALSE(dropper.Flush(absl::ZeroDuration()));
  }
  EXPECT_THAT(later.jobs(), IsEmpty());  // job-1 held the sender until the end
}

TEST(GrpcJobDropperTest, OrdersBeyondTheQueueAreRefused) {
  FakeServer silent(absl::Seconds(60));
  FakeServer later;
  GrpcJobDropperOptions options;
  options.rpc_deadline = absl::Milliseconds(500);
  options.max_queued = 2;
  GrpcJobDropper dropper(options);
  dropper.Drop({"job-1", {silent.address()}});
  ASSERT_TRUE(silent.Called());  // job-1 left the queue and holds the sender
  for (int i = 2; i < 10; ++i) dropper.Drop({absl::StrCat("job-", i), {later.address()}});
  ASSERT_TRUE(dropper.Flush(absl::Seconds(60)));
  EXPECT_THAT(later.jobs(), ElementsAre("job-2", "job-3"));
}

}  // namespace
}  // namespace ps
