// Replicated jobs (JobSpec.replication): each slot gets a backup on another server than its
// primary, placed when the job starts and again whenever its slots move.
#include <string>
#include <vector>

#include "common/shard_map.h"
#include "gtest/gtest.h"
#include "scheduler/internal/scheduler_fixture.h"
#include "scheduler/placement.h"

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

  // Rank 0 (worker node `w`) reports clock `clock` under shard epoch `epoch`.
  void Report(uint64_t w, const std::string& job_id, uint64_t epoch, int64_t clock) {
    v1::WorkerProgress progress;
    progress.set_job_id(job_id);
    progress.set_membership_epoch(1);
    progress.set_shard_epoch(epoch);
    progress.set_clock(clock);
    progress.set_total_clocks(1000);
    Heartbeat(w, &progress);
  }
  // Reports that show the backups of `epoch` seeded: two clocks done under it.
  void Seed(uint64_t w, const std::string& job_id, uint64_t epoch, int64_t clock) {
    Report(w, job_id, epoch, clock);
    Report(w, job_id, epoch, clock + 2);
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

  // No clock reported yet: the backups may hold nothing, and the slots move through the
  // checkpoint path, which places backups again.
  KillNode(s2, {s1, s3, w0});
  job = Job(job_id);
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason();
  ASSERT_EQ(job.server_addresses_size(), 2);
  ExpectBackupsBesideOwners(job);

  KillNode(s3, {s1, w0});  // one server left: no backup is possible
  job = Job(job_id);
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason();
  EXPECT_EQ(job.slot_backups_size(), 0);
}

// Addresses of each slot's owner and backup ("" for none).
struct SlotPlaces {
  std::vector<std::string> owners, backups;
};
SlotPlaces PlacesOf(const v1::JobInfo& job) {
  SlotPlaces places;
  const int n = job.server_addresses_size();
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    const uint32_t owner = job.slot_owners_size() == 0 ? s % n : job.slot_owners(s);
    places.owners.push_back(job.server_addresses(owner));
    places.backups.push_back(
        job.slot_backups_size() == 0 ? "" : job.server_addresses(job.slot_backups(s)));
  }
  return places;
}

TEST_F(SchedulerReplicasTest, ADeadServersSlotsArePromotedToTheirBackupsWithoutARestore) {
  const uint64_t s1 = Register(v1::SERVER);
  const uint64_t s2 = Register(v1::SERVER);
  const uint64_t s3 = Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const std::string job_id = Submit(3, 1);
  const v1::JobInfo before = Job(job_id);
  ASSERT_EQ(before.state(), v1::RUNNING) << before.reason();
  const SlotPlaces was = PlacesOf(before);
  const std::string dead_address = before.server_addresses(1);
  Seed(w0, job_id, 1, 10);

  KillNode(s2, {s1, s3, w0});
  const v1::JobInfo after = Job(job_id);
  ASSERT_EQ(after.state(), v1::RUNNING) << after.reason();
  EXPECT_EQ(after.shard_epoch(), before.shard_epoch() + 1);
  ASSERT_EQ(after.server_addresses_size(), 2);
  EXPECT_EQ(std::vector<uint64_t>(after.server_nodes().begin(), after.server_nodes().end()),
            (std::vector<uint64_t>{s1, s3}));
  const SlotPlaces now = PlacesOf(after);
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    // The dead server's slots are on their backups now; every other slot stays where it was.
    EXPECT_EQ(now.owners[s], was.owners[s] == dead_address ? was.backups[s] : was.owners[s]) << s;
  }
  EXPECT_FALSE(after.has_restore()) << after.restore().DebugString();
  EXPECT_TRUE(HasEventStartingWith(
      after, absl::StrCat("server node ", s2, " (", dead_address, ") dead: ")));
  bool failover = false;
  for (const v1::JobEvent& e : after.events()) {
    failover = failover || e.message().find("failover: its ") != std::string::npos;
    EXPECT_EQ(e.message().find("restoring"), std::string::npos) << e.message();
  }
  EXPECT_TRUE(failover);
  // The worker's orders: the new map and no restore order (no clock goes back).
  const v1::HeartbeatResponse orders = Heartbeat(w0);
  ASSERT_TRUE(orders.has_assignment());
  EXPECT_EQ(orders.assignment().shard_epoch(), after.shard_epoch());
  EXPECT_FALSE(orders.assignment().has_restore());
  EXPECT_EQ(orders.assignment().servers_size(), 2);
  // New backups for the new map, on the other survivor.
  ExpectBackupsBesideOwners(after);
  EXPECT_EQ(orders.assignment().slot_backups_size(), static_cast<int>(kNumSlots));

  // A second death before the new backups were seeded (no clock done under the new map): the
  // latest checkpoint (here: none, initial values) is restored, and the events say why.
  Report(w0, job_id, after.shard_epoch(), 12);
  KillNode(s3, {s1, w0});
  const v1::JobInfo second = Job(job_id);
  ASSERT_EQ(second.state(), v1::RUNNING) << second.reason();
  ASSERT_TRUE(second.has_restore());
  EXPECT_EQ(second.restore().shard_epoch(), second.shard_epoch());
  EXPECT_TRUE(HasEventStartingWith(
      second, absl::StrCat("no failover onto backups for the death of server node ", s3,
                           ": the backups placed for shard epoch ", after.shard_epoch(),
                           " do not hold every slot yet")));
}

TEST_F(SchedulerReplicasTest, ASecondDeathAfterTheNewBackupsAreSeededFailsOverAgain) {
  const uint64_t s1 = Register(v1::SERVER);
  const uint64_t s2 = Register(v1::SERVER);
  const uint64_t s3 = Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const std::string job_id = Submit(3, 1);
  Seed(w0, job_id, 1, 10);
  KillNode(s2, {s1, s3, w0});
  v1::JobInfo job = Job(job_id);
  ASSERT_EQ(job.shard_epoch(), 2u);
  ASSERT_FALSE(job.has_restore());
  Seed(w0, job_id, 2, 12);

  KillNode(s3, {s1, w0});
  job = Job(job_id);
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason();
  EXPECT_EQ(job.shard_epoch(), 3u);
  EXPECT_FALSE(job.has_restore());
  ASSERT_EQ(job.server_addresses_size(), 1);
  EXPECT_EQ(job.slot_backups_size(), 0);  // one server left
  EXPECT_TRUE(HasEventStartingWith(job, absl::StrCat("server node ", s3, " (")));
  const SlotPlaces now = PlacesOf(job);
  for (uint32_t s = 0; s < kNumSlots; ++s) EXPECT_EQ(now.owners[s], job.server_addresses(0)) << s;
  bool one_left = false;
  for (const v1::JobEvent& e : job.events()) {
    one_left = one_left || e.message().find("One server is left") != std::string::npos;
    EXPECT_EQ(e.message().find("restoring"), std::string::npos) << e.message();
  }
  EXPECT_TRUE(one_left);
}

TEST_F(SchedulerReplicasTest, AJobWithoutReplicasRecoversFromACheckpointAsBefore) {
  const uint64_t s1 = Register(v1::SERVER);
  const uint64_t s2 = Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const std::string job_id = Submit(2, 0);
  KillNode(s2, {s1, w0});
  const v1::JobInfo job = Job(job_id);
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason();
  EXPECT_TRUE(job.has_restore());
  EXPECT_FALSE(HasEventStartingWith(job, "no failover"));
}

TEST_F(SchedulerReplicasTest, AnSspJobWithReplicasRecoversFromACheckpoint) {
  const uint64_t s1 = Register(v1::SERVER);
  const uint64_t s2 = Register(v1::SERVER);
  const uint64_t s3 = Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  v1::JobSpec spec;
  spec.set_model("fashion_mlp");
  spec.set_num_workers(1);
  spec.set_num_servers(3);
  spec.set_data_dir(dir_.path());
  spec.mutable_replication()->set_replicas(1);
  spec.mutable_consistency()->set_mode(v1::ConsistencySpec::SSP);
  spec.mutable_consistency()->set_staleness(1);
  auto id = scheduler_->SubmitJob(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  Seed(w0, *id, 1, 10);
  KillNode(s2, {s1, s3, w0});
  const v1::JobInfo job = Job(*id);
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason();
  EXPECT_TRUE(job.has_restore());
  EXPECT_TRUE(HasEventStartingWith(
      job, absl::StrCat("no failover onto backups for the death of server node ", s2,
                        ": failover onto backups is built for sync")));
}

// The decision alone (placement.h): the dead server's slots go to their backups, the indexes
// after it move down, and nothing is promoted onto a dead server.
TEST(PromotedOwnersTest, SlotsOfTheDeadServerGoToTheirBackups) {
  const std::vector<int> owners = {0, 1, 2, 1, 1};
  const std::vector<uint32_t> backups = {1, 2, 0, 0, 2};
  std::string why_not;
  auto promoted = PromotedOwners(owners, backups, /*dead=*/1, {true, false, true}, &why_not);
  ASSERT_TRUE(promoted.has_value()) << why_not;
  // Slot 1 -> server 2 (now index 1), slot 3 -> server 0, slot 4 -> server 2 (index 1).
  EXPECT_EQ(*promoted, (std::vector<int>{0, 1, 1, 0, 1}));
}

TEST(PromotedOwnersTest, NothingIsPromotedWhereABackupIsGone) {
  const std::vector<int> owners = {0, 1, 2, 1};
  std::string why_not;
  // Slot 3's backup (server 2) died too.
  EXPECT_FALSE(PromotedOwners(owners, {1, 0, 0, 2}, 1, {true, false, false}, &why_not).has_value());
  EXPECT_EQ(why_not, "the backup of slot 3 is not on a live server");
  // No backups at all.
  EXPECT_FALSE(PromotedOwners(owners, {}, 1, {true, false, true}, &why_not).has_value());
  // A backup on the dead server itself (a malformed map) is not promoted.
  EXPECT_FALSE(PromotedOwners(owners, {1, 1, 0, 0}, 1, {true, false, true}, &why_not).has_value());
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
