// Replicated jobs (JobSpec.replication): each slot gets a backup on another server than its
// primary, placed when the job starts and again whenever its slots move.
#include <string>
#include <vector>

#include "common/shard_map.h"
#include "gtest/gtest.h"
#include "scheduler/internal/scheduler_fixture.h"

// A namespace of its own: the unity build compiles test files together.
namespace ps::scheduler_replicas_test {
namespace {

class SchedulerReplicasTest : public SchedulerFixture {
 protected:
  std::string Submit(int num_servers, int replicas) {
    v1::JobSpec spec;
    spec.set_model("fashion_mlp");
    spec.set_num_workers(1);
    spec.set_num_servers(num_servers);
    spec.set_data_dir(dir_.path());
    spec.mutable_replication()->set_replicas(replicas);
    auto id = scheduler_->SubmitJob(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : "";
  }

  // Every slot's backup is a server of the job other than the slot's owner.
  static void ExpectBackupsBesideOwners(const v1::JobInfo& job) {
    ASSERT_EQ(job.slot_backups_size(), static_cast<int>(kNumSlots));
    const int n = job.server_addresses_size();
    for (uint32_t s = 0; s < kNumSlots; ++s) {
      const uint32_t owner = job.slot_owners_size() == 0 ? s % n : job.slot_owners(s);
      EXPECT_LT(job.slot_backups(s), static_cast<uint32_t>(n)) << s;
      EXPECT_NE(job.slot_backups(s), owner) << s;
    }
  }
};

TEST_F(SchedulerReplicasTest, BackupsArePlacedAtStartAndAfterASlotMove) {
  const uint64_t s1 = Register(v1::SERVER);
  const uint64_t s2 = Register(v1::SERVER);
  const uint64_t s3 = Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const std::string job_id = Submit(3, 1);
  v1::JobInfo job = Job(job_id);
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason();
  ExpectBackupsBesideOwners(job);
  // Each worker's orders carry the placement.
  const v1::HeartbeatResponse orders = Heartbeat(w0);
  ASSERT_TRUE(orders.has_assignment());
  EXPECT_EQ(orders.assignment().spec().replication().replicas(), 1);

  KillNode(s2, {s1, s3, w0});  // no spare: the survivors take its slots
  job = Job(job_id);
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason();
  ASSERT_EQ(job.server_addresses_size(), 2);
  ExpectBackupsBesideOwners(job);

  KillNode(s3, {s1, w0});  // one server left: no backup is possible
  job = Job(job_id);
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason();
  EXPECT_EQ(job.slot_backups_size(), 0);
}

TEST_F(SchedulerReplicasTest, AJobWithoutReplicasHasNoBackups) {
  Register(v1::SERVER);
  Register(v1::SERVER);
  Register(v1::WORKER);
  const v1::JobInfo job = Job(Submit(2, 0));
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason();
  EXPECT_EQ(job.slot_backups_size(), 0);
}

TEST_F(SchedulerReplicasTest, TooManyReplicasAreRefusedAtSubmit) {
  v1::JobSpec spec;
  spec.set_model("fashion_mlp");
  spec.set_num_workers(1);
  spec.set_num_servers(2);
  spec.set_data_dir(dir_.path());
  spec.mutable_replication()->set_replicas(2);
  auto id = scheduler_->SubmitJob(spec);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << id.status();
  EXPECT_NE(id.status().message().find("replication.replicas"), std::string::npos) << id.status();
}

}  // namespace
}  // namespace ps::scheduler_replicas_test
