// A gtest fixture over a Scheduler on a real RocksDB in a temp dir, with a fake clock: what the
// scheduler's logic tests share (registration, heartbeats, time, node deaths).
#ifndef PS_SCHEDULER_INTERNAL_SCHEDULER_FIXTURE_H_
#define PS_SCHEDULER_INTERNAL_SCHEDULER_FIXTURE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/node_identity.h"
#include "gtest/gtest.h"
#include "scheduler/internal/test_util.h"
#include "scheduler/scheduler.h"

namespace ps {

class SchedulerFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.state_dir = dir_.path() + "/state";
    Reopen();
  }

  // Opens the scheduler (again) over the same state dir, as a restarted daemon does.
  void Reopen() {
    scheduler_.reset();
    auto scheduler = Scheduler::Open(options_, clock_.AsFunction(), /*metrics=*/nullptr, dropper_);
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    scheduler_ = std::move(*scheduler);
  }

  // Servers get addresses 10.0.0.<n>:7100, n = 1, 2, ... in registration order.
  uint64_t Register(v1::NodeRole role) {
    v1::RegisterRequest req;
    req.set_role(role);
    if (role == v1::SERVER) req.set_address(absl::StrCat("10.0.0.", ++servers_, ":7100"));
    req.set_hostname("host");
    auto resp = scheduler_->Register(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok()) return 0;
    secrets_[resp->node_id()] = resp->node_secret();
    return resp->node_id();
  }

  v1::HeartbeatResponse Heartbeat(uint64_t node_id, const v1::WorkerProgress* progress = nullptr) {
    v1::HeartbeatRequest req;
    req.set_node_id(node_id);
    req.set_node_secret(Secret(node_id));
    if (progress != nullptr) *req.mutable_progress() = *progress;
    auto resp = scheduler_->Heartbeat(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? *resp : v1::HeartbeatResponse();
  }

  // The secret node `node_id` got at registration ("" for one this fixture did not register).
  std::string Secret(uint64_t node_id) const {
    auto it = secrets_.find(node_id);
    return it == secrets_.end() ? "" : it->second;
  }

  // What server `node_id` answers for its checkpoint shard (CheckpointResponse.receipt).
  std::string Receipt(uint64_t node_id, const std::string& job_id, uint64_t checkpoint_id,
                      uint64_t rows, uint64_t bytes) const {
    return CheckpointReceipt(Secret(node_id), job_id, checkpoint_id, rows, bytes);
  }

  v1::JobInfo Job(const std::string& job_id) {
    auto job = scheduler_->GetJob(job_id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : v1::JobInfo();
  }

  v1::NodeInfo Node(uint64_t node_id) {
    for (const v1::NodeInfo& node : scheduler_->ListNodes()) {
      if (node.node_id() == node_id) return node;
    }
    ADD_FAILURE() << "no node " << node_id;
    return v1::NodeInfo();
  }

  // Moves time on by `d`, then the ticker's turn.
  void Advance(absl::Duration d) {
    clock_.Advance(d);
    ASSERT_TRUE(scheduler_->Tick().ok());
  }

  // Lets `silent` miss heartbeats until it is declared dead; the others keep heartbeating.
  void KillNode(uint64_t silent, const std::vector<uint64_t>& others) {
    for (int i = 0; i < 3; ++i) {
      Advance(absl::Seconds(2));
      for (uint64_t id : others) Heartbeat(id);
    }
    ASSERT_EQ(Node(silent).state(), v1::DEAD);
  }

  static bool HasEvent(const v1::JobInfo& job, const std::string& message) {
    for (const v1::JobEvent& event : job.events()) {
      if (event.message() == message) return true;
    }
    return false;
  }

  static bool HasEventStartingWith(const v1::JobInfo& job, const std::string& prefix) {
    for (const v1::JobEvent& event : job.events()) {
      if (event.message().rfind(prefix, 0) == 0) return true;
    }
    return false;
  }

  ScopedTempDir dir_;
  FakeClock clock_;
  SchedulerOptions options_;
  JobDropper* dropper_ = nullptr;  // set it before SetUp() to see the drop orders
  std::unique_ptr<Scheduler> scheduler_;
  int servers_ = 0;
  std::map<uint64_t, std::string> secrets_;  // by node id, from Register()
};

}  // namespace ps

#endif  // PS_SCHEDULER_INTERNAL_SCHEDULER_FIXTURE_H_
