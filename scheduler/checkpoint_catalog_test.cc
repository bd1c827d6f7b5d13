// CheckpointCatalog: one job's checkpoints and their states, without a scheduler, clock or store.
#include "scheduler/checkpoint_catalog.h"

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::checkpoint_catalog_test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

v1::CheckpointInfo NewCheckpoint(uint64_t id, int num_shards = 2,
                                 const std::string& job_id = "job-1") {
  v1::CheckpointInfo checkpoint;
  checkpoint.set_job_id(job_id);
  checkpoint.set_checkpoint_id(id);
  checkpoint.set_clock(static_cast<int64_t>(id) * 10);
  checkpoint.set_dir("/ckpt/job-1/ckpt-" + std::to_string(id));
  for (int k = 0; k < num_shards; ++k) checkpoint.add_shards()->set_server_index(k);
  return checkpoint;
}

google::protobuf::RepeatedPtrField<v1::CheckpointShard> Reported(int num_shards) {
  google::protobuf::RepeatedPtrField<v1::CheckpointShard> shards;
  for (int k = 0; k < num_shards; ++k) {
    shards.Add()->set_rows(100 + k);
    shards.Mutable(k)->set_bytes(1000 + k);
  }
  return shards;
}

class CheckpointCatalogTest : public ::testing::Test {
 protected:
  // Begins checkpoint `id` and completes it.
  void AddComplete(uint64_t id) {
    ASSERT_TRUE(catalog_.Begin(NewCheckpoint(id), kT0).ok());
    ASSERT_TRUE(catalog_.RecordEnd(id, kT0 + absl::Seconds(1), 0.5).ok());
    ASSERT_TRUE(catalog_.Complete(id, Reported(2)).ok());
  }
  void AddFailed(uint64_t id) {
    ASSERT_TRUE(catalog_.Begin(NewCheckpoint(id), kT0).ok());
    ASSERT_TRUE(catalog_.Fail(id, "a server refused").ok());
  }
  v1::CheckpointState State(uint64_t id) { return catalog_.at(id).state(); }

  CheckpointCatalog catalog_{"job-1"};
};

TEST_F(CheckpointCatalogTest, BeginAddsOneWritingCheckpointAndFailsTheOneBefore) {
  auto first = catalog_.Begin(NewCheckpoint(1), kT0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->checkpoint->state(), v1::CHECKPOINT_WRITING);
  EXPECT_EQ(first->checkpoint->dir(), "/ckpt/job-1/ckpt-1");
  EXPECT_THAT(first->superseded, IsEmpty());

  auto second = catalog_.Begin(NewCheckpoint(2), kT0 + absl::Seconds(5));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_THAT(second->superseded, ElementsAre(1u));
  EXPECT_EQ(State(1), v1::CHECKPOINT_FAILED);
  EXPECT_THAT(catalog_.at(1).error(), HasSubstr("superseded"));
  EXPECT_EQ(catalog_.at(1).end_time_unix_ms(), absl::ToUnixMillis(kT0 + absl::Seconds(5)));
  EXPECT_EQ(State(2), v1::CHECKPOINT_WRITING);
  int writing = 0;
  for (const auto& [id, checkpoint] : catalog_.entries()) {
    writing += checkpoint.state() == v1::CHECKPOINT_WRITING;
  }
  EXPECT_EQ(writing, 1);
}

TEST_F(CheckpointCatalogTest, BeginRefusesAnIdNotAboveTheLastOrAnotherJobsCheckpoint) {
  AddComplete(3);
  for (uint64_t id : {0u, 1u, 3u}) {
    auto refused = catalog_.Begin(NewCheckpoint(id), kT0);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << id;
  }
  auto other = catalog_.Begin(NewCheckpoint(4, 2, "job-2"), kT0);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  // Nothing changed: checkpoint 3 is still the only one, complete.
  EXPECT_EQ(catalog_.entries().size(), 1u);
  EXPECT_EQ(State(3), v1::CHECKPOINT_COMPLETE);
  // A refused Begin fails no WRITING one either.
  ASSERT_TRUE(catalog_.Begin(NewCheckpoint(4), kT0).ok());
  EXPECT_FALSE(catalog_.Begin(NewCheckpoint(4), kT0).ok());
  EXPECT_EQ(State(4), v1::CHECKPOINT_WRITING);
}

TEST_F(CheckpointCatalogTest, CompleteTakesTheServersRowsAndBytes) {
  ASSERT_TRUE(catalog_.Begin(NewCheckpoint(1), kT0).ok());
  auto ended = catalog_.RecordEnd(1, kT0 + absl::Seconds(2), 1.5);
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ((*ended)->end_time_unix_ms(), absl::ToUnixMillis(kT0 + absl::Seconds(2)));
  EXPECT_DOUBLE_EQ((*ended)->write_seconds(), 1.5);
  EXPECT_EQ(State(1), v1::CHECKPOINT_WRITING);  // until the caller decides

  // As many shards as it was taken on, or nothing changes.
  EXPECT_EQ(catalog_.Complete(1, Reported(1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(State(1), v1::CHECKPOINT_WRITING);
  auto complete = catalog_.Complete(1, Reported(2));
  ASSERT_TRUE(complete.ok()) << complete.status();
  EXPECT_EQ((*complete)->state(), v1::CHECKPOINT_COMPLETE);
  EXPECT_EQ((*complete)->shards(1).rows(), 101u);
  EXPECT_EQ((*complete)->shards(1).bytes(), 1001u);
}

TEST_F(CheckpointCatalogTest, OnlyAWritingCheckpointEnds) {
  EXPECT_EQ(catalog_.RecordEnd(7, kT0, 0).status().code(), absl::StatusCode::kNotFound);
  AddComplete(1);
  AddFailed(2);
  for (uint64_t id : {1u, 2u}) {
    const v1::CheckpointState before = State(id);
    auto ended = catalog_.RecordEnd(id, kT0, 0);
    EXPECT_EQ(ended.status().code(), absl::StatusCode::kFailedPrecondition) << id;
    EXPECT_EQ(catalog_.Complete(id, Reported(2)).status().code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(catalog_.Fail(id, "late").code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(State(id), before);
  }
  EXPECT_THAT(std::string(catalog_.RecordEnd(2, kT0, 0).status().message()),
              HasSubstr("checkpoint 2 of job-1 is failed (a server refused)"));
}

TEST_F(CheckpointCatalogTest, FindCompleteNamesWhatIsWrong) {
  auto none = catalog_.FindComplete(0);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("job-1 has no complete checkpoint"));
  AddComplete(1);
  AddComplete(2);
  AddFailed(3);
  auto latest = catalog_.FindComplete(0);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ((*latest)->checkpoint_id(), 2u);
  ASSERT_TRUE(catalog_.FindComplete(1).ok());
  EXPECT_EQ(catalog_.FindComplete(9).status().code(), absl::StatusCode::kNotFound);
  auto failed = catalog_.FindComplete(3);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr("is failed (a server refused); only a complete checkpoint"));
}

TEST_F(CheckpointCatalogTest, LatestCompleteBefore) {
  EXPECT_EQ(catalog_.LatestComplete(), nullptr);
  AddComplete(1);
  AddFailed(2);
  AddComplete(3);
  ASSERT_TRUE(catalog_.Begin(NewCheckpoint(4), kT0).ok());
  EXPECT_EQ(catalog_.LatestComplete()->checkpoint_id(), 3u);
  EXPECT_EQ(catalog_.LatestComplete(3)->checkpoint_id(), 1u);
  EXPECT_EQ(catalog_.LatestComplete(1), nullptr);
}

TEST_F(CheckpointCatalogTest, OnlyACompleteCheckpointBecomesCorrupt) {
  AddComplete(1);
  AddFailed(2);
  EXPECT_TRUE(catalog_.MarkCorrupt(1, "shard-0: bad block"));
  EXPECT_EQ(State(1), v1::CHECKPOINT_CORRUPT);
  EXPECT_EQ(catalog_.at(1).error(), "shard-0: bad block");
  EXPECT_FALSE(catalog_.MarkCorrupt(1, "again"));
  EXPECT_FALSE(catalog_.MarkCorrupt(2, "failed"));
  EXPECT_FALSE(catalog_.MarkCorrupt(9, "unknown"));
  EXPECT_EQ(State(2), v1::CHECKPOINT_FAILED);
  EXPECT_EQ(catalog_.LatestComplete(), nullptr);
}

TEST_F(CheckpointCatalogTest, FailWritingFailsEveryWritingOne) {
  // A catalog as loaded (never written so by this code): two WRITING.
  CheckpointCatalog::Entries entries;
  for (uint64_t id : {1u, 2u}) {
    entries[id] = NewCheckpoint(id);
    entries[id].set_state(v1::CHECKPOINT_WRITING);
  }
  CheckpointCatalog loaded("job-1", entries);
  EXPECT_THAT(loaded.FailWriting("the shard map changed", kT0), ElementsAre(1u, 2u));
  EXPECT_EQ(loaded.at(2).error(), "the shard map changed");
  EXPECT_THAT(loaded.FailWriting("again", kT0), IsEmpty());
}

TEST_F(CheckpointCatalogTest, PruningKeepsTheLastCompleteAndWhatIsInUse) {
  for (uint64_t id = 1; id <= 5; ++id) AddComplete(id);
  const std::set<uint64_t> nothing_in_use;
  EXPECT_THAT(catalog_.ToPrune(2, nothing_in_use), ElementsAre(3u, 2u, 1u));
  EXPECT_THAT(catalog_.ToPrune(2, {2}), ElementsAre(3u, 1u));
  // keep_last 0 keeps one.
  EXPECT_THAT(catalog_.ToPrune(0, nothing_in_use), ElementsAre(4u, 3u, 2u, 1u));
  EXPECT_THAT(catalog_.ToPrune(10, nothing_in_use), IsEmpty());
}

TEST_F(CheckpointCatalogTest, PruningDropsFailedFilesOnlyBelowAComplete) {
  AddFailed(1);
  AddComplete(2);
  AddFailed(3);
  ASSERT_TRUE(catalog_.Begin(NewCheckpoint(4), kT0).ok());  // writing: never pruned
  const std::set<uint64_t> nothing_in_use;
  EXPECT_THAT(catalog_.ToPrune(1, nothing_in_use), ElementsAre(1u));
  catalog_.MarkPruned(1, /*files_removed=*/true);
  EXPECT_EQ(State(1), v1::CHECKPOINT_FAILED);  // its entry stays, without files
  EXPECT_TRUE(catalog_.at(1).dir().empty());
  EXPECT_THAT(catalog_.ToPrune(1, nothing_in_use), IsEmpty());
}

TEST_F(CheckpointCatalogTest, MarkPrunedKeepsTheDirOfFilesNotRemoved) {
  AddComplete(1);
  AddComplete(2);
  catalog_.MarkPruned(1, /*files_removed=*/false);
  EXPECT_EQ(State(1), v1::CHECKPOINT_PRUNED);
  EXPECT_EQ(catalog_.at(1).dir(), "/ckpt/job-1/ckpt-1");
  // Pruned is final: not complete, not corrupt, not pruned again.
  EXPECT_FALSE(catalog_.MarkCorrupt(1, "x"));
  EXPECT_EQ(catalog_.FindComplete(1).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(catalog_.ToPrune(1, {}), IsEmpty());
}

}  // namespace
}  // namespace ps::checkpoint_catalog_test
