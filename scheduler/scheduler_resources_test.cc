// What the scheduler bounds and frees (scheduler_resources.cc): drop orders for the jobs that
// end, the cap on nodes (dead ones forgotten to make room) and the cap on pending jobs.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/internal/scheduler_fixture.h"
#include "scheduler/job_dropper.h"
#include "scheduler/scheduler.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Records the orders (the scheduler calls it with its lock held, from the test's thread).
class FakeJobDropper : public JobDropper {
 public:
  void Drop(DropOrder order) override { orders.push_back(std::move(order)); }
  std::vector<std::pair<std::string, std::vector<std::string>>> Orders() const {
    std::vector<std::pair<std::string, std::vector<std::string>>> out;
    for (const DropOrder& o : orders) out.emplace_back(o.job_id, o.servers);
    return out;
  }
  std::vector<DropOrder> orders;
};

class SchedulerResourcesTest : public SchedulerFixture {
 protected:
  SchedulerResourcesTest() { dropper_ = &fake_; }

  std::string Submit(int num_workers, int num_servers) {
    v1::JobSpec spec;
    spec.set_model("fashion_mlp");
    spec.set_num_workers(num_workers);
    spec.set_num_servers(num_servers);
    spec.set_data_dir(dir_.path());
    auto id = scheduler_->SubmitJob(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : "";
  }
  void Report(uint64_t node_id, const std::string& job_id, bool finished,
              const std::string& error = "") {
    v1::WorkerProgress progress;
    progress.set_job_id(job_id);
    progress.set_finished(finished);
    progress.set_error(error);
    Heartbeat(node_id, &progress);
  }
  absl::StatusOr<v1::RegisterResponse> TryRegister(v1::NodeRole role,
                                                   const std::string& address = "",
                                                   const std::string& secret = "") {
    v1::RegisterRequest req;
    req.set_role(role);
    req.set_node_secret(secret);
    req.set_address(address.empty() && role == v1::SERVER ? "10.0.9.9:7100" : address);
    return scheduler_->Register(req);
  }

  FakeJobDropper fake_;
};

// Succeeded, failed or cancelled: the job's servers are told to drop it, once, when it ends.
TEST_F(SchedulerResourcesTest, AJobThatEndsIsDroppedOnItsServers) {
  const uint64_t s1 = Register(v1::SERVER);
  const uint64_t s2 = Register(v1::SERVER);
  const uint64_t w1 = Register(v1::WORKER);
  const uint64_t w2 = Register(v1::WORKER);
  const std::string done = Submit(2, 2);
  ASSERT_EQ(Job(done).state(), v1::RUNNING);
  Report(w1, done, true);
  EXPECT_THAT(fake_.orders, IsEmpty());  // w2 still trains
  Report(w2, done, true);
  ASSERT_EQ(Job(done).state(), v1::SUCCEEDED);
  EXPECT_THAT(fake_.Orders(),
              ElementsAre(std::make_pair(
                  done, std::vector<std::string>{Node(s1).address(), Node(s2).address()})));

  const std::string failed = Submit(1, 1);
  ASSERT_EQ(Job(failed).state(), v1::RUNNING);
  Report(Job(failed).worker_nodes(0), failed, false, "boom");
  ASSERT_EQ(Job(failed).state(), v1::FAILED);
  const std::string cancelled = Submit(1, 0);  // every live server
  ASSERT_EQ(Job(cancelled).state(), v1::RUNNING);
  ASSERT_TRUE(scheduler_->CancelJob(cancelled).ok());
  ASSERT_EQ(fake_.orders.size(), 3u);
  EXPECT_EQ(fake_.orders[1].job_id, failed);
  EXPECT_EQ(fake_.orders[1].servers.size(), 1u);
  EXPECT_EQ(fake_.orders[2].job_id, cancelled);
  EXPECT_EQ(fake_.orders[2].servers,
            (std::vector<std::string>{Node(s1).address(), Node(s2).address()}));
  Heartbeat(w1);
  Heartbeat(w2);
  EXPECT_EQ(fake_.orders.size(), 3u);  // nothing more for jobs that already ended
}

// A job cancelled before it started, or whose only server died, has nothing to drop.
TEST_F(SchedulerResourcesTest, NoOrderForAJobWithoutAliveServers) {
  const std::string pending = Submit(1, 1);  // no node yet
  ASSERT_TRUE(scheduler_->CancelJob(pending).ok());
  const uint64_t server = Register(v1::SERVER);
  const uint64_t worker = Register(v1::WORKER);
  const std::string job_id = Submit(1, 1);
  ASSERT_EQ(Job(job_id).state(), v1::RUNNING);
  KillNode(server, {worker});  // no server left to take its slots: the job fails
  ASSERT_EQ(Job(job_id).state(), v1::FAILED) << Job(job_id).reason();
  EXPECT_THAT(fake_.orders, IsEmpty());
}

TEST_F(SchedulerResourcesTest, RegisterBeyondTheNodeCapIsResourceExhausted) {
  options_.max_nodes = 3;
  Reopen();
  const uint64_t w1 = Register(v1::WORKER);
  Register(v1::WORKER);
  const uint64_t s1 = Register(v1::SERVER);
  auto refused = TryRegister(v1::WORKER);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--max_nodes=3"));
  EXPECT_EQ(scheduler_->ListNodes().size(), 3u);
  // The nodes registered still work.
  EXPECT_FALSE(Heartbeat(w1).reregister());
  EXPECT_FALSE(Heartbeat(s1).reregister());
  // A server registering again at its address (with its secret) replaces the alive entry even
  // at the cap.
  auto restarted = TryRegister(v1::SERVER, Node(s1).address(), Secret(s1));
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_EQ(Node(s1).state(), v1::DEAD);
}

// Dead nodes do not count for ever: the oldest that no job needs are forgotten (for good: the
// state dir too) to let a node in; a node told to re-register gets back in that way.
TEST_F(SchedulerResourcesTest, DeadNodesAreForgottenToMakeRoom) {
  options_.max_nodes = 2;
  Reopen();
  const uint64_t w1 = Register(v1::WORKER);
  const uint64_t w2 = Register(v1::WORKER);
  KillNode(w1, {w2});
  EXPECT_TRUE(Heartbeat(w1).reregister());
  auto back = TryRegister(v1::WORKER);  // w1 again, with a new id
  ASSERT_TRUE(back.ok()) << back.status();
  std::vector<uint64_t> ids;
  for (const v1::NodeInfo& node : scheduler_->ListNodes()) ids.push_back(node.node_id());
  EXPECT_THAT(ids, ElementsAre(w2, back->node_id()));
  Reopen();  // the forgotten node is gone from the state dir as well
  ids.clear();
  for (const v1::NodeInfo& node : scheduler_->ListNodes()) ids.push_back(node.node_id());
  EXPECT_THAT(ids, ElementsAre(w2, back->node_id()));
  // Both alive: nothing to forget.
  EXPECT_EQ(TryRegister(v1::WORKER).status().code(), absl::StatusCode::kResourceExhausted);
}

// Only dead nodes make room: the alive nodes of a running job stay, and the job runs on.
TEST_F(SchedulerResourcesTest, AliveNodesAreNeverForgotten) {
  options_.max_nodes = 3;
  Reopen();
  const uint64_t server = Register(v1::SERVER);
  const uint64_t worker = Register(v1::WORKER);
  const std::string job_id = Submit(1, 1);
  ASSERT_EQ(Job(job_id).state(), v1::RUNNING);
  const uint64_t spare = Register(v1::SERVER);
  KillNode(spare, {server, worker});          // dead, in no job
  EXPECT_TRUE(TryRegister(v1::WORKER).ok());  // the spare's entry goes
  EXPECT_EQ(TryRegister(v1::WORKER).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Job(job_id).state(), v1::RUNNING);
}

TEST_F(SchedulerResourcesTest, SubmitBeyondThePendingCapIsResourceExhausted) {
  options_.max_pending_jobs = 2;
  Reopen();
  const std::string first = Submit(1, 1);  // no nodes: both stay pending
  Submit(1, 1);
  v1::JobSpec spec = Job(first).spec();
  auto refused = scheduler_->SubmitJob(spec);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--max_pending_jobs=2"));
  EXPECT_EQ(scheduler_->ListJobs().size(), 2u);
  ASSERT_TRUE(scheduler_->CancelJob(first).ok());
  EXPECT_TRUE(scheduler_->SubmitJob(spec).ok());
  // Jobs that start make room too.
  Register(v1::SERVER);
  Register(v1::WORKER);
  EXPECT_TRUE(scheduler_->SubmitJob(spec).ok());
}

TEST(SchedulerOptionsTest, CapsMustBePositive) {
  SchedulerOptions options;
  options.state_dir = "/tmp/unused";
  EXPECT_TRUE(options.Validate().ok());
  options.max_nodes = 0;
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
  options.max_nodes = 1;
  options.max_pending_jobs = 0;
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
