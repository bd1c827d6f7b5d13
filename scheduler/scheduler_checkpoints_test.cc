// The scheduler's checkpoint catalog and its recovery from server loss, over a real RocksDB in a
// temp dir with a fake clock.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/node_identity.h"
#include "common/security.h"
#include "common/shard_map.h"
#include "gtest/gtest.h"
#include "scheduler/internal/scheduler_fixture.h"

namespace ps {
namespace {

class SchedulerCheckpointsTest : public SchedulerFixture {
 protected:
  std::string Submit(int num_workers, int num_servers, v1::ConsistencySpec::Mode mode,
                     int keep_last = 0) {
    v1::JobSpec spec;
    spec.set_model("fashion_mlp");
    spec.set_num_workers(num_workers);
    spec.set_num_servers(num_servers);
    spec.set_data_dir(dir_.path());
    spec.mutable_consistency()->set_mode(mode);
    spec.mutable_checkpoint()->set_keep_last(keep_last);
    auto id = scheduler_->SubmitJob(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : "";
  }

  // Begins and finishes a checkpoint at `clock` (one row and 100 bytes per server).
  uint64_t Checkpoint(const std::string& job_id, int64_t clock) {
    v1::BeginCheckpointRequest begin;
    begin.set_job_id(job_id);
    begin.set_clock(clock);
    begin.set_shard_epoch(Job(job_id).shard_epoch());
    auto info = scheduler_->BeginCheckpoint(begin);
    EXPECT_TRUE(info.ok()) << info.status();
    if (!info.ok()) return 0;
    v1::FinishCheckpointRequest finish;
    finish.set_job_id(job_id);
    finish.set_checkpoint_id(info->checkpoint_id());
    for (int i = 0; i < info->shards_size(); ++i) {
      std::filesystem::create_directories(info->shards(i).path());
      v1::CheckpointShard* shard = finish.add_shards();
      shard->set_rows(1);
      shard->set_bytes(100);
      shard->set_receipt(Receipt(info->shards(i).node_id(), job_id, info->checkpoint_id(), 1, 100));
    }
    auto done = scheduler_->FinishCheckpoint(finish);
    EXPECT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(done->state(), v1::CHECKPOINT_COMPLETE);
    return info->checkpoint_id();
  }

  v1::CheckpointInfo CheckpointOf(const std::string& job_id, uint64_t id) {
    auto list = scheduler_->ListCheckpoints(job_id);
    EXPECT_TRUE(list.ok()) << list.status();
    for (const v1::CheckpointInfo& c : *list) {
      if (c.checkpoint_id() == id) return c;
    }
    ADD_FAILURE() << "no checkpoint " << id;
    return v1::CheckpointInfo();
  }
};

TEST_F(SchedulerCheckpointsTest, CatalogRecordsPrunesAndSurvivesARestart) {
  Register(v1::SERVER);
  Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const std::string job_id = Submit(1, 2, v1::ConsistencySpec::SYNC, /*keep_last=*/2);
  ASSERT_EQ(Job(job_id).state(), v1::RUNNING);

  v1::BeginCheckpointRequest begin;
  begin.set_job_id(job_id);
  begin.set_clock(10);
  begin.set_shard_epoch(1);
  auto first = scheduler_->BeginCheckpoint(begin);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->checkpoint_id(), 1u);
  EXPECT_EQ(first->state(), v1::CHECKPOINT_WRITING);
  ASSERT_EQ(first->shards_size(), 2);
  // Each server's directory under <root>/<job>.<submit time>/ckpt-1, with the slots it owns.
  const std::string root =
      (std::filesystem::path(dir_.path()) / "checkpoints").lexically_normal().string();
  EXPECT_EQ(first->dir(),
            absl::StrCat(root, "/", job_id, ".", Job(job_id).submit_time_unix_ms(), "/ckpt-1"));
  EXPECT_EQ(first->shards(1).path(), first->dir() + "/shard-1");
  auto slots = DecodeSlotBitmap(first->shards(1).slots());
  ASSERT_TRUE(slots.ok());
  EXPECT_FALSE((*slots)[0]);
  EXPECT_TRUE((*slots)[1]);
  // Never under an old shard map.
  v1::BeginCheckpointRequest old_map = begin;
  old_map.set_shard_epoch(0);
  EXPECT_EQ(scheduler_->BeginCheckpoint(old_map).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Rank 0 begins one only after reporting the last: one still writing lost its report.
  auto second = scheduler_->BeginCheckpoint(begin);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->checkpoint_id(), 2u);
  EXPECT_EQ(CheckpointOf(job_id, 1).state(), v1::CHECKPOINT_FAILED);
  EXPECT_EQ(CheckpointOf(job_id, 1).error(), "superseded: its completion was never reported");
  // Not complete until every server confirmed.
  v1::FinishCheckpointRequest finish;
  finish.set_job_id(job_id);
  finish.set_checkpoint_id(2);
  finish.add_shards()->set_rows(5);
  auto partial = scheduler_->FinishCheckpoint(finish);
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(partial->state(), v1::CHECKPOINT_FAILED);
  EXPECT_EQ(partial->error(), "1 of 2 servers confirmed it");
  EXPECT_EQ(Job(job_id).latest_checkpoint_id(), 0u);

  const uint64_t c2 = Checkpoint(job_id, 20);
  const uint64_t c3 = Checkpoint(job_id, 30);
  EXPECT_EQ(Job(job_id).latest_checkpoint_id(), c3);
  EXPECT_TRUE(std::filesystem::exists(CheckpointOf(job_id, c2).dir()));
  const std::string c2_dir = CheckpointOf(job_id, c2).dir();
  const uint64_t c4 = Checkpoint(job_id, 40);  // keep last 2: c2 goes
  EXPECT_EQ(CheckpointOf(job_id, c2).state(), v1::CHECKPOINT_PRUNED);
  EXPECT_FALSE(std::filesystem::exists(c2_dir));
  EXPECT_EQ(CheckpointOf(job_id, c3).state(), v1::CHECKPOINT_COMPLETE);
  EXPECT_EQ(CheckpointOf(job_id, c4).shards(0).rows(), 1u);

  Reopen();
  Heartbeat(w0);
  auto list = scheduler_->ListCheckpoints(job_id);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 5u);
  EXPECT_EQ((*list)[0].state(), v1::CHECKPOINT_FAILED);
  EXPECT_EQ((*list)[1].state(), v1::CHECKPOINT_FAILED);
  EXPECT_EQ((*list)[4].clock(), 40);
  EXPECT_EQ(Job(job_id).latest_checkpoint_id(), c4);
  EXPECT_EQ(scheduler_->ListCheckpoints("job-99").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SchedulerCheckpointsTest, PsctlRequestsReachRankZero) {
  Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const std::string job_id = Submit(1, 1, v1::ConsistencySpec::ASYNC);
  EXPECT_EQ(Heartbeat(w0).assignment().checkpoint_requests(), 0u);
  auto r = scheduler_->RequestCheckpoint(job_id);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request_seq(), 1u);
  EXPECT_EQ(Heartbeat(w0).assignment().checkpoint_requests(), 1u);
  EXPECT_EQ(scheduler_->RequestCheckpoint("job-7").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SchedulerCheckpointsTest, SyncJobRollsBackOnASpareWhenAServerDies) {
  const uint64_t s1 = Register(v1::SERVER);
  const uint64_t s2 = Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const std::string job_id = Submit(1, 2, v1::ConsistencySpec::SYNC);
  const uint64_t spare = Register(v1::SERVER);  // registered after the job started
  const uint64_t c1 = Checkpoint(job_id, 50);

  KillNode(s2, {s1, spare, w0});
  v1::JobInfo job = Job(job_id);
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason();
  EXPECT_EQ(job.shard_epoch(), 2u);
  EXPECT_EQ(job.server_nodes(0), s1);
  EXPECT_EQ(job.server_nodes(1), spare);  // in the dead one's place: the map is unchanged
  EXPECT_EQ(job.slot_owners_size(), 0);
  EXPECT_TRUE(HasEventStartingWith(job,
                                   "server node 2 (10.0.0.2:7100) dead: no heartbeat for "
                                   "5s; its 512 slots move to spare server node 4"));
  const v1::WorkerAssignment a = Heartbeat(w0).assignment();
  EXPECT_EQ(a.shard_epoch(), 2u);
  EXPECT_EQ(a.servers(1), "10.0.0.3:7100");
  ASSERT_TRUE(a.has_restore());
  EXPECT_TRUE(a.restore().rollback());
  EXPECT_EQ(a.restore().checkpoint_id(), c1);
  EXPECT_EQ(a.restore().clock(), 50);
  EXPECT_EQ(a.restore().shard_epoch(), 2u);
  EXPECT_EQ(a.restore().shards_size(), 2);

  // Recovered once rank 0 trains under the new map past the checkpoint's clock.
  v1::WorkerProgress progress;
  progress.set_job_id(job_id);
  progress.set_clock(60);
  progress.set_shard_epoch(1);  // a stale report: not yet
  Heartbeat(w0, &progress);
  EXPECT_EQ(Job(job_id).recoveries(), 0);
  progress.set_shard_epoch(2);
  progress.set_clock(51);
  Heartbeat(w0, &progress);
  EXPECT_EQ(Job(job_id).recoveries(), 1);
  EXPECT_TRUE(HasEventStartingWith(Job(job_id), "recovered: training again at clock 51"));
}

// psctl drain: the job checkpoints first (a request), and once that checkpoint is complete the
// drained server's slots move to the spare, restored from it; the server stays ALIVE but takes
// no new job. Refused for a worker, an unknown node, and when a job would have no server left.
TEST_F(SchedulerCheckpointsTest, DrainMovesAJobOffAServerAfterACheckpoint) {
  const uint64_t s1 = Register(v1::SERVER);
  const uint64_t s2 = Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const std::string job_id = Submit(1, 2, v1::ConsistencySpec::SYNC);
  EXPECT_EQ(scheduler_->DrainNode(w0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler_->DrainNode(99).status().code(), absl::StatusCode::kNotFound);
  // No spare yet, but s1 can take s2's slots; s1 alone could not be drained after that.
  const uint64_t spare = Register(v1::SERVER);

  auto drained = scheduler_->DrainNode(s2);
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_TRUE(drained->draining());
  EXPECT_EQ(drained->state(), v1::ALIVE);
  v1::JobInfo job = Job(job_id);
  EXPECT_EQ(job.checkpoint_requests(), 1u);
  EXPECT_EQ(job.drain_request_seq(), 1u);
  EXPECT_EQ(job.server_nodes(1), s2);  // not before the checkpoint
  EXPECT_EQ(Heartbeat(w0).assignment().checkpoint_requests(), 1u);

  v1::BeginCheckpointRequest begin;
  begin.set_job_id(job_id);
  begin.set_clock(70);
  begin.set_shard_epoch(job.shard_epoch());
  begin.set_request_seq(1);
  auto info = scheduler_->BeginCheckpoint(begin);
  ASSERT_TRUE(info.ok()) << info.status();
  v1::FinishCheckpointRequest finish;
  finish.set_job_id(job_id);
  finish.set_checkpoint_id(info->checkpoint_id());
  for (int i = 0; i < info->shards_size(); ++i) {
    std::filesystem::create_directories(info->shards(i).path());
    finish.add_shards()->set_rows(1);
    finish.mutable_shards(i)->set_receipt(
        Receipt(info->shards(i).node_id(), job_id, info->checkpoint_id(), 1, 0));
  }
  ASSERT_TRUE(scheduler_->FinishCheckpoint(finish).ok());

  job = Job(job_id);
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason();
  EXPECT_EQ(job.drain_request_seq(), 0u);
  EXPECT_EQ(job.server_nodes(0), s1);
  EXPECT_EQ(job.server_nodes(1), spare);
  EXPECT_EQ(job.shard_epoch(), 2u);
  EXPECT_TRUE(HasEventStartingWith(job,
                                   "server node 2 (10.0.0.2:7100) leaves: drained by psctl "
                                   "drain; its 512 slots move to spare server node 4"));
  const v1::WorkerAssignment a = Heartbeat(w0).assignment();
  ASSERT_TRUE(a.has_restore());
  EXPECT_EQ(a.restore().checkpoint_id(), info->checkpoint_id());
  EXPECT_EQ(a.restore().clock(), 70);  // a sync job rolls back to the drain's checkpoint only
  EXPECT_EQ(Node(s2).state(), v1::ALIVE);
  EXPECT_TRUE(Node(s2).draining());

  // s1 and the spare hold the job; draining both would leave it no server.
  ASSERT_TRUE(scheduler_->DrainNode(spare).ok());
  EXPECT_EQ(scheduler_->DrainNode(s1).status().code(), absl::StatusCode::kFailedPrecondition);
}

// Servers on two hosts report whether they could write the scheduler's checkpoint root; the
// scheduler looks for each one's probe file. One it cannot see (a root that is not shared) and
// one that could not write get a WARNING event each, once; a probe it sees gets none.
TEST_F(SchedulerCheckpointsTest, ACheckpointRootThatIsNotSharedIsReportedLoudly) {
  auto register_server = [&](const std::string& host, const std::string& address) {
    v1::RegisterRequest req;
    req.set_role(v1::SERVER);
    req.set_hostname(host);
    req.set_address(address);
    auto resp = scheduler_->Register(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    secrets_[resp->node_id()] = resp->node_secret();
    return *resp;
  };
  const v1::RegisterResponse a = register_server("host-a", "10.0.0.1:7100");
  const v1::RegisterResponse b = register_server("host-b", "10.0.0.2:7100");
  const v1::RegisterResponse c = register_server("host-c", "10.0.0.3:7100");
  ASSERT_FALSE(a.checkpoint_root().empty());
  Register(v1::WORKER);
  const std::string job_id = Submit(1, 3, v1::ConsistencySpec::SYNC);
  ASSERT_EQ(Job(job_id).state(), v1::RUNNING);

  auto probe = [&](uint64_t node, const std::string& result, bool write_file) {
    if (write_file) {
      const std::filesystem::path dir = std::filesystem::path(a.checkpoint_root()) / ".ps-probe";
      std::filesystem::create_directories(dir);
      std::ofstream(dir / absl::StrCat("node-", node)) << "host\n";
    }
    v1::HeartbeatRequest req;
    req.set_node_id(node);
    req.set_node_secret(Secret(node));
    req.set_checkpoint_probe(result);
    ASSERT_TRUE(scheduler_->Heartbeat(req).ok());
  };
  probe(a.node_id(), "ok", /*write_file=*/true);   // visible here: shared
  probe(b.node_id(), "ok", /*write_file=*/false);  // written on host-b's own disk
  probe(c.node_id(), "cannot create /x: Permission denied", false);
  probe(b.node_id(), "ok", false);  // reported again: warned once only

  const v1::JobInfo job = Job(job_id);
  int warnings = 0;
  for (const v1::JobEvent& e : job.events()) warnings += absl::StartsWith(e.message(), "WARNING");
  EXPECT_EQ(warnings, 2);
  EXPECT_TRUE(HasEventStartingWith(
      job, absl::StrCat("WARNING: the checkpoint root ", a.checkpoint_root(),
                        " is not shared: server node ", b.node_id(), " (host host-b)")));
  EXPECT_TRUE(
      HasEventStartingWith(job, absl::StrCat("WARNING: server node ", c.node_id(),
                                             " (10.0.0.3:7100) cannot write the checkpoint root")));
  EXPECT_EQ(Node(c.node_id()).checkpoint_probe(), "cannot create /x: Permission denied");
}

TEST_F(SchedulerCheckpointsTest, AsyncJobSpreadsTheLostSlotsOverTheSurvivors) {
  const uint64_t s1 = Register(v1::SERVER);
  const uint64_t s2 = Register(v1::SERVER);
  const uint64_t s3 = Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const std::string job_id = Submit(1, 0, v1::ConsistencySpec::ASYNC);  // every server
  v1::WorkerProgress progress;
  progress.set_job_id(job_id);
  progress.set_clock(33);
  progress.set_shard_epoch(1);
  Heartbeat(w0, &progress);

  KillNode(s2, {s1, s3, w0});  // no spare: the survivors take its slots
  const v1::JobInfo job = Job(job_id);
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason();
  ASSERT_EQ(job.server_addresses_size(), 2);
  EXPECT_EQ(job.server_addresses(0), "10.0.0.1:7100");
  EXPECT_EQ(job.server_addresses(1), "10.0.0.3:7100");
  ASSERT_EQ(job.slot_owners_size(), static_cast<int>(kNumSlots));
  int moved = 0;
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    // Slots that were not lost stay where they were (s % 3: 0 -> index 0, 2 -> index 1).
    if (s % 3 == 0) {
      EXPECT_EQ(job.slot_owners(s), 0u);
    }
    if (s % 3 == 2) {
      EXPECT_EQ(job.slot_owners(s), 1u);
    }
    if (s % 3 == 1) ++moved;
  }
  const v1::RestoreOrder& order = job.restore();
  EXPECT_FALSE(order.rollback());
  EXPECT_EQ(order.checkpoint_id(), 0u);  // none taken: the lost slots get initial values
  auto slots = DecodeSlotBitmap(order.slots());
  ASSERT_TRUE(slots.ok());
  EXPECT_EQ(std::count(slots->begin(), slots->end(), true), moved);
  EXPECT_TRUE((*slots)[1]);
  EXPECT_FALSE((*slots)[0]);
  ShardMap map =
      *ShardMap::FromOwners({"a", "b"}, {job.slot_owners().begin(), job.slot_owners().end()}, 2);
  EXPECT_GT(map.SlotsOf(0)[1] + map.SlotsOf(1)[1], 0);
}

// Two servers of an ssp/async job die: in one tick, or one after the other before the job trained
// on the first restore's map. Neither is handed the other's slots, and the last restore order
// covers the slots of both (it replaces the first, which no worker carried out).
class TwoServerDeathsTest : public SchedulerCheckpointsTest,
                            public ::testing::WithParamInterface<bool> {};

TEST_P(TwoServerDeathsTest, RestoreTheSlotsOfBoth) {
  const bool same_tick = GetParam();
  const uint64_t s1 = Register(v1::SERVER);
  const uint64_t s2 = Register(v1::SERVER);
  const uint64_t s3 = Register(v1::SERVER);
  const uint64_t s4 = Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const std::string job_id = Submit(1, 4, v1::ConsistencySpec::ASYNC);
  ASSERT_EQ(Job(job_id).server_nodes_size(), 4);
  if (same_tick) {
    for (int i = 0; i < 3; ++i) {
      Advance(absl::Seconds(2));
      for (uint64_t id : {s1, s4, w0}) Heartbeat(id);
    }
  } else {
    KillNode(s2, {s1, s3, s4, w0});
    KillNode(s3, {s1, s4, w0});
  }
  ASSERT_EQ(Node(s2).state(), v1::DEAD);
  ASSERT_EQ(Node(s3).state(), v1::DEAD);
  const v1::JobInfo job = Job(job_id);
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason();
  ASSERT_EQ(job.server_nodes_size(), 2);
  EXPECT_EQ(job.server_nodes(0), s1);
  EXPECT_EQ(job.server_nodes(1), s4);
  EXPECT_FALSE(job.restore().rollback());
  auto slots = DecodeSlotBitmap(job.restore().slots());
  ASSERT_TRUE(slots.ok());
  ASSERT_EQ(job.slot_owners_size(), static_cast<int>(kNumSlots));
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    // Slot s was on the job's server s % 4: those of index 1 and 2 (s2, s3) died.
    const bool lost = s % 4 == 1 || s % 4 == 2;
    ASSERT_EQ((*slots)[s], lost) << "slot " << s;
    ASSERT_LT(job.slot_owners(s), 2u) << "slot " << s;
    if (!lost) {
      ASSERT_EQ(job.slot_owners(s), s % 4 == 0 ? 0u : 1u) << "slot " << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(When, TwoServerDeathsTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "InOneTick" : "OneAfterTheOther";
                         });

TEST_F(SchedulerCheckpointsTest, AServerDyingMidCheckpointLeavesThePreviousOneLatest) {
  const uint64_t s1 = Register(v1::SERVER);
  const uint64_t s2 = Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const std::string job_id = Submit(1, 2, v1::ConsistencySpec::SYNC);
  const uint64_t c1 = Checkpoint(job_id, 10);
  v1::BeginCheckpointRequest begin;
  begin.set_job_id(job_id);
  begin.set_clock(20);
  begin.set_shard_epoch(1);
  auto c2 = scheduler_->BeginCheckpoint(begin);
  ASSERT_TRUE(c2.ok());

  KillNode(s2, {s1, w0});
  const v1::CheckpointInfo failed = CheckpointOf(job_id, c2->checkpoint_id());
  EXPECT_EQ(failed.state(), v1::CHECKPOINT_FAILED);
  EXPECT_EQ(failed.error(), "server node 2 (10.0.0.2:7100) died while it was written");
  const v1::JobInfo job = Job(job_id);
  EXPECT_EQ(job.latest_checkpoint_id(), c1);
  EXPECT_EQ(job.restore().checkpoint_id(), c1);
  // The worker's late report cannot complete it.
  v1::FinishCheckpointRequest finish;
  finish.set_job_id(job_id);
  finish.set_checkpoint_id(c2->checkpoint_id());
  EXPECT_EQ(scheduler_->FinishCheckpoint(finish).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(SchedulerCheckpointsTest, ACorruptCheckpointFallsBackToThePreviousOne) {
  const uint64_t s1 = Register(v1::SERVER);
  const uint64_t s2 = Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const std::string job_id = Submit(1, 2, v1::ConsistencySpec::SYNC);
  const uint64_t c1 = Checkpoint(job_id, 10);
  const uint64_t c2 = Checkpoint(job_id, 20);
  KillNode(s2, {s1, w0});
  ASSERT_EQ(Job(job_id).restore().checkpoint_id(), c2);
  ASSERT_EQ(Job(job_id).shard_epoch(), 2u);

  v1::ReportRestoreFailureRequest report;
  report.set_job_id(job_id);
  report.set_shard_epoch(2);
  report.set_checkpoint_id(c2);
  report.set_error("shard-0 slot 7: checksum mismatch");
  report.set_code(static_cast<int>(absl::StatusCode::kDataLoss));
  ASSERT_TRUE(scheduler_->ReportRestoreFailure(report).ok());
  v1::JobInfo job = Job(job_id);
  EXPECT_EQ(CheckpointOf(job_id, c2).state(), v1::CHECKPOINT_CORRUPT);
  EXPECT_EQ(job.latest_checkpoint_id(), c1);
  EXPECT_EQ(job.shard_epoch(), 3u);
  EXPECT_EQ(job.restore().checkpoint_id(), c1);
  EXPECT_EQ(job.restore().clock(), 10);
  EXPECT_TRUE(HasEventStartingWith(job,
                                   "checkpoint 2 is corrupt: shard-0 slot 7: checksum "
                                   "mismatch; falling back to checkpoint 1"));
  // A second worker's report of the same failure changes nothing.
  ASSERT_TRUE(scheduler_->ReportRestoreFailure(report).ok());
  EXPECT_EQ(Job(job_id).shard_epoch(), 3u);
  // A checkpoint that does not fit the model fails the job.
  report.set_shard_epoch(3);
  report.set_checkpoint_id(c1);
  report.set_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
  report.set_error("table weights0 has dim 64 in the checkpoint, 128 here");
  ASSERT_TRUE(scheduler_->ReportRestoreFailure(report).ok());
  job = Job(job_id);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_EQ(job.reason(),
            "restore from checkpoint 1 failed: table weights0 has dim 64 in the "
            "checkpoint, 128 here");
}

TEST_F(SchedulerCheckpointsTest, RestoreRollsARunningJobBackOrResubmitsAnEndedOne) {
  Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const std::string job_id = Submit(1, 1, v1::ConsistencySpec::SYNC);
  EXPECT_EQ(scheduler_->RestoreJob(job_id, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);  // none complete yet
  const uint64_t c1 = Checkpoint(job_id, 10);
  Checkpoint(job_id, 20);
  EXPECT_EQ(scheduler_->RestoreJob(job_id, 9).status().code(), absl::StatusCode::kNotFound);

  auto rolled = scheduler_->RestoreJob(job_id, c1);
  ASSERT_TRUE(rolled.ok()) << rolled.status();
  EXPECT_EQ(rolled->job_id(), job_id);
  EXPECT_EQ(rolled->shard_epoch(), 2u);
  const v1::WorkerAssignment a = Heartbeat(w0).assignment();
  EXPECT_TRUE(a.restore().rollback());
  EXPECT_EQ(a.restore().clock(), 10);

  ASSERT_TRUE(scheduler_->CancelJob(job_id).ok());
  auto again = scheduler_->RestoreJob(job_id, 0);  // latest complete: 2
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_NE(again->job_id(), job_id);
  EXPECT_EQ(again->spec().from_checkpoint().job_id(), job_id);
  EXPECT_EQ(again->spec().from_checkpoint().checkpoint_id(), 2u);
  // It starts (w0 is idle again) with a rollback order to the checkpoint, at shard epoch 1.
  const v1::JobInfo started = Job(again->job_id());
  ASSERT_EQ(started.state(), v1::RUNNING) << started.reason();
  EXPECT_EQ(started.restore().shard_epoch(), 1u);
  EXPECT_EQ(started.restore().clock(), 20);
  EXPECT_EQ(started.restore().source_job_id(), job_id);
  EXPECT_EQ(Heartbeat(w0).assignment().restore().checkpoint_id(), 2u);

  // Submitting from a checkpoint that is not there, or of another model, is refused.
  v1::JobSpec spec = started.spec();
  spec.mutable_from_checkpoint()->set_checkpoint_id(77);
  EXPECT_EQ(scheduler_->SubmitJob(spec).status().code(), absl::StatusCode::kInvalidArgument);
  spec.mutable_from_checkpoint()->set_checkpoint_id(0);
  spec.set_model("spam_logreg");
  spec.clear_layers();
  EXPECT_EQ(scheduler_->SubmitJob(spec).status().code(), absl::StatusCode::kInvalidArgument);
}

// An ended program job is submitted again from its checkpoint like a zoo model's: its tables'
// scheduler-given ids are not held against the new spec, which gets ids of its own.
TEST_F(SchedulerCheckpointsTest, RestoreResubmitsAnEndedProgramJob) {
  Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  v1::JobSpec spec;
  spec.set_num_workers(1);
  spec.mutable_program()->add_argv("/usr/bin/python3");
  spec.mutable_program()->add_argv("train.py");
  v1::TableSpec* w = spec.add_tables();
  w->set_name("w");
  w->set_kind(v1::DENSE);
  w->set_dim(4);
  w->set_num_rows(10);
  v1::TableSpec* emb = spec.add_tables();
  emb->set_name("emb");
  emb->set_kind(v1::SPARSE);
  emb->set_dim(8);
  auto job_id = scheduler_->SubmitJob(spec);
  ASSERT_TRUE(job_id.ok()) << job_id.status();
  const v1::JobInfo first = Job(*job_id);
  ASSERT_EQ(first.state(), v1::RUNNING) << first.reason();
  ASSERT_NE(first.spec().tables(1).table_id(), 0u);
  const uint64_t c1 = Checkpoint(*job_id, 10);
  ASSERT_TRUE(scheduler_->CancelJob(*job_id).ok());

  auto again = scheduler_->RestoreJob(*job_id, c1);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_NE(again->job_id(), *job_id);
  ASSERT_EQ(again->spec().tables_size(), first.spec().tables_size());
  for (int i = 0; i < first.spec().tables_size(); ++i) {
    EXPECT_EQ(again->spec().tables(i).name(), first.spec().tables(i).name());
    EXPECT_NE(again->spec().tables(i).table_id(), 0u);
    EXPECT_NE(again->spec().tables(i).table_id(), first.spec().tables(i).table_id());
    EXPECT_EQ(again->spec().tables(i).job_id(), again->job_id());
  }
  const v1::JobInfo started = Job(again->job_id());
  ASSERT_EQ(started.state(), v1::RUNNING) << started.reason();
  EXPECT_EQ(started.restore().source_job_id(), *job_id);
  EXPECT_EQ(Heartbeat(w0).assignment().restore().checkpoint_id(), c1);
}

// psctl restore of a running job while a checkpoint is written: that checkpoint belongs to the
// replaced map and fails (completed, it would become the latest and undo the rollback). A
// pending job cannot be restored, and says how to start it from a checkpoint.
TEST_F(SchedulerCheckpointsTest, RestoreFailsTheCheckpointBeingWrittenAndRefusesPendingJobs) {
  Register(v1::SERVER);
  Register(v1::WORKER);
  const std::string job_id = Submit(1, 1, v1::ConsistencySpec::SYNC);
  const uint64_t c1 = Checkpoint(job_id, 10);
  v1::BeginCheckpointRequest begin;
  begin.set_job_id(job_id);
  begin.set_clock(20);
  begin.set_shard_epoch(1);
  auto c2 = scheduler_->BeginCheckpoint(begin);
  ASSERT_TRUE(c2.ok()) << c2.status();
  ASSERT_TRUE(scheduler_->RestoreJob(job_id, c1).ok());
  EXPECT_EQ(CheckpointOf(job_id, c2->checkpoint_id()).state(), v1::CHECKPOINT_FAILED);
  v1::FinishCheckpointRequest finish;
  finish.set_job_id(job_id);
  finish.set_checkpoint_id(c2->checkpoint_id());
  finish.add_shards()->set_rows(1);
  EXPECT_EQ(scheduler_->FinishCheckpoint(finish).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Job(job_id).latest_checkpoint_id(), c1);

  const std::string pending = Submit(1, 1, v1::ConsistencySpec::SYNC);  // no idle worker
  ASSERT_EQ(Job(pending).state(), v1::PENDING);
  const absl::Status s = scheduler_->RestoreJob(pending, 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("has not started"), std::string::npos) << s;
}

// A checkpoint that a pending or running job starts from is not pruned by its own job.
TEST_F(SchedulerCheckpointsTest, ACheckpointAnotherJobStartsFromIsNotPruned) {
  Register(v1::SERVER);
  Register(v1::WORKER);
  const std::string source = Submit(1, 1, v1::ConsistencySpec::SYNC, /*keep_last=*/1);
  const uint64_t c1 = Checkpoint(source, 10);
  v1::JobSpec spec = Job(source).spec();
  spec.mutable_from_checkpoint()->set_job_id(source);
  spec.mutable_from_checkpoint()->set_checkpoint_id(c1);
  auto pending = scheduler_->SubmitJob(spec);  // waits for a worker
  ASSERT_TRUE(pending.ok()) << pending.status();
  const uint64_t c2 = Checkpoint(source, 20);
  EXPECT_EQ(CheckpointOf(source, c1).state(), v1::CHECKPOINT_COMPLETE);
  EXPECT_TRUE(std::filesystem::exists(CheckpointOf(source, c1).dir()));
  // Once nothing needs it, the next checkpoint prunes it.
  ASSERT_TRUE(scheduler_->CancelJob(*pending).ok());
  Checkpoint(source, 30);
  EXPECT_EQ(CheckpointOf(source, c1).state(), v1::CHECKPOINT_PRUNED);
  EXPECT_EQ(CheckpointOf(source, c2).state(), v1::CHECKPOINT_PRUNED);
}

// --state_dir with a trailing slash: the default checkpoint root is still beside it, not in it.
TEST_F(SchedulerCheckpointsTest, DefaultCheckpointRootIsBesideTheStateDir) {
  options_.state_dir = dir_.path() + "/state/";
  Reopen();
  Register(v1::SERVER);
  Register(v1::WORKER);
  const std::string job_id = Submit(1, 1, v1::ConsistencySpec::SYNC);
  v1::BeginCheckpointRequest begin;
  begin.set_job_id(job_id);
  begin.set_shard_epoch(1);
  auto c = scheduler_->BeginCheckpoint(begin);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string beside =
      (std::filesystem::path(dir_.path()).lexically_normal() / "checkpoints").string() + "/";
  EXPECT_EQ(c->shards(0).path().rfind(beside, 0), 0u) << c->shards(0).path();
}

// Malformed or stray worker reports get clear errors and change nothing.
TEST_F(SchedulerCheckpointsTest, BadCheckpointReportsAreRefused) {
  Register(v1::SERVER);
  Register(v1::WORKER);
  const std::string job_id = Submit(1, 1, v1::ConsistencySpec::SYNC);
  v1::BeginCheckpointRequest begin;
  begin.set_job_id(job_id);
  begin.set_shard_epoch(1);
  begin.set_clock(-3);
  auto negative = scheduler_->BeginCheckpoint(begin);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(negative.status().message(), "checkpoint clock -3 is negative");
  begin.set_job_id("job-42");
  begin.set_clock(5);
  EXPECT_EQ(scheduler_->BeginCheckpoint(begin).status().code(), absl::StatusCode::kNotFound);
  begin.set_job_id("nonsense");
  EXPECT_EQ(scheduler_->BeginCheckpoint(begin).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(scheduler_->ListCheckpoints(job_id)->empty());

  v1::FinishCheckpointRequest finish;
  finish.set_job_id(job_id);
  finish.set_checkpoint_id(9);
  EXPECT_EQ(scheduler_->FinishCheckpoint(finish).status().code(), absl::StatusCode::kNotFound);
  begin.set_job_id(job_id);
  ASSERT_TRUE(scheduler_->BeginCheckpoint(begin).ok());
  finish.set_checkpoint_id(1);
  for (int i = 0; i < 3; ++i) finish.add_shards()->set_rows(1);  // the job has 1 server
  auto too_many = scheduler_->FinishCheckpoint(finish);
  ASSERT_TRUE(too_many.ok());
  EXPECT_EQ(too_many->state(), v1::CHECKPOINT_FAILED);
  EXPECT_EQ(too_many->error(), "the report names 3 servers; it was taken on 1");
  EXPECT_EQ(Job(job_id).latest_checkpoint_id(), 0u);

  v1::ReportRestoreFailureRequest report;  // no restore is in progress: nothing happens
  report.set_job_id(job_id);
  report.set_shard_epoch(1);
  report.set_code(static_cast<int>(absl::StatusCode::kDataLoss));
  ASSERT_TRUE(scheduler_->ReportRestoreFailure(report).ok());
  EXPECT_EQ(Job(job_id).state(), v1::RUNNING);
  EXPECT_EQ(Job(job_id).shard_epoch(), 1u);
  report.set_job_id("job-42");
  EXPECT_EQ(scheduler_->ReportRestoreFailure(report).status().code(), absl::StatusCode::kNotFound);
}

// Issue 36: the restore orders workers get are signed for their job under the cluster token
// (RestoreOrderSignature), so that a server can tell them from one a job's program made up: a
// rollback of a running job, and a job started from another job's checkpoint. Without tokens
// they go unsigned, as before.
TEST_F(SchedulerCheckpointsTest, RestoreOrdersAreSignedForTheJobTheyAreGivenTo) {
  constexpr char kToken[] = "cluster-token";
  auto unsigned_copy = [](v1::RestoreOrder order) {
    order.clear_signature();
    return order;
  };
  Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  std::string job_id = Submit(1, 1, v1::ConsistencySpec::SYNC);
  ASSERT_TRUE(scheduler_->RestoreJob(job_id, Checkpoint(job_id, 10)).ok());
  EXPECT_TRUE(Heartbeat(w0).assignment().restore().signature().empty());  // no tokens

  options_.authorizer = std::make_shared<Authorizer>(kToken, "admin-token");
  Reopen();  // the same state, now with a cluster token
  v1::RestoreOrder order = Heartbeat(w0).assignment().restore();
  ASSERT_EQ(order.checkpoint_id(), 1u);
  EXPECT_EQ(order.signature(), RestoreOrderSignature(kToken, job_id, unsigned_copy(order)));
  EXPECT_TRUE(Job(job_id).restore().signature().empty());  // signed as it leaves, not stored

  ASSERT_TRUE(scheduler_->CancelJob(job_id).ok());
  auto again = scheduler_->RestoreJob(job_id, 1);  // a new job from the first one's checkpoint
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(Job(again->job_id()).state(), v1::RUNNING);
  order = Heartbeat(w0).assignment().restore();
  EXPECT_EQ(order.source_job_id(), job_id);
  EXPECT_EQ(order.signature(),
            RestoreOrderSignature(kToken, again->job_id(), unsigned_copy(order)));
  EXPECT_NE(order.signature(), RestoreOrderSignature(kToken, job_id, unsigned_copy(order)));
}

}  // namespace
}  // namespace ps
