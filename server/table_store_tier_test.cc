// TableStore's disk tier (TableSpec.tier): the checks, write-back and read-back, a capped tiered
// table bit-identical to an uncapped one, drops, TTL, prefetch pins, checkpoints and restores,
// concurrency, and a full disk.
#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/shard_map.h"
#include "common/table_features.h"
#include "common/testing/key_blocks.h"
#include "common/testing/scratch_dir.h"
#include "gtest/gtest.h"
#include "server/checkpoint_io.h"
#include "server/disk_tier.h"
#include "server/table_store.h"

namespace ps::table_store_tier_test {
namespace {

using testing::Block;
using testing::Floats;
using v1::KeyBlock;
using v1::TableSpec;

constexpr char kJob[] = "job";
namespace fs = std::filesystem;

// A fresh directory under the test temp dir, removed with the object.
class TempDir : public testing::ScratchDir {
 public:
  TempDir() : ScratchDir("tier-test") {}
};

TableSpec Sparse(uint32_t id, uint32_t dim, uint64_t max_rows, bool disk,
                 v1::OptimizerSpec::Kind optimizer = v1::OptimizerSpec::ADAM) {
  TableSpec spec;
  spec.set_table_id(id);
  spec.set_name(absl::StrCat("emb", id));
  spec.set_job_id(kJob);
  spec.set_kind(v1::SPARSE);
  spec.set_dim(dim);
  spec.mutable_initializer()->set_kind(v1::InitializerSpec::UNIFORM);
  spec.mutable_initializer()->set_low(-1.0f);
  spec.mutable_initializer()->set_high(1.0f);
  spec.mutable_initializer()->set_seed(7);
  spec.mutable_optimizer()->set_kind(optimizer);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  if (max_rows != 0) spec.mutable_eviction()->set_max_rows(max_rows);
  if (disk) spec.mutable_tier()->set_disk(true);
  return spec;
}

TableStoreOptions WithTier(const std::string& dir) {
  TableStoreOptions o;
  o.tier.dir = dir + "/tier";
  o.tier.write_buffer_bytes = 1 << 20;
  o.tier.block_cache_bytes = 1 << 20;
  return o;
}

std::vector<uint64_t> Keys(uint64_t first, uint64_t n) {
  std::vector<uint64_t> keys(n);
  for (uint64_t i = 0; i < n; ++i) keys[i] = first + i;
  return keys;
}

absl::Status PullInto(TableStore& store, uint32_t id, const std::vector<uint64_t>& keys,
                      std::vector<float>* out) {
  TableStore::BlockView view;
  const KeyBlock block = Block(id, keys);
  if (absl::Status s = store.Resolve(kJob, block, false, &view); !s.ok()) return s;
  std::string bytes;
  if (absl::Status s = store.Pull(view, &bytes); !s.ok()) return s;
  *out = Floats(bytes);
  return absl::OkStatus();
}

std::vector<float> PullOf(TableStore& store, uint32_t id, const std::vector<uint64_t>& keys) {
  std::vector<float> out;
  const absl::Status s = PullInto(store, id, keys, &out);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// Gradients that differ per key and per call (`salt`).
std::vector<float> Grads(const std::vector<uint64_t>& keys, uint32_t dim, int salt) {
  std::vector<float> g(keys.size() * dim);
  for (size_t i = 0; i < keys.size(); ++i) {
    for (uint32_t j = 0; j < dim; ++j) {
      g[i * dim + j] = 0.01f * static_cast<float>((keys[i] * 31 + j * 7 + salt) % 17) - 0.08f;
    }
  }
  return g;
}

absl::Status Push(TableStore& store, uint32_t id, const std::vector<uint64_t>& keys, uint32_t dim,
                  int salt) {
  TableStore::BlockView view;
  const KeyBlock block = Block(id, keys, Grads(keys, dim, salt));
  if (absl::Status s = store.Resolve(kJob, block, true, &view); !s.ok()) return s;
  return store.Apply(view);
}

absl::Status Accumulate(TableStore& store, uint32_t id, const std::vector<uint64_t>& keys,
                        uint32_t dim, int salt, int64_t clock) {
  TableStore::BlockView view;
  const KeyBlock block = Block(id, keys, Grads(keys, dim, salt));
  if (absl::Status s = store.Resolve(kJob, block, true, &view); !s.ok()) return s;
  return store.Accumulate(view, clock);
}

// Every row of a table (both tiers), by key: update count, then the floats' bits.
struct RowCopy {
  int64_t updates;
  std::vector<uint32_t> bits;
  bool operator==(const RowCopy& o) const { return updates == o.updates && bits == o.bits; }
};
std::map<uint64_t, RowCopy> RowsOf(const TableStore& store, uint32_t id) {
  std::map<uint64_t, RowCopy> rows;
  store.ForEachRow(id, [&](uint64_t key, int64_t updates, absl::Span<const float> row) {
    RowCopy& copy = rows[key];
    EXPECT_TRUE(copy.bits.empty()) << "key " << key << " is held twice";
    copy.updates = updates;
    copy.bits.resize(row.size());
    std::memcpy(copy.bits.data(), row.data(), row.size() * sizeof(float));
  });
  return rows;
}

v1::TableStats StatsOf(const TableStore& store, uint32_t id) {
  auto stats = store.Stats(id);
  EXPECT_TRUE(stats.ok()) << stats.status();
  return stats.ok() ? *stats : v1::TableStats();
}

TEST(TableStoreTierTest, ATierNeedsASparseTableWithARamCap) {
  TableSpec dense = Sparse(1, 4, 0, true);
  dense.set_kind(v1::DENSE);
  dense.set_num_rows(10);
  absl::Status s = ValidateTableFeatures(dense);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tier.disk is for SPARSE tables"), std::string::npos) << s;

  s = ValidateTableFeatures(Sparse(1, 4, 0, true));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tier.disk needs eviction.max_rows"), std::string::npos) << s;

  TableSpec ttl_only = Sparse(1, 4, 0, true);
  ttl_only.mutable_eviction()->set_ttl_seconds(60);
  s = ValidateTableFeatures(ttl_only);
  EXPECT_NE(s.message().find("tier.disk needs eviction.max_rows"), std::string::npos) << s;

  TableSpec zero_cap = Sparse(1, 4, 0, true);
  zero_cap.mutable_eviction()->set_max_rows(0);
  EXPECT_EQ(ValidateTableFeatures(zero_cap).code(), absl::StatusCode::kInvalidArgument);

  TableSpec off = Sparse(1, 4, 0, false);
  off.mutable_tier()->set_disk(false);
  EXPECT_TRUE(ValidateTableFeatures(off).ok());
  EXPECT_TRUE(ValidateTableFeatures(Sparse(1, 4, 10, true)).ok());

  // The same refusals at CreateTable, nothing created.
  TempDir dir;
  TableStore store(WithTier(dir.path()));
  EXPECT_EQ(store.CreateTable(dense).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.CreateTable(Sparse(1, 4, 0, true)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Describe(1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(dir.path() + "/tier"));  // no tier opened for nothing
}

TEST(TableStoreTierTest, ATieredTableOnAServerWithoutTierRootsIsRefused) {
  TableStore store({});
  const absl::Status s = store.CreateTable(Sparse(1, 4, 10, true));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--tier_roots"), std::string::npos) << s;
  EXPECT_EQ(store.Describe(1).status().code(), absl::StatusCode::kNotFound);
  // Untiered tables are fine there.
  EXPECT_TRUE(store.CreateTable(Sparse(2, 4, 10, false)).ok());
}

TEST(TableStoreTierTest, EvictedRowsAreWrittenBackAndReadBackWhole) {
  TempDir dir;
  TableStore tiered(WithTier(dir.path()));
  TableStore plain({});
  ASSERT_TRUE(tiered.CreateTable(Sparse(1, 4, 10, true)).ok());
  ASSERT_TRUE(plain.CreateTable(Sparse(1, 4, 0, false)).ok());
  const std::vector<uint64_t> keys = Keys(100, 100);
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(Push(tiered, 1, keys, 4, round).ok());
    ASSERT_TRUE(Push(plain, 1, keys, 4, round).ok());
  }
  v1::TableStats stats = StatsOf(tiered, 1);
  EXPECT_LE(stats.rows(), 11u);  // the cap, over by one at most
  EXPECT_EQ(stats.rows() + stats.disk_rows(), 100u);
  EXPECT_GT(stats.written_back(), 0u);
  EXPECT_GT(stats.disk_reads(), 0u);
  EXPECT_GT(stats.disk_bytes(), 0u);
  EXPECT_EQ(stats.evicted(), stats.written_back());
  // Every row, on whichever tier, is the uncapped table's, update counts and Adam state included.
  EXPECT_EQ(RowsOf(tiered, 1), RowsOf(plain, 1));
  EXPECT_EQ(PullOf(tiered, 1, keys), PullOf(plain, 1, keys));
  EXPECT_EQ(RowsOf(tiered, 1), RowsOf(plain, 1));
}

TEST(TableStoreTierTest, HalfPrecisionRowsComeBackBitForBit) {
  TempDir dir;
  TableStore tiered(WithTier(dir.path()));
  TableStore plain({});
  TableSpec a = Sparse(1, 3, 5, true, v1::OptimizerSpec::ADAGRAD);
  a.set_storage(TableSpec::FP16);
  TableSpec b = Sparse(1, 3, 0, false, v1::OptimizerSpec::ADAGRAD);
  b.set_storage(TableSpec::FP16);
  ASSERT_TRUE(tiered.CreateTable(a).ok());
  ASSERT_TRUE(plain.CreateTable(b).ok());
  for (int round = 0; round < 4; ++round) {
    const std::vector<uint64_t> keys = Keys(round * 7, 40);
    ASSERT_TRUE(Push(tiered, 1, keys, 3, round).ok());
    ASSERT_TRUE(Push(plain, 1, keys, 3, round).ok());
  }
  EXPECT_EQ(RowsOf(tiered, 1), RowsOf(plain, 1));
}

// The "Done when": in sync mode a table capped at a tenth of its rows ends bit-identical
// to the same table uncapped. Two workers' pushes per clock, pulls between, a skewed key stream.
TEST(TableStoreTierTest, SyncTrainingWithATenthInRamIsBitIdenticalToUncapped) {
  constexpr uint64_t kRows = 2000;
  constexpr uint32_t kDim = 8;
  TempDir dir;
  TableStore tiered(WithTier(dir.path()));
  TableStore plain({});
  ASSERT_TRUE(tiered.CreateTable(Sparse(1, kDim, kRows / 10, true)).ok());
  ASSERT_TRUE(plain.CreateTable(Sparse(1, kDim, 0, false)).ok());
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  auto batch = [&] {
    std::vector<uint64_t> keys;
    std::vector<bool> seen(kRows, false);
    for (int i = 0; i < 300; ++i) {
      // Skewed: about half of the draws fall on the first tenth of the keys.
      const uint64_t k = static_cast<uint64_t>(kRows * u(rng) * u(rng));
      if (!seen[k]) keys.push_back(k);
      seen[k] = true;
    }
    return keys;
  };
  for (int64_t clock = 0; clock < 30; ++clock) {
    for (int worker = 0; worker < 2; ++worker) {
      const std::vector<uint64_t> keys = batch();
      ASSERT_EQ(PullOf(tiered, 1, keys), PullOf(plain, 1, keys)) << "clock " << clock;
      ASSERT_TRUE(Accumulate(tiered, 1, keys, kDim, worker, clock).ok());
      ASSERT_TRUE(Accumulate(plain, 1, keys, kDim, worker, clock).ok());
    }
    tiered.ApplyAccumulated(kJob, clock);
    plain.ApplyAccumulated(kJob, clock);
  }
  const v1::TableStats stats = StatsOf(tiered, 1);
  EXPECT_LE(stats.rows(), kRows / 10 + 8);  // the cap, within a few rows
  EXPECT_GT(stats.disk_rows(), kRows / 2);
  const auto a = RowsOf(tiered, 1);
  const auto b = RowsOf(plain, 1);
  EXPECT_EQ(a.size(), b.size());
  EXPECT_TRUE(a == b) << "the tiered table's rows differ from the uncapped table's";
}

TEST(TableStoreTierTest, ARequestReadsFromDiskOncePerSlot) {
  TempDir dir;
  prometheus::Registry registry;
  auto metrics = ServerMetrics::Create(registry);
  ASSERT_TRUE(metrics.ok());
  TableStore store(WithTier(dir.path()), metrics->get());
  ASSERT_TRUE(store.CreateTable(Sparse(1, 4, 100, true)).ok());
  // 4000 keys, 3900 of them pushed out to disk.
  const std::vector<uint64_t> keys = Keys(0, 4000);
  ASSERT_TRUE(Push(store, 1, keys, 4, 0).ok());
  ASSERT_EQ(StatsOf(store, 1).disk_rows(), 3900u);
  auto read_batches = [&] {
    for (const auto& family : registry.Collect()) {
      if (family.name != "ps_server_tier_read_seconds") continue;
      uint64_t n = 0;
      for (const auto& m : family.metric) n += m.histogram.sample_count;
      return n;
    }
    return uint64_t{0};
  };
  const uint64_t before = read_batches();
  // 50 keys of one slot, none in RAM (at most a batch's worth fits).
  std::vector<uint64_t> one_slot;
  for (uint64_t k = 0; k < 4000 && one_slot.size() < 50; ++k) {
    if (SlotOf(1, k) == SlotOf(1, 7)) one_slot.push_back(k);
  }
  ASSERT_GE(one_slot.size(), 2u);
  const v1::TableStats s0 = StatsOf(store, 1);
  PullOf(store, 1, one_slot);
  EXPECT_EQ(read_batches() - before, 1u);
  const v1::TableStats s1 = StatsOf(store, 1);
  EXPECT_EQ(s1.disk_reads() - s0.disk_reads() + (s1.ram_hits() - s0.ram_hits()), one_slot.size());
  // A pull of many keys: at most one read per slot it touches.
  const uint64_t mid = read_batches();
  PullOf(store, 1, keys);
  EXPECT_LE(read_batches() - mid, kNumSlots);
  EXPECT_GT(read_batches() - mid, 0u);
}

TEST(TableStoreTierTest, DroppingTheJobRemovesItsRowsOnDisk) {
  TempDir dir;
  DiskTier::Options options;
  options.dir = dir.path() + "/t";
  auto tier = DiskTier::Open(options);
  ASSERT_TRUE(tier.ok()) << tier.status();
  const std::string a = DiskTier::TablePrefix("a", 1);
  const std::string ab = DiskTier::TablePrefix("ab", 1);
  ASSERT_TRUE((*tier)->Put(a, 3, {{5, "x"}, {6, "y"}}).ok());
  ASSERT_TRUE((*tier)->Put(ab, 3, {{5, "z"}}).ok());
  ASSERT_TRUE((*tier)->DeletePrefix(DiskTier::JobPrefix("a")).ok());
  std::vector<std::string> values;
  std::vector<bool> found;
  ASSERT_TRUE((*tier)->MultiGet(a, 3, {5, 6}, &values, &found).ok());
  EXPECT_EQ(found, std::vector<bool>({false, false}));
  ASSERT_TRUE((*tier)->MultiGet(ab, 3, {5, 6}, &values, &found).ok());
  EXPECT_EQ(found, std::vector<bool>({true, false}));
  EXPECT_EQ(values[0], "z");
  tier->reset();
  EXPECT_FALSE(fs::exists(options.dir));  // closed: removed

  // Through the store: a job dropped leaves nothing on disk for the next one.
  TableStore store(WithTier(dir.path()));
  ASSERT_TRUE(store.CreateTable(Sparse(1, 4, 10, true)).ok());
  ASSERT_TRUE(Push(store, 1, Keys(0, 200), 4, 0).ok());
  ASSERT_EQ(StatsOf(store, 1).disk_rows(), 190u);
  EXPECT_EQ(store.DropJob(kJob).tables, 1u);
  TableSpec again = Sparse(1, 4, 10, true);
  again.set_job_id("job2");
  ASSERT_TRUE(store.CreateTable(again).ok());
  EXPECT_EQ(StatsOf(store, 1).disk_rows(), 0u);
  EXPECT_EQ(StatsOf(store, 1).disk_bytes(), 0u);
}

TEST(TableStoreTierTest, RowsOnDiskExpireByTheirTtl) {
  TempDir dir;
  TableStore store(WithTier(dir.path()));
  TableSpec spec = Sparse(1, 2, 10, true, v1::OptimizerSpec::SGD);
  spec.mutable_eviction()->set_ttl_seconds(5);
  ASSERT_TRUE(store.CreateTable(spec).ok());
  const absl::Time t0 = absl::Now();
  store.Tick(t0);
  ASSERT_TRUE(Push(store, 1, Keys(0, 50), 2, 0).ok());
  const std::vector<float> pushed = PullOf(store, 1, {0});
  ASSERT_EQ(StatsOf(store, 1).disk_rows(), 40u);
  store.Tick(t0 + absl::Seconds(10));  // RAM rows and rows on disk expire in the sweep
  EXPECT_EQ(RowsOf(store, 1).size(), 0u);
  TableStore fresh({});
  ASSERT_TRUE(fresh.CreateTable(Sparse(1, 2, 0, false, v1::OptimizerSpec::SGD)).ok());
  EXPECT_EQ(PullOf(store, 1, Keys(0, 50)), PullOf(fresh, 1, Keys(0, 50)));  // new rows again
  EXPECT_NE(PullOf(store, 1, {0}), pushed);
  EXPECT_GE(StatsOf(store, 1).expired(), 50u);
}

TEST(TableStoreTierTest, TheSweepExpiresRowsOnDiskWithoutReadingThemBack) {
  TempDir dir;
  TableStore store(WithTier(dir.path()));
  TableSpec spec = Sparse(1, 2, 10, true, v1::OptimizerSpec::SGD);
  spec.mutable_eviction()->set_ttl_seconds(5);
  ASSERT_TRUE(store.CreateTable(spec).ok());
  const absl::Time t0 = absl::Now();
  store.Tick(t0);
  ASSERT_TRUE(Push(store, 1, Keys(0, 50), 2, 0).ok());
  ASSERT_EQ(StatsOf(store, 1).disk_rows(), 40u);
  store.Tick(t0 + absl::Seconds(4));  // within the TTL: every row stays
  EXPECT_EQ(StatsOf(store, 1).disk_rows(), 40u);
  EXPECT_EQ(StatsOf(store, 1).expired(), 0u);
  store.Tick(t0 + absl::Seconds(10));
  const v1::TableStats s = StatsOf(store, 1);
  EXPECT_EQ(s.disk_rows(), 0u);
  EXPECT_EQ(s.disk_bytes(), 0u);
  EXPECT_EQ(s.rows(), 0u);
  EXPECT_EQ(s.expired(), 50u);
  EXPECT_EQ(s.disk_reads(), 0u);  // deleted where they lay
  EXPECT_TRUE(RowsOf(store, 1).empty());
}

TEST(TableStoreTierTest, TheSweepOnDiskIsBoundedAndGoesOnWhereItStopped) {
  TempDir dir;
  TableStore store(WithTier(dir.path()));
  TableSpec spec = Sparse(1, 1, 10, true, v1::OptimizerSpec::SGD);
  spec.mutable_eviction()->set_ttl_seconds(5);
  ASSERT_TRUE(store.CreateTable(spec).ok());
  const absl::Time t0 = absl::Now();
  store.Tick(t0);
  const uint64_t n = TableStore::kDiskSweepRows + 5000;
  ASSERT_TRUE(Push(store, 1, Keys(0, n), 1, 0).ok());
  ASSERT_EQ(StatsOf(store, 1).disk_rows(), n - 10);
  store.Tick(t0 + absl::Seconds(10));  // RAM's 10 rows, and kDiskSweepRows rows on disk
  EXPECT_EQ(StatsOf(store, 1).disk_rows(), n - 10 - TableStore::kDiskSweepRows);
  EXPECT_EQ(StatsOf(store, 1).expired(), 10 + TableStore::kDiskSweepRows);
  store.Tick(t0 + absl::Seconds(11));  // the rest, from where the first sweep stopped
  EXPECT_EQ(StatsOf(store, 1).disk_rows(), 0u);
  EXPECT_EQ(StatsOf(store, 1).expired(), n);
  EXPECT_EQ(StatsOf(store, 1).disk_reads(), 0u);
}

TEST(TableStoreTierTest, PrefetchedRowsStayInRamUntilPulled) {
  TempDir dir;
  TableStore store(WithTier(dir.path()));
  ASSERT_TRUE(store.CreateTable(Sparse(1, 4, 100, true)).ok());
  ASSERT_TRUE(Push(store, 1, Keys(0, 1000), 4, 0).ok());
  const std::vector<uint64_t> next = Keys(0, 50);  // pushed out long ago
  TableStore::BlockView view;
  const KeyBlock block = Block(1, next);
  ASSERT_TRUE(store.Resolve(kJob, block, false, &view).ok());
  const v1::TableStats s0 = StatsOf(store, 1);
  ASSERT_TRUE(store.Prefetch(view).ok());
  const v1::TableStats s1 = StatsOf(store, 1);
  EXPECT_EQ(s1.disk_reads() - s0.disk_reads() + (s1.ram_hits() - s0.ram_hits()), 50u);
  EXPECT_GT(s1.disk_reads(), s0.disk_reads());
  // Other keys churn through RAM: the prefetched rows stay.
  ASSERT_TRUE(Push(store, 1, Keys(1000, 500), 4, 1).ok());
  PullOf(store, 1, next);
  const v1::TableStats s2 = StatsOf(store, 1);
  EXPECT_EQ(s2.ram_hits() - s1.ram_hits(), 50u);
  EXPECT_EQ(s2.disk_reads(), s1.disk_reads());
  // Pulled: unpinned, they go like the others.
  ASSERT_TRUE(Push(store, 1, Keys(2000, 500), 4, 2).ok());
  PullOf(store, 1, next);
  EXPECT_GT(StatsOf(store, 1).disk_reads(), s2.disk_reads());
}

TEST(TableStoreTierTest, APrefetchPinEndsAfterItsTimeBound) {
  TempDir dir;
  TableStore store(WithTier(dir.path()));
  ASSERT_TRUE(store.CreateTable(Sparse(1, 4, 100, true)).ok());
  const absl::Time t0 = absl::Now();
  store.Tick(t0);
  ASSERT_TRUE(Push(store, 1, Keys(0, 1000), 4, 0).ok());
  const std::vector<uint64_t> next = Keys(0, 50);
  TableStore::BlockView view;
  const KeyBlock block = Block(1, next);
  ASSERT_TRUE(store.Resolve(kJob, block, false, &view).ok());
  ASSERT_TRUE(store.Prefetch(view, absl::Seconds(2)).ok());
  // Never pulled: once the bound has passed, other keys push the rows out again.
  store.Tick(t0 + absl::Seconds(5));
  ASSERT_TRUE(Push(store, 1, Keys(1000, 500), 4, 1).ok());
  const v1::TableStats s0 = StatsOf(store, 1);
  PullOf(store, 1, next);
  EXPECT_GT(StatsOf(store, 1).disk_reads(), s0.disk_reads());
}

// A prefetch of a table's every key (a buggy or hostile client) pins half the RAM cap at most,
// keeps RAM rows near the cap, and says what it skipped; the table goes on serving.
TEST(TableStoreTierTest, APrefetchPinsHalfTheCapAtMostAndCountsWhatItSkipped) {
  TempDir dir;
  TableStore store(WithTier(dir.path()));
  ASSERT_TRUE(store.CreateTable(Sparse(1, 4, 100, true)).ok());
  ASSERT_TRUE(Push(store, 1, Keys(0, 1000), 4, 0).ok());
  const std::vector<uint64_t> all = Keys(0, 1000);
  TableStore::BlockView view;
  const KeyBlock block = Block(1, all);
  ASSERT_TRUE(store.Resolve(kJob, block, false, &view).ok());
  ASSERT_TRUE(store.Prefetch(view, absl::Hours(1)).ok());
  const v1::TableStats s = StatsOf(store, 1);
  EXPECT_LE(s.prefetch_pinned(), 50u);
  EXPECT_GT(s.prefetch_pinned(), 0u);
  EXPECT_GE(s.prefetch_skipped(), 1000u - 50u);
  EXPECT_LE(s.rows(), 100u + 2 * 64u);  // a batch of keys (TableStore::kBatchKeys) over at most
  // Again (the same keys, pinned or not): still within the bound.
  ASSERT_TRUE(store.Prefetch(view, absl::Hours(1)).ok());
  EXPECT_LE(StatsOf(store, 1).prefetch_pinned(), 50u);
  EXPECT_LE(StatsOf(store, 1).rows(), 100u + 2 * 64u);
  // Other keys still get room, and every row is kept.
  ASSERT_TRUE(Push(store, 1, Keys(1000, 300), 4, 1).ok());
  EXPECT_LE(StatsOf(store, 1).rows(), 100u + 2 * 64u);
  EXPECT_EQ(RowsOf(store, 1).size(), 1300u);
}

TEST(TableStoreTierTest, APinEndsWithItsRowAndExpiredPinsArePruned) {
  TempDir dir;
  TableStore store(WithTier(dir.path()));
  TableSpec spec = Sparse(1, 4, 100, true);
  spec.mutable_eviction()->set_ttl_seconds(5);
  ASSERT_TRUE(store.CreateTable(spec).ok());
  ASSERT_TRUE(store.CreateTable(Sparse(2, 4, 100, true)).ok());
  const absl::Time t0 = absl::Now();
  store.Tick(t0);
  ASSERT_TRUE(Push(store, 1, Keys(0, 40), 4, 0).ok());
  ASSERT_TRUE(Push(store, 2, Keys(0, 40), 4, 0).ok());  // under the cap: no eviction meets pins
  for (uint32_t id : {1u, 2u}) {
    TableStore::BlockView view;
    const KeyBlock block = Block(id, Keys(0, 40));
    ASSERT_TRUE(store.Resolve(kJob, block, false, &view).ok());
    ASSERT_TRUE(store.Prefetch(view, id == 1 ? absl::Hours(1) : absl::Seconds(2)).ok());
    EXPECT_EQ(StatsOf(store, id).prefetch_pinned(), 40u);
  }
  // Table 1's rows expire by the TTL in RAM (their pins with them); table 2's pins time out.
  store.Tick(t0 + absl::Seconds(10));
  EXPECT_EQ(StatsOf(store, 1).rows(), 0u);
  EXPECT_EQ(StatsOf(store, 1).prefetch_pinned(), 0u);
  EXPECT_EQ(StatsOf(store, 2).rows(), 40u);
  EXPECT_EQ(StatsOf(store, 2).prefetch_pinned(), 0u);
  // Which leaves the whole bound to later prefetches.
  TableStore::BlockView view;
  const KeyBlock block = Block(2, Keys(0, 50));  // 40 rows (a prefetch creates none)
  ASSERT_TRUE(store.Resolve(kJob, block, false, &view).ok());
  ASSERT_TRUE(store.Prefetch(view, absl::Hours(1)).ok());
  EXPECT_EQ(StatsOf(store, 2).prefetch_pinned(), 40u);
  EXPECT_EQ(StatsOf(store, 2).prefetch_skipped(), 0u);
}

TEST(TableStoreTierTest, LoadingASlotDropsItsPins) {
  TempDir dir;
  TableStore store(WithTier(dir.path()));
  ASSERT_TRUE(store.CreateTable(Sparse(1, 4, 100, true)).ok());
  ASSERT_TRUE(Push(store, 1, Keys(0, 40), 4, 0).ok());
  TableStore::BlockView view;
  const KeyBlock block = Block(1, Keys(0, 40));
  ASSERT_TRUE(store.Resolve(kJob, block, false, &view).ok());
  ASSERT_TRUE(store.Prefetch(view, absl::Hours(1)).ok());
  ASSERT_EQ(StatsOf(store, 1).prefetch_pinned(), 40u);
  // A restore of every slot with no rows (as a slot move's load): the rows and their pins go.
  ASSERT_TRUE(store.LoadSlots(kJob, std::vector<bool>(kNumSlots, true), {}).ok());
  EXPECT_EQ(StatsOf(store, 1).rows(), 0u);
  EXPECT_EQ(StatsOf(store, 1).prefetch_pinned(), 0u);
}

// The TTL sweep on disk takes a slot's lock a chunk at a time: between chunks, a request of the
// very slot being swept is served (on this thread: were the lock held, it could not be), and
// the row counts stay exact.
TEST(TableStoreTierTest, TheSweepOnDiskLetsTheSlotsRequestsInBetweenChunks) {
  TempDir dir;
  TableStoreOptions options = WithTier(dir.path());
  options.disk_sweep_chunk = 1;
  // A key of each slot, outside the table's keys below.
  std::map<uint32_t, uint64_t> key_of_slot;
  for (uint64_t k = 1'000'000; key_of_slot.size() < kNumSlots; ++k)
    key_of_slot.emplace(SlotOf(1, k), k);
  TableStore* store_ptr = nullptr;
  int chunks = 0;
  bool pull_between = true;
  options.between_disk_sweep_chunks = [&](uint32_t slot) {
    ++chunks;
    if (pull_between && chunks % 50 == 1) PullOf(*store_ptr, 1, {key_of_slot.at(slot)});
  };
  TableStore store(options);
  store_ptr = &store;
  TableSpec spec = Sparse(1, 1, 10, true, v1::OptimizerSpec::SGD);
  spec.mutable_eviction()->set_ttl_seconds(5);
  ASSERT_TRUE(store.CreateTable(spec).ok());
  const absl::Time t0 = absl::Now();
  store.Tick(t0);
  const uint64_t n = 4000;
  ASSERT_TRUE(Push(store, 1, Keys(0, n), 1, 0).ok());
  ASSERT_EQ(StatsOf(store, 1).disk_rows(), n - 10);
  store.Tick(t0 + absl::Seconds(10));
  EXPECT_GT(chunks, 1000);  // about one per row on disk, less the slots' last ones
  // The rows pulled between chunks are new (fresh) ones: every old row is gone, and the counts
  // of both tiers match what they hold.
  const v1::TableStats s = StatsOf(store, 1);
  const std::map<uint64_t, RowCopy> rows = RowsOf(store, 1);
  EXPECT_EQ(rows.size(), s.rows() + s.disk_rows());
  for (const auto& [key, row] : rows) EXPECT_GE(key, 1'000'000u);
  pull_between = false;
  store.Tick(t0 + absl::Seconds(20));  // the fresh rows expire too: nothing is left anywhere
  EXPECT_EQ(StatsOf(store, 1).disk_rows(), 0u);
  EXPECT_EQ(StatsOf(store, 1).rows(), 0u);
  EXPECT_TRUE(RowsOf(store, 1).empty());
}

TEST(TableStoreTierTest, CheckpointAndRestoreCoverBothTiersAndTheRestoreKeepsTheCap) {
  TempDir dir;
  TableStore store(WithTier(dir.path() + "/a"));
  ASSERT_TRUE(store.CreateTable(Sparse(1, 4, 50, true)).ok());
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(Push(store, 1, Keys(0, 1000), 4, round).ok());
  }
  ASSERT_EQ(StatsOf(store, 1).disk_rows(), 950u);
  const auto before = RowsOf(store, 1);
  const JobSnapshot snap = store.Snapshot(kJob);
  ASSERT_TRUE(snap.status.ok()) << snap.status;
  EXPECT_EQ(snap.num_rows, 1000u);
  // Through the checkpoint files, as a server writes and reads them.
  v1::CheckpointShardMeta meta;
  meta.set_checkpoint_id(1);
  const std::string path = dir.path() + "/ckpt/shard-0";
  auto written = WriteCheckpoint(snap, path, meta);
  ASSERT_TRUE(written.ok()) << written.status();
  v1::CheckpointShard shard;
  shard.set_path(path);
  shard.set_slots(EncodeSlotBitmap(snap.slots));

  TableStore restored(WithTier(dir.path() + "/b"));
  ASSERT_TRUE(restored.CreateTable(Sparse(1, 4, 50, true)).ok());
  ASSERT_TRUE(Push(restored, 1, Keys(5000, 200), 4, 9).ok());  // replaced by the restore
  auto rows =
      ReadCheckpointSlots({shard}, std::vector<bool>(kNumSlots, true), restored.JobTables(kJob));
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_TRUE(restored.LoadSlots(kJob, std::vector<bool>(kNumSlots, true), rows->rows).ok());
  const v1::TableStats stats = StatsOf(restored, 1);
  EXPECT_LE(stats.rows(), 50u);
  EXPECT_EQ(stats.rows() + stats.disk_rows(), 1000u);
  EXPECT_EQ(RowsOf(restored, 1), before);
  // And it trains on as the original does.
  ASSERT_TRUE(Push(store, 1, Keys(0, 1000), 4, 3).ok());
  ASSERT_TRUE(Push(restored, 1, Keys(0, 1000), 4, 3).ok());
  EXPECT_EQ(RowsOf(restored, 1), RowsOf(store, 1));
}

// Eviction and write-back run under the slot's lock: concurrent pushes of overlapping keys
// lose no update (each push counts once in the row's update count) and no row is held twice.
TEST(TableStoreTierTest, ConcurrentPushesAndPullsLoseNoRowAndNoUpdate) {
  TempDir dir;
  TableStore store(WithTier(dir.path()));
  ASSERT_TRUE(store.CreateTable(Sparse(1, 2, 64, true, v1::OptimizerSpec::SGD)).ok());
  constexpr int kThreads = 4;
  constexpr int kRounds = 40;
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(w);
      for (int r = 0; r < kRounds; ++r) {
        // Every thread pushes keys 0..299 once per round, in its own order and batches.
        std::vector<uint64_t> keys = Keys(0, 300);
        std::shuffle(keys.begin(), keys.end(), rng);
        for (size_t at = 0; at < keys.size(); at += 100) {
          std::vector<uint64_t> part(keys.begin() + at, keys.begin() + at + 100);
          EXPECT_TRUE(Push(store, 1, part, 2, r).ok());
          std::vector<float> out;
          EXPECT_TRUE(PullInto(store, 1, part, &out).ok());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto rows = RowsOf(store, 1);
  ASSERT_EQ(rows.size(), 300u);
  for (const auto& [key, row] : rows) {
    EXPECT_EQ(row.updates, kThreads * kRounds) << "key " << key;
  }
}

// The TTL sweeps (RAM and disk) run while threads push and pull through a small cap: no row is
// held twice, and the counts of rows in RAM and on disk stay those of the rows there. (TSan.)
TEST(TableStoreTierTest, TheTtlSweepOnDiskRacesPushesAndPullsSafely) {
  TempDir dir;
  TableStore store(WithTier(dir.path()));
  TableSpec spec = Sparse(1, 2, 64, true, v1::OptimizerSpec::SGD);
  spec.mutable_eviction()->set_ttl_seconds(2);
  ASSERT_TRUE(store.CreateTable(spec).ok());
  const absl::Time t0 = absl::Now();
  std::atomic<bool> done{false};
  std::atomic<int> seconds{0};
  std::thread ticker([&] {
    while (!done.load()) {
      store.Tick(t0 + absl::Seconds(seconds.fetch_add(1) + 1));
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (int w = 0; w < 3; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(w);
      for (int r = 0; r < 20; ++r) {
        std::vector<uint64_t> keys = Keys(0, 300);
        std::shuffle(keys.begin(), keys.end(), rng);
        for (size_t at = 0; at < keys.size(); at += 100) {
          std::vector<uint64_t> part(keys.begin() + at, keys.begin() + at + 100);
          EXPECT_TRUE(Push(store, 1, part, 2, r).ok());
          std::vector<float> out;
          EXPECT_TRUE(PullInto(store, 1, part, &out).ok());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  done.store(true);
  ticker.join();
  const v1::TableStats stats = StatsOf(store, 1);
  EXPECT_EQ(RowsOf(store, 1).size(), stats.rows() + stats.disk_rows());  // none held twice
  store.Tick(t0 + absl::Seconds(seconds.load() + 10));  // every row expires, on disk too
  EXPECT_EQ(StatsOf(store, 1).rows(), 0u);
  EXPECT_EQ(StatsOf(store, 1).disk_rows(), 0u);
  EXPECT_TRUE(RowsOf(store, 1).empty());
}

// A write-back that fails for a full disk: the request is RESOURCE_EXHAUSTED naming the table
// and the directory, the rows in RAM stay readable, and other tables serve on.
// Fills a table with a RAM cap of 100 rows (rows of 64 floats and Adam state, about 800 bytes)
// until a push fails; the other, untiered table must serve on. Returns the push's status and
// sets *next to the first key never pushed.
absl::Status FillUntilRefused(TableStore& store, uint64_t* next) {
  absl::Status s;
  *next = 0;
  for (int i = 0; i < 400 && s.ok(); ++i) {
    s = Push(store, 1, Keys(*next, 100), 64, i);
    *next += 100;
  }
  return s;
}

// After FillUntilRefused (`pushed` keys 0.. got through, and part of the refused push's 100:
// its slots are applied one by one, up to the one that found no room): no row is lost in
// either tier (a row read back may be counted in both until its disk copy goes); of
// the last push's keys [first, first + 100), each in RAM is readable and stays as read, and one
// on disk reads or is RESOURCE_EXHAUSTED (reading it back needs room for the row it pushes out;
// a compaction may free some meanwhile); and the other table serves.
void ExpectNoRowLostAndTheOtherTableServing(TableStore& store, uint64_t pushed, uint64_t first) {
  const auto all_rows = [&] { return StatsOf(store, 1).rows() + StatsOf(store, 1).disk_rows(); };
  EXPECT_GE(all_rows(), pushed);
  EXPECT_LE(all_rows(), pushed + 200);
  uint64_t read = 0;
  for (uint64_t key = first; key < first + 100; ++key) {
    const uint64_t hits_before = StatsOf(store, 1).ram_hits();
    std::vector<float> out;
    const absl::Status pulled = PullInto(store, 1, {key}, &out);
    const bool in_ram = StatsOf(store, 1).ram_hits() > hits_before;
    if (in_ram) ASSERT_TRUE(pulled.ok()) << "key " << key << " in RAM: " << pulled;
    if (!pulled.ok()) {
      ASSERT_EQ(pulled.code(), absl::StatusCode::kResourceExhausted) << pulled;
      continue;
    }
    ++read;
    ASSERT_EQ(out.size(), 64u);
    std::vector<float> again;
    ASSERT_TRUE(PullInto(store, 1, {key}, &again).ok()) << "key " << key;  // now in RAM
    EXPECT_EQ(again, out) << "key " << key;
  }
  EXPECT_GT(read, 0u);
  EXPECT_GE(all_rows(), pushed);
  EXPECT_TRUE(Push(store, 2, Keys(0, 1000), 4, 0).ok());
  EXPECT_EQ(PullOf(store, 2, Keys(0, 1000)).size(), 4000u);
}

// A real filesystem that fills: the reserve (DiskTier::Options::min_free_bytes) refuses the
// write back before RocksDB meets the full disk (a RocksDB that does stops writing, and
// Debian's build may abort on an assertion), so the refusal names the reserve.
TEST(TableStoreTierTest, AFullDiskFailsTheRequestAndKeepsTheRowsInRam) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  TempDir dir;
  const std::string mnt = dir.path() + "/small";
  fs::create_directories(mnt);
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=32m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs at " << mnt;
  }
  struct Unmount {
    std::string at;
    ~Unmount() { umount2(at.c_str(), MNT_DETACH); }
  } unmount{mnt};
  {
    TableStoreOptions options;
    options.tier.dir = mnt + "/tier";
    options.tier.write_buffer_bytes = 256 << 10;
    options.tier.block_cache_bytes = 1 << 20;
    // 24 of 32 MiB kept free: room for RocksDB to flush and compact up to 8 MiB of rows.
    options.tier.min_free_bytes = 24 << 20;
    TableStore store(options);
    ASSERT_TRUE(store.CreateTable(Sparse(1, 64, 100, true)).ok());
    ASSERT_TRUE(store.CreateTable(Sparse(2, 4, 0, false)).ok());
    uint64_t next = 0;
    const absl::Status s = FillUntilRefused(store, &next);
    ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_NE(s.message().find("table 1 ('emb1')"), std::string::npos) << s;
    EXPECT_NE(s.message().find(options.tier.dir), std::string::npos) << s;
    EXPECT_NE(s.message().find("reserve of 24 MiB"), std::string::npos) << s;
    ASSERT_GE(next, 200u);
    ExpectNoRowLostAndTheOtherTableServing(store, next - 100, next - 200);
  }
}

// The reserve on any filesystem (no root needed): a reserve larger than any disk refuses the
// first write back, and nothing of the request changed RAM.
TEST(TableStoreTierTest, AWriteBackUnderTheReserveIsRefusedAndChangesNothing) {
  TempDir dir;
  TableStoreOptions options;
  options.tier.dir = dir.path() + "/tier";
  options.tier.min_free_bytes = uint64_t{1} << 62;
  TableStore store(options);
  ASSERT_TRUE(store.CreateTable(Sparse(1, 64, 100, true)).ok());
  ASSERT_TRUE(store.CreateTable(Sparse(2, 4, 0, false)).ok());
  ASSERT_TRUE(Push(store, 1, Keys(0, 100), 64, 0).ok());  // fills RAM: no write back yet
  const std::vector<float> before = PullOf(store, 1, Keys(0, 100));
  const absl::Status s = Push(store, 1, Keys(100, 10), 64, 1);
  ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("under the reserve"), std::string::npos) << s;
  EXPECT_EQ(StatsOf(store, 1).rows(), 100u);
  EXPECT_EQ(PullOf(store, 1, Keys(0, 100)), before);
  ExpectNoRowLostAndTheOtherTableServing(store, 100, 0);
}

}  // namespace
}  // namespace ps::table_store_tier_test
