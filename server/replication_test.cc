// Replicas: a primary's slots copied and numbered (ReplicationSource), applied once and in order
// by the backup (ReplicationBackup); refused requests change nothing and are counted.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/shard_map.h"
#include "common/testing/key_blocks.h"
#include "gtest/gtest.h"
#include "server/replication_backup.h"
#include "server/replication_map.h"
#include "server/replication_source.h"
#include "server/table_store.h"

namespace ps::replication_test {
namespace {

using testing::Block;

constexpr char kJob[] = "job";
constexpr char kPrimary[] = "10.0.0.1:7000";
constexpr uint32_t kSparse = 1;
constexpr uint32_t kDense = 2;

v1::TableSpec Spec(uint32_t id, v1::TableKind kind) {
  v1::TableSpec spec;
  spec.set_table_id(id);
  spec.set_name(kind == v1::DENSE ? "dense" : "sparse");
  spec.set_job_id(kJob);
  spec.set_kind(kind);
  spec.set_dim(4);
  spec.mutable_initializer()->set_kind(v1::InitializerSpec::UNIFORM);
  spec.mutable_initializer()->set_low(-1.0f);
  spec.mutable_initializer()->set_high(1.0f);
  spec.mutable_initializer()->set_seed(7);
  if (kind == v1::DENSE) spec.set_num_rows(64);
  // Optimizer state travels with the values: adam keeps m and v per value.
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  return spec;
}

std::vector<uint64_t> Keys(uint64_t first, uint64_t n) {
  std::vector<uint64_t> keys;
  for (uint64_t k = first; k < first + n; ++k) keys.push_back(k);
  return keys;
}

// Every row of a table: key -> values, optimizer state and update count.
std::vector<std::pair<uint64_t, std::vector<float>>> Rows(const TableStore& store, uint32_t id) {
  std::vector<std::pair<uint64_t, std::vector<float>>> rows;
  store.ForEachRow(id, [&](uint64_t key, int64_t updates, absl::Span<const float> row) {
    std::vector<float> v(row.begin(), row.end());
    v.push_back(static_cast<float>(updates));
    rows.emplace_back(key, std::move(v));
  });
  std::sort(rows.begin(), rows.end());
  return rows;
}

class ReplicationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (TableStore* store : {&primary_, &copy_}) {
      ASSERT_TRUE(store->CreateTable(Spec(kSparse, v1::SPARSE)).ok());
      ASSERT_TRUE(store->CreateTable(Spec(kDense, v1::DENSE)).ok());
    }
    initial_dense_ = Rows(copy_, kDense);
    ASSERT_TRUE(primary_.SetJobShards(kJob, std::vector<bool>(kNumSlots, true), 1).ok());
    ASSERT_TRUE(
        backup_.SetBackupSlots(kJob, 1, std::vector<std::string>(kNumSlots, kPrimary)).ok());
  }

  // Applies gradients `g` to sparse keys [first, first + n) and every dense row, on the primary.
  void Train(uint64_t first, uint64_t n, float g) {
    for (auto [id, keys] : {std::pair{kSparse, Keys(first, n)}, std::pair{kDense, Keys(0, 64)}}) {
      const v1::KeyBlock block = Block(id, keys, std::vector<float>(keys.size() * 4, g));
      TableStore::BlockView view;
      ASSERT_TRUE(primary_.Resolve(kJob, block, /*with_values=*/true, &view).ok());
      ASSERT_TRUE(primary_.CheckNewRows({view}).ok());
      ASSERT_TRUE(primary_.Apply(view).ok());
    }
  }

  // The slots that hold rows of the sparse keys [first, first + n) or of the dense table.
  static std::vector<bool> SlotsOf(uint64_t first, uint64_t n) {
    std::vector<bool> slots(kNumSlots, false);
    for (uint64_t k : Keys(first, n)) slots[SlotOf(kSparse, k)] = true;
    for (uint64_t k : Keys(0, 64)) slots[SlotOf(kDense, k)] = true;
    return slots;
  }

  v1::ReplicateRequest Prepare(const std::vector<bool>& slots, int64_t clock) {
    auto req = source_.Prepare(kJob, slots, clock);
    EXPECT_TRUE(req.ok()) << req.status();
    return *req;
  }

  void ExpectSameRows() {
    EXPECT_EQ(Rows(copy_, kSparse), Rows(primary_, kSparse));
    EXPECT_EQ(Rows(copy_, kDense), Rows(primary_, kDense));
  }

  TableStore primary_{TableStoreOptions{}};
  TableStore copy_{TableStoreOptions{}};  // the backup's rows
  ReplicationSource source_{&primary_, kPrimary};
  ReplicationBackup backup_{&copy_};
  std::vector<std::pair<uint64_t, std::vector<float>>> initial_dense_;
};

// Values, optimizer state (adam's m and v) and update counts arrive bit for bit, update after
// update; the backup's place follows.
TEST_F(ReplicationTest, AppliedUpdatesMatchThePrimaryBitForBit) {
  for (int clock = 0; clock < 3; ++clock) {
    Train(clock * 10, 40, 0.25f * (clock + 1));
    const std::vector<bool> slots = SlotsOf(0, 60);
    auto resp = backup_.Apply(Prepare(slots, clock));
    ASSERT_TRUE(resp.ok()) << resp.status();
    EXPECT_EQ(resp->applied(), static_cast<uint32_t>(std::count(slots.begin(), slots.end(), true)));
    EXPECT_EQ(resp->duplicates(), 0u);
    ExpectSameRows();
  }
  const uint32_t slot = SlotOf(kSparse, 3);
  EXPECT_EQ(backup_.Progress(kJob, slot).seq, 3u);
  EXPECT_EQ(backup_.Progress(kJob, slot).clock, 2);
  EXPECT_GT(backup_.counts().bytes, 0u);
}

// A repeated update (a retry) is ignored and counted, even when its rows differ: nothing twice.
TEST_F(ReplicationTest, DuplicateIsIgnoredAndCounted) {
  Train(0, 20, 1.0f);
  const std::vector<bool> slots = SlotsOf(0, 20);
  const v1::ReplicateRequest first = Prepare(slots, 0);
  ASSERT_TRUE(backup_.Apply(first).ok());
  const auto before = Rows(copy_, kSparse);
  v1::ReplicateRequest again = first;
  for (v1::ReplicatedSlot& s : *again.mutable_slots()) s.clear_tables();  // would empty them
  auto resp = backup_.Apply(again);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->applied(), 0u);
  EXPECT_EQ(resp->duplicates(), static_cast<uint32_t>(first.slots_size()));
  EXPECT_EQ(Rows(copy_, kSparse), before);
  EXPECT_EQ(backup_.counts().duplicates, static_cast<uint64_t>(first.slots_size()));
  // A request of a duplicate and new updates applies the new ones only.
  Train(0, 20, 2.0f);
  const v1::ReplicateRequest next = Prepare(slots, 1);  // update 2 of every slot
  v1::ReplicateRequest twice = next;
  *twice.add_slots() = again.slots(0);  // that slot listed twice: malformed, nothing applied
  EXPECT_EQ(backup_.Apply(twice).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Rows(copy_, kSparse), before);
  v1::ReplicateRequest mixed;
  mixed.set_job_id(next.job_id());
  mixed.set_shard_epoch(next.shard_epoch());
  mixed.set_primary(next.primary());
  *mixed.add_slots() = again.slots(0);
  for (int i = 1; i < next.slots_size(); ++i) *mixed.add_slots() = next.slots(i);
  resp = backup_.Apply(mixed);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->duplicates(), 1u);
  EXPECT_EQ(resp->applied(), static_cast<uint32_t>(next.slots_size() - 1));
  EXPECT_EQ(backup_.Progress(kJob, next.slots(0).slot()).seq, 1u);
  EXPECT_EQ(backup_.Progress(kJob, next.slots(1).slot()).seq, 2u);
}

// An update past the next one (one was lost: a failed send) is applied, counted as a gap: it
// carries the whole slot, so the backup holds the primary's rows again. The lost one arriving
// late is ignored (older than what the backup holds).
TEST_F(ReplicationTest, AnUpdateAfterALostOneIsApplied) {
  const std::vector<bool> slots = SlotsOf(0, 8);
  Train(0, 8, 1.0f);
  ASSERT_TRUE(backup_.Apply(Prepare(slots, 0)).ok());
  Train(0, 8, 1.0f);
  const v1::ReplicateRequest two = Prepare(slots, 1);  // never arrives
  Train(0, 8, 1.0f);
  auto resp = backup_.Apply(Prepare(slots, 2));
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->applied(), static_cast<uint32_t>(std::count(slots.begin(), slots.end(), true)));
  ExpectSameRows();
  EXPECT_EQ(backup_.counts().gaps, resp->applied());
  EXPECT_EQ(backup_.Progress(kJob, SlotOf(kSparse, 1)).seq, 3u);
  resp = backup_.Apply(two);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->applied(), 0u);
  EXPECT_EQ(resp->duplicates(), static_cast<uint32_t>(two.slots_size()));
  ExpectSameRows();
}

// A slot's first update seeds its backup whatever its number (it carries the whole slot): a
// backup placed while the job runs starts where the primary is.
TEST_F(ReplicationTest, TheFirstUpdateSeedsANewBackup) {
  const std::vector<bool> slots = SlotsOf(0, 8);
  for (int clock = 0; clock < 3; ++clock) {
    Train(0, 8, 1.0f);
    Prepare(slots, clock);  // sent nowhere: no backup yet
  }
  auto resp = backup_.Apply(Prepare(slots, 3));  // update 4 of every slot
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->applied(), static_cast<uint32_t>(std::count(slots.begin(), slots.end(), true)));
  ExpectSameRows();
  EXPECT_EQ(backup_.Progress(kJob, SlotOf(kSparse, 1)).seq, 4u);
}

// Only the slot's primary at the backup's shard epoch may send it updates.
TEST_F(ReplicationTest, WrongPrimaryOrEpochIsRefusedAndCounted) {
  Train(0, 8, 1.0f);
  const std::vector<bool> slots = SlotsOf(0, 8);
  v1::ReplicateRequest req = Prepare(slots, 0);
  v1::ReplicateRequest impostor = req;
  impostor.set_primary("10.0.0.2:7000");
  EXPECT_EQ(backup_.Apply(impostor).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(backup_.counts().wrong_primary, 1u);
  v1::ReplicateRequest stale = req;
  stale.set_shard_epoch(0);
  auto refused = backup_.Apply(stale);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("shard epoch"), std::string::npos) << refused.status();
  v1::ReplicateRequest other_job = req;
  other_job.set_job_id("other");
  EXPECT_EQ(backup_.Apply(other_job).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(backup_.counts().wrong_epoch, 2u);
  EXPECT_TRUE(Rows(copy_, kSparse).empty());
  EXPECT_EQ(Rows(copy_, kDense), initial_dense_);
  // A new map where one of the slots is not backed up here any more: refused, whole request.
  std::vector<std::string> primaries(kNumSlots, kPrimary);
  primaries[req.slots(0).slot()] = "";
  ASSERT_TRUE(backup_.SetBackupSlots(kJob, 2, primaries).ok());
  req.set_shard_epoch(2);
  EXPECT_EQ(backup_.Apply(req).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(backup_.counts().wrong_primary, 2u);
  EXPECT_EQ(backup_.counts().applied, 0u);
  // An older map is refused.
  EXPECT_EQ(backup_.SetBackupSlots(kJob, 1, primaries).code(),
            absl::StatusCode::kFailedPrecondition);
}

// Rows that are not whole rows, or do not fit the tables, are refused; nothing is applied.
TEST_F(ReplicationTest, MalformedRowsAreRefused) {
  Train(0, 8, 1.0f);
  v1::ReplicateRequest req = Prepare(SlotsOf(0, 8), 0);
  v1::ReplicateRequest cut = req;
  cut.mutable_slots(0)->mutable_tables(0)->mutable_rows()->pop_back();
  EXPECT_EQ(backup_.Apply(cut).status().code(), absl::StatusCode::kInvalidArgument);
  v1::ReplicateRequest narrow = req;
  v1::ReplicatedRows& t = *narrow.mutable_slots(0)->mutable_tables(0);
  t.set_row_floats(t.row_floats() * 2);
  t.mutable_keys()->resize(t.keys().size() / 2 / 8 * 8);
  t.mutable_updates()->resize(t.keys().size());
  EXPECT_EQ(backup_.Apply(narrow).status().code(), absl::StatusCode::kInvalidArgument);
  v1::ReplicateRequest out_of_range = req;
  out_of_range.mutable_slots(0)->set_slot(kNumSlots);
  EXPECT_EQ(backup_.Apply(out_of_range).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Rows(copy_, kSparse).empty());
  EXPECT_EQ(backup_.counts().applied, 0u);
  ASSERT_TRUE(backup_.Apply(req).ok());  // the well-formed one still goes in, as update 1
  ExpectSameRows();
}

// A replica map names, for the server receiving it, the slots it backs up (with their primary)
// and the backups of the slots it owns; a malformed one is refused.
TEST(ReplicaMapTest, RolesOfTheReceivingServer) {
  v1::ReplicaMap map;
  for (const char* a : {"a:1", "b:1", "c:1"}) map.add_servers(a);
  for (uint32_t s = 0; s < kNumSlots; ++s) map.add_slot_backups((s + 1) % 3);
  map.set_server_index(1);
  auto roles = ResolveReplicaMap(map);
  ASSERT_TRUE(roles.ok()) << roles.status();
  EXPECT_EQ(roles->self, "b:1");
  EXPECT_EQ(roles->primaries[0], "a:1");  // slot 0: owner a, backup b
  EXPECT_EQ(roles->backups[0], "");
  EXPECT_EQ(roles->backups[1], "c:1");  // slot 1: owner b, backup c
  EXPECT_EQ(roles->primaries[2], "");   // slot 2: owner c, backup a
  v1::ReplicaMap self_backup = map;
  self_backup.set_slot_backups(4, 4 % 3);  // slot 4 backed up on its owner
  EXPECT_EQ(ResolveReplicaMap(self_backup).status().code(), absl::StatusCode::kInvalidArgument);
  v1::ReplicaMap short_map = map;
  short_map.mutable_slot_backups()->RemoveLast();
  EXPECT_EQ(ResolveReplicaMap(short_map).status().code(), absl::StatusCode::kInvalidArgument);
  v1::ReplicaMap outside = map;
  outside.set_server_index(3);
  EXPECT_EQ(ResolveReplicaMap(outside).status().code(), absl::StatusCode::kInvalidArgument);
  v1::ReplicaMap alone;
  alone.add_servers("a:1");
  EXPECT_EQ(ResolveReplicaMap(alone).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps::replication_test
