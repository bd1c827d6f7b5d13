#include "server/internal/job_shards.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/shard_map.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

std::vector<bool> FirstSlots(uint32_t n) {
  std::vector<bool> owned(kNumSlots, false);
  for (uint32_t s = 0; s < n; ++s) owned[s] = true;
  return owned;
}

TEST(JobShardsTest, AJobWithoutShardsOwnsTheDefaultOnes) {
  JobShards shards(FirstSlots(3), 7);
  EXPECT_EQ(shards.Of("job")->epoch, 7u);
  EXPECT_EQ(shards.Of("job")->NumOwned(), 3u);
  EXPECT_EQ(shards.Of("job")->OwnedSlots(), FirstSlots(3));
  JobShards every({}, 1);
  EXPECT_EQ(every.Of("job")->NumOwned(), kNumSlots);
}

TEST(JobShardsTest, AnEpochNeverGoesBackAndNamesOneSetOfSlots) {
  JobShards shards({}, 1);
  ASSERT_TRUE(shards.Set("job", FirstSlots(2), 5).ok());
  EXPECT_EQ(shards.Set("job", FirstSlots(2), 4).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(shards.Set("job", FirstSlots(3), 5).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(shards.Set("job", FirstSlots(2), 5).ok());  // the same again
  EXPECT_TRUE(shards.Set("job", FirstSlots(3), 6).ok());
  EXPECT_EQ(shards.Of("job")->NumOwned(), 3u);
  EXPECT_EQ(shards.Set("job", FirstSlots(1), 6).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(shards.Set("job", {true}, 7).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shards.CheckEpoch("job", 5).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(shards.CheckEpoch("job", 6).ok());
  EXPECT_TRUE(shards.CheckEpoch("job", 0).ok());
}

TEST(JobShardsTest, FencedJobsOwnNothingUntilSetAgain) {
  JobShards shards({}, 1);
  ASSERT_TRUE(shards.Set("job", FirstSlots(2), 5).ok());
  shards.FenceAll();
  EXPECT_TRUE(shards.Of("job")->fenced);
  EXPECT_EQ(shards.Of("job")->NumOwned(), 0u);
  EXPECT_EQ(shards.Of("other")->NumOwned(), 0u);  // the default slots are fenced too
  EXPECT_EQ(shards.Set("job", FirstSlots(2), 4).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(shards.Set("job", FirstSlots(3), 5).ok());  // the fenced epoch, other slots
  EXPECT_FALSE(shards.Of("job")->fenced);
  EXPECT_EQ(shards.Of("job")->NumOwned(), 3u);
}

TEST(JobShardsTest, ADroppedJobGetsNoShardsAndTheOldestDropsAreForgotten) {
  JobShards shards({}, 1);
  ASSERT_TRUE(shards.Set("job", FirstSlots(2), 5).ok());
  EXPECT_TRUE(shards.Drop("job"));
  EXPECT_FALSE(shards.Drop("job"));
  EXPECT_TRUE(shards.IsDropped("job"));
  EXPECT_EQ(shards.Of("job")->epoch, 1u);  // its own shards are gone
  const absl::Status s = shards.Set("job", FirstSlots(2), 6);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("job 'job' was dropped"), absl::string_view::npos) << s;
  for (size_t i = 0; i < JobShards::kMaxDroppedJobs; ++i) shards.Drop(absl::StrCat("j", i));
  EXPECT_FALSE(shards.IsDropped("job"));
  EXPECT_TRUE(shards.IsDropped("j0"));
}

}  // namespace
}  // namespace ps
