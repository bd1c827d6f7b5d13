// Node identity (scheduler_resources.cc): the secret a registration answers and heartbeats
// need, the addresses a registration may give and take, the nodes forgotten after
// --forget_dead_nodes_after, the cap on registrations per minute, and who may report a job's
// checkpoints (its workers, on its servers' receipts).
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/node_identity.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/internal/scheduler_fixture.h"
#include "scheduler/scheduler.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

class SchedulerNodesTest : public SchedulerFixture {
 protected:
  absl::StatusOr<v1::RegisterResponse> TryRegister(v1::NodeRole role, const std::string& address,
                                                   const std::string& secret = "") {
    v1::RegisterRequest req;
    req.set_role(role);
    req.set_address(address);
    req.set_node_secret(secret);
    return scheduler_->Register(req);
  }
  absl::Status TryHeartbeat(uint64_t node_id, const std::string& secret) {
    v1::HeartbeatRequest req;
    req.set_node_id(node_id);
    req.set_node_secret(secret);
    return scheduler_->Heartbeat(req).status();
  }
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
  bool Listed(uint64_t node_id) {
    for (const v1::NodeInfo& node : scheduler_->ListNodes()) {
      if (node.node_id() == node_id) return true;
    }
    return false;
  }
};

TEST_F(SchedulerNodesTest, HeartbeatsNeedTheSecretTheRegistrationAnswered) {
  const uint64_t w = Register(v1::WORKER);
  const uint64_t s = Register(v1::SERVER);
  ASSERT_EQ(Secret(w).size(), 64u);
  EXPECT_NE(Secret(w), Secret(s));
  EXPECT_TRUE(TryHeartbeat(w, Secret(w)).ok());
  for (const std::string& wrong : {std::string(), Secret(s), Secret(w) + "0"}) {
    absl::Status refused = TryHeartbeat(w, wrong);
    EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
    EXPECT_THAT(std::string(refused.message()), HasSubstr("node_secret"));
  }
  // The secret is the scheduler's and the node's own: never listed.
  for (const v1::NodeInfo& node : scheduler_->ListNodes()) EXPECT_TRUE(node.node_secret().empty());
  // A restarted scheduler still knows it.
  Reopen();
  EXPECT_TRUE(TryHeartbeat(w, Secret(w)).ok());
  EXPECT_EQ(TryHeartbeat(w, "").code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(SchedulerNodesTest, AddressesThatDoNotParseAreRefused) {
  for (const char* bad :
       {"not an address", "../../etc:99999", "host:0", "host:", ":7100", "host", "[::1]",
        "[::1]7100", "host:-1", "host:+80", "10.0.0.1:70000", "a/b:80", "-x:80", "[zz]:80"}) {
    auto refused = TryRegister(v1::SERVER, bad);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("address")) << bad;
  }
  v1::RegisterRequest metrics;
  metrics.set_role(v1::WORKER);
  metrics.set_metrics_address("nowhere");
  EXPECT_EQ(scheduler_->Register(metrics).status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* good : {"10.0.0.1:7100", "[::1]:7100", "host-a.example.com:80"}) {
    EXPECT_TRUE(TryRegister(v1::SERVER, good).ok()) << good;
  }
  EXPECT_TRUE(scheduler_->Tick().ok());
}

// Registering at a live server's address would declare it dead and move its job's slots: only
// the daemon itself (its secret) may, or anyone once the old one has been silent for the timeout.
TEST_F(SchedulerNodesTest, ALiveServersAddressNeedsItsSecret) {
  const uint64_t s1 = Register(v1::SERVER);
  const uint64_t w1 = Register(v1::WORKER);
  const std::string job = Submit(1, 1);
  ASSERT_EQ(Job(job).state(), v1::RUNNING);
  const std::string address = Node(s1).address();
  for (const std::string& secret : {std::string(), Secret(w1), std::string(64, '0')}) {
    auto refused = TryRegister(v1::SERVER, address, secret);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << refused.status();
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("node_secret"));
  }
  EXPECT_EQ(Node(s1).state(), v1::ALIVE);
  const uint64_t epoch = Job(job).shard_epoch();
  // The daemon itself, registering again: the old entry goes.
  auto again = TryRegister(v1::SERVER, address, Secret(s1));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Node(s1).state(), v1::DEAD);
  EXPECT_GT(Job(job).shard_epoch(), epoch);  // its slots moved to the new entry
  // A new process at the address of one silent for the heartbeat timeout: let in.
  clock_.Advance(options_.heartbeat_timeout + absl::Seconds(1));
  auto fresh = TryRegister(v1::SERVER, address);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(Node(again->node_id()).state(), v1::DEAD);
}

TEST_F(SchedulerNodesTest, DeadNodesAreForgottenAfterTheFlagTime) {
  options_.forget_dead_nodes_after = absl::Minutes(10);
  Reopen();
  const uint64_t s1 = Register(v1::SERVER);
  const uint64_t w1 = Register(v1::WORKER);
  const std::string job = Submit(1, 1);
  ASSERT_EQ(Job(job).state(), v1::RUNNING);
  const uint64_t w2 = Register(v1::WORKER);  // idle; falls silent
  auto live = [&] {
    Heartbeat(s1);
    Heartbeat(w1);
  };
  for (int i = 0; i < 4; ++i) {
    Advance(absl::Seconds(2));
    live();
  }
  ASSERT_EQ(Node(w2).state(), v1::DEAD);
  for (int i = 0; i < 10 * 30 - 4; ++i) {  // until w2 is 10 minutes silent
    Advance(absl::Seconds(2));
    live();
  }
  EXPECT_TRUE(Listed(w2));  // dead for less than 10 minutes: history still
  for (int i = 0; i < 3; ++i) {
    Advance(absl::Seconds(2));
    live();
  }
  EXPECT_FALSE(Listed(w2));
  EXPECT_TRUE(Listed(s1));
  EXPECT_TRUE(Listed(w1));
  Reopen();  // forgotten in the state dir too
  EXPECT_FALSE(Listed(w2));
  EXPECT_EQ(Job(job).state(), v1::RUNNING);
}

TEST_F(SchedulerNodesTest, RegistrationsPerMinuteAreCapped) {
  options_.max_registrations_per_minute = 3;
  Reopen();
  for (int i = 0; i < 3; ++i) Register(v1::WORKER);
  auto refused = TryRegister(v1::WORKER, "");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--max_registrations_per_minute"));
  clock_.Advance(absl::Seconds(61));
  EXPECT_TRUE(TryRegister(v1::WORKER, "").ok());
}

// Checkpoint bookkeeping comes from the job's own workers (or an admin), and a checkpoint is
// complete only on its servers' word (their receipts), never on a caller's figures.
TEST_F(SchedulerNodesTest, CheckpointCallsComeFromTheJobsWorkersOnServersWord) {
  const uint64_t s1 = Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const std::string job = Submit(1, 1);
  const uint64_t stranger = Register(v1::WORKER);  // idle: no worker of `job`
  ASSERT_EQ(Job(job).state(), v1::RUNNING);
  v1::BeginCheckpointRequest begin;
  begin.set_job_id(job);
  begin.set_clock(int64_t{1} << 62);
  begin.set_shard_epoch(Job(job).shard_epoch());
  for (const JobCaller& caller :
       {JobCaller(), JobCaller::Node(stranger, Secret(stranger)),
        JobCaller::Node(w0, Secret(stranger)), JobCaller::Node(s1, Secret(s1))}) {
    absl::Status refused = scheduler_->BeginCheckpoint(begin, caller).status();
    EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
  }
  EXPECT_EQ(scheduler_->RequestCheckpoint(job, JobCaller::Node(stranger, Secret(stranger)))
                .status()
                .code(),
            absl::StatusCode::kPermissionDenied);
  begin.set_clock(10);
  auto info = scheduler_->BeginCheckpoint(begin, JobCaller::Node(w0, Secret(w0)));
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->shards_size(), 1);
  EXPECT_EQ(info->shards(0).node_id(), s1);

  const JobCaller worker = JobCaller::Node(w0, Secret(w0));
  v1::FinishCheckpointRequest finish;
  finish.set_job_id(job);
  finish.set_checkpoint_id(info->checkpoint_id());
  v1::CheckpointShard* shard = finish.add_shards();
  shard->set_rows(UINT64_MAX);
  shard->set_bytes(UINT64_MAX);
  finish.set_write_seconds(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(scheduler_->FinishCheckpoint(finish, worker).status().code(),
            absl::StatusCode::kInvalidArgument);
  finish.set_write_seconds(1.5);
  EXPECT_EQ(scheduler_->FinishCheckpoint(finish, JobCaller::Node(stranger, Secret(stranger)))
                .status()
                .code(),
            absl::StatusCode::kPermissionDenied);
  // No receipt, or one the server did not make (the worker's own key): refused, still WRITING.
  for (const std::string& receipt :
       {std::string(),
        CheckpointReceipt(Secret(w0), job, info->checkpoint_id(), UINT64_MAX, UINT64_MAX)}) {
    shard->set_receipt(receipt);
    absl::Status refused = scheduler_->FinishCheckpoint(finish, worker).status();
    EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
    EXPECT_THAT(std::string(refused.message()), HasSubstr("receipt"));
  }
  // A real receipt for other figures does not cover these.
  shard->set_receipt(Receipt(s1, job, info->checkpoint_id(), 7, 700));
  EXPECT_EQ(scheduler_->FinishCheckpoint(finish, worker).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Job(job).latest_checkpoint_id(), 0u);
  // The server's word: complete.
  shard->set_rows(7);
  shard->set_bytes(700);
  auto done = scheduler_->FinishCheckpoint(finish, worker);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), v1::CHECKPOINT_COMPLETE);
  EXPECT_EQ(done->shards(0).rows(), 7u);

  // A restore failure report from outside the job fails nothing.
  v1::ReportRestoreFailureRequest report;
  report.set_job_id(job);
  report.set_shard_epoch(Job(job).shard_epoch());
  EXPECT_EQ(scheduler_->ReportRestoreFailure(report, JobCaller::Node(stranger, Secret(stranger)))
                .status()
                .code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Job(job).state(), v1::RUNNING);
}

}  // namespace
}  // namespace ps
