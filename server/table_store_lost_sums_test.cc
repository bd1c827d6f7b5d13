// Sync sums that cannot be applied (a tiered table whose disk has no room at the clock's end)
// are not lost silently: the job is refused (DATA_LOSS naming why) until the slots are loaded
// again or the job is dropped; other jobs serve on.
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/shard_map.h"
#include "common/testing/key_blocks.h"
#include "common/testing/scratch_dir.h"
#include "gtest/gtest.h"
#include "server/consistency_gate.h"
#include "server/data_plane.h"
#include "server/request_deduper.h"
#include "server/table_store.h"

namespace ps::table_store_lost_sums_test {
namespace {

namespace fs = std::filesystem;
using testing::Block;
using v1::TableSpec;

// A fresh directory under the test temp dir, removed with the object.
class TempDir : public testing::ScratchDir {
 public:
  TempDir() : ScratchDir("lost-sums") {}
};

TableSpec Table(const std::string& job, uint32_t id, uint64_t max_rows, bool disk) {
  TableSpec spec;
  spec.set_table_id(id);
  spec.set_name(absl::StrCat("emb", id));
  spec.set_job_id(job);
  spec.set_kind(v1::SPARSE);
  spec.set_dim(4);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  if (max_rows != 0) spec.mutable_eviction()->set_max_rows(max_rows);
  if (disk) spec.mutable_tier()->set_disk(true);
  return spec;
}

std::vector<uint64_t> Keys(uint64_t first, uint64_t n) {
  std::vector<uint64_t> keys(n);
  for (uint64_t i = 0; i < n; ++i) keys[i] = first + i;
  return keys;
}

absl::Status Accumulate(TableStore& store, const std::string& job, uint32_t id,
                        const std::vector<uint64_t>& keys, int64_t clock) {
  TableStore::BlockView view;
  const v1::KeyBlock block = Block(id, keys, std::vector<float>(keys.size() * 4, 0.5f));
  if (absl::Status s = store.Resolve(job, block, true, &view); !s.ok()) return s;
  return store.Accumulate(view, clock);
}

TEST(TableStoreLostSumsTest, SumsThatFindNoRoomRefuseTheJobUntilItsSlotsAreLoadedAgain) {
  TempDir dir;
  TableStoreOptions options;
  options.tier.dir = dir.path() + "/tier";
  options.tier.min_free_bytes = uint64_t{1} << 62;  // no disk has that: every write-back fails
  TableStore store(options);
  ASSERT_TRUE(store.CreateTable(Table("a", 1, 10, true)).ok());
  ASSERT_TRUE(store.CreateTable(Table("b", 2, 0, false)).ok());
  // 10 rows fit in RAM: their sums apply.
  ASSERT_TRUE(Accumulate(store, "a", 1, Keys(0, 10), 0).ok());
  store.ApplyAccumulated("a", 0);
  EXPECT_TRUE(store.CheckNotLost("a").ok());
  // 20 new rows need room: writing the old ones back fails, so these sums cannot apply.
  ASSERT_TRUE(Accumulate(store, "a", 1, Keys(100, 20), 1).ok());
  ASSERT_TRUE(Accumulate(store, "b", 2, Keys(0, 20), 1).ok());
  store.ApplyAccumulated("a", 1);
  store.ApplyAccumulated("b", 1);
  const absl::Status lost = store.CheckNotLost("a");
  EXPECT_EQ(lost.code(), absl::StatusCode::kDataLoss) << lost;
  EXPECT_NE(lost.message().find("clock 1"), std::string::npos) << lost;
  EXPECT_NE(lost.message().find("restore the job from a checkpoint"), std::string::npos) << lost;
  EXPECT_TRUE(store.CheckNotLost("b").ok());  // another job is not touched
  // Every data call of the job checks its caller so: refused; the other job's served.
  ConsistencyGate gate([](const std::string&, int64_t, int64_t) {});
  RequestDeduper deduper;
  DataPlane plane(&store, &gate, &deduper, nullptr);
  EXPECT_EQ(plane.CheckCaller("", "a").code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(plane.CheckCaller("", "b").ok());

  // Loading the lost slots again (a restore) clears it; loading other slots does not.
  std::vector<bool> lost_slots(kNumSlots, false);
  for (uint64_t key : Keys(100, 20)) lost_slots[SlotOf(1, key)] = true;
  std::vector<bool> other_slots(kNumSlots, false);
  for (uint32_t s = 0; s < kNumSlots; ++s) other_slots[s] = !lost_slots[s];
  ASSERT_TRUE(store.LoadSlots("a", other_slots, {}).ok());
  EXPECT_EQ(store.CheckNotLost("a").code(), absl::StatusCode::kDataLoss);
  ASSERT_TRUE(store.LoadSlots("a", lost_slots, {}).ok());
  EXPECT_TRUE(store.CheckNotLost("a").ok());
}

TEST(TableStoreLostSumsTest, DroppingTheJobForgetsItsLostSums) {
  TempDir dir;
  TableStoreOptions options;
  options.tier.dir = dir.path() + "/tier";
  options.tier.min_free_bytes = uint64_t{1} << 62;
  TableStore store(options);
  ASSERT_TRUE(store.CreateTable(Table("a", 1, 10, true)).ok());
  ASSERT_TRUE(Accumulate(store, "a", 1, Keys(0, 30), 0).ok());
  store.ApplyAccumulated("a", 0);
  ASSERT_EQ(store.CheckNotLost("a").code(), absl::StatusCode::kDataLoss);
  store.DropJob("a");
  EXPECT_TRUE(store.CheckNotLost("a").ok());
}

}  // namespace
}  // namespace ps::table_store_lost_sums_test
