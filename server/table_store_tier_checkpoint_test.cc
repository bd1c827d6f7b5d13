// Checkpoints of tiered tables (TableSpec.tier): the snapshot copies the rows in RAM and takes a
// view of the disk tier (a RocksDB snapshot) under each slot's lock; the writer reads the rows
// on disk at that view. The files equal an untiered table's, the rows are those of the
// snapshot's moment whatever moves after it, the copy's RAM does not grow with the rows on
// disk, and the views are released once the write ends, fails or is abandoned.
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/shard_map.h"
#include "common/testing/key_blocks.h"
#include "common/testing/scratch_dir.h"
#include "gtest/gtest.h"
#include "server/checkpoint_io.h"
#include "server/checkpointer.h"
#include "server/internal/checkpoint_format.h"
#include "server/table_store.h"

namespace ps::table_store_tier_checkpoint_test {
namespace {

using testing::Block;
using v1::KeyBlock;
using v1::TableSpec;

constexpr char kJob[] = "job";
namespace fs = std::filesystem;

// A fresh directory under the test temp dir, removed with the object.
class TempDir : public testing::ScratchDir {
 public:
  TempDir() : ScratchDir("tier-ckpt-test") {}
};

// A sparse table of dim 4 with Adam (two floats of state per value); tiered with a RAM cap
// of `max_rows` where `disk`.
TableSpec Sparse(uint64_t max_rows, bool disk, uint32_t ttl_seconds = 0) {
  TableSpec spec;
  spec.set_table_id(1);
  spec.set_name("emb");
  spec.set_job_id(kJob);
  spec.set_kind(v1::SPARSE);
  spec.set_dim(4);
  spec.mutable_initializer()->set_kind(v1::InitializerSpec::UNIFORM);
  spec.mutable_initializer()->set_low(-1.0f);
  spec.mutable_initializer()->set_high(1.0f);
  spec.mutable_initializer()->set_seed(7);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  if (max_rows != 0) spec.mutable_eviction()->set_max_rows(max_rows);
  if (ttl_seconds != 0) spec.mutable_eviction()->set_ttl_seconds(ttl_seconds);
  if (disk) spec.mutable_tier()->set_disk(true);
  return spec;
}

TableStoreOptions WithTier(const std::string& dir) {
  TableStoreOptions o;
  o.tier.dir = dir + "/tier";
  o.tier.write_buffer_bytes = 1 << 20;
  o.tier.block_cache_bytes = 1 << 20;
  o.tier.min_free_bytes = 0;
  return o;
}

std::vector<uint64_t> Keys(uint64_t first, uint64_t n) {
  std::vector<uint64_t> keys(n);
  for (uint64_t i = 0; i < n; ++i) keys[i] = first + i;
  return keys;
}

absl::Status Push(TableStore& store, const std::vector<uint64_t>& keys, int salt) {
  std::vector<float> g(keys.size() * 4);
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = 0.01f * static_cast<float>((keys[i / 4] * 31 + i % 4 * 7 + salt) % 17) - 0.08f;
  }
  TableStore::BlockView view;
  const KeyBlock block = Block(1, keys, g);
  if (absl::Status s = store.Resolve(kJob, block, true, &view); !s.ok()) return s;
  return store.Apply(view);
}

absl::Status Pull(TableStore& store, const std::vector<uint64_t>& keys) {
  TableStore::BlockView view;
  const KeyBlock block = Block(1, keys);
  if (absl::Status s = store.Resolve(kJob, block, false, &view); !s.ok()) return s;
  std::string out;
  return store.Pull(view, &out);
}

// Every row of the table (both tiers), by key: update count, then the floats' bits.
using Rows = std::map<uint64_t, std::pair<int64_t, std::vector<uint32_t>>>;
Rows RowsOf(const TableStore& store) {
  Rows rows;
  store.ForEachRow(1, [&](uint64_t key, int64_t updates, absl::Span<const float> row) {
    std::vector<uint32_t> bits(row.size());
    std::memcpy(bits.data(), row.data(), row.size() * sizeof(float));
    EXPECT_TRUE(rows.emplace(key, std::make_pair(updates, bits)).second) << key << " twice";
  });
  return rows;
}
Rows RowsOf(const CheckpointRows& read) {
  Rows rows;
  for (const SlotRows& r : read.rows) {
    for (size_t i = 0; i < r.size(); ++i) {
      std::vector<uint32_t> bits(r.row_floats);
      std::memcpy(bits.data(), r.row(i), r.row_floats * sizeof(float));
      EXPECT_TRUE(rows.emplace(r.keys[i], std::make_pair(r.updates[i], bits)).second)
          << "key " << r.keys[i] << " is in the checkpoint twice";
    }
  }
  return rows;
}

v1::TableStats StatsOf(const TableStore& store) {
  auto stats = store.Stats(1);
  EXPECT_TRUE(stats.ok()) << stats.status();
  return stats.ok() ? *stats : v1::TableStats();
}

// Writes the snapshot as one shard at `path`; returns the shard as a restore names it.
v1::CheckpointShard Write(const JobSnapshot& snap, const std::string& path) {
  v1::CheckpointShardMeta meta;
  meta.set_checkpoint_id(1);
  auto written = WriteCheckpoint(snap, path, meta);
  EXPECT_TRUE(written.ok()) << written.status();
  v1::CheckpointShard shard;
  shard.set_path(path);
  shard.set_slots(EncodeSlotBitmap(snap.slots));
  return shard;
}

CheckpointRows Read(const v1::CheckpointShard& shard, const TableStore& target) {
  auto rows =
      ReadCheckpointSlots({shard}, std::vector<bool>(kNumSlots, true), target.JobTables(kJob));
  EXPECT_TRUE(rows.ok()) << rows.status();
  return rows.ok() ? std::move(*rows) : CheckpointRows();
}

// Every record of a checkpoint database but its meta (which names the table's spec), in order.
std::vector<std::pair<std::string, std::string>> Records(const std::string& path) {
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s = rocksdb::DB::OpenForReadOnly(rocksdb::Options(), path, &raw);
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::unique_ptr<rocksdb::DB> db(raw);
  std::vector<std::pair<std::string, std::string>> out;
  if (db == nullptr) return out;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (it->key().ToString() == MetaKey()) continue;
    out.emplace_back(it->key().ToString(), it->value().ToString());
  }
  return out;
}

TEST(TierCheckpointTest, ATieredTablesCheckpointIsBitIdenticalToAnUntieredOnes) {
  TempDir dir;
  TableStore plain({});
  TableStore tiered(WithTier(dir.path()));
  ASSERT_TRUE(plain.CreateTable(Sparse(0, false)).ok());
  ASSERT_TRUE(tiered.CreateTable(Sparse(50, true)).ok());
  for (int round = 0; round < 3; ++round) {
    // Overlapping key ranges: rows go to disk and come back between rounds.
    for (TableStore* store : {&plain, &tiered}) {
      ASSERT_TRUE(Push(*store, Keys(round * 100, 1000), round).ok());
    }
  }
  ASSERT_GT(StatsOf(tiered).disk_rows(), 1000u);
  ASSERT_GT(StatsOf(tiered).disk_reads(), 0u);
  const JobSnapshot plain_snap = plain.Snapshot(kJob);
  const JobSnapshot tiered_snap = tiered.Snapshot(kJob);
  EXPECT_TRUE(plain_snap.disk.empty());
  EXPECT_FALSE(tiered_snap.disk.empty());
  EXPECT_EQ(tiered_snap.num_rows, plain_snap.num_rows);
  EXPECT_EQ(tiered_snap.bytes, plain_snap.bytes);
  const v1::CheckpointShard a = Write(plain_snap, dir.path() + "/plain/shard-0");
  const v1::CheckpointShard b = Write(tiered_snap, dir.path() + "/tiered/shard-0");
  // Every row record and slot record (CRC-32C over the slot's rows) alike.
  const auto records = Records(a.path());
  EXPECT_EQ(records.size(), 1200u + kNumSlots);
  EXPECT_TRUE(records == Records(b.path()));
  EXPECT_EQ(ReadCheckpointMeta(b.path())->rows(), 1200u);
  EXPECT_EQ(ReadCheckpointMeta(b.path())->bytes(), ReadCheckpointMeta(a.path())->bytes());
  // And it restores into a tiered table as the untiered one's rows.
  TableStore restored(WithTier(dir.path() + "/r"));
  ASSERT_TRUE(restored.CreateTable(Sparse(50, true)).ok());
  ASSERT_TRUE(restored.LoadSlots(kJob, tiered_snap.slots, Read(b, restored).rows).ok());
  EXPECT_EQ(RowsOf(restored), RowsOf(plain));
}

// Between the snapshot and the write: pushes of the same keys and of new ones (evictions,
// write-backs, read-backs), pulls, and a TTL sweep that expires every row in both tiers. The
// checkpoint holds the rows of the snapshot's moment, each once.
TEST(TierCheckpointTest, TheCheckpointHoldsTheSnapshotsRowsWhateverMovesBeforeTheWrite) {
  TempDir dir;
  TableStore store(WithTier(dir.path()));
  ASSERT_TRUE(store.CreateTable(Sparse(50, true, /*ttl_seconds=*/100)).ok());
  const absl::Time t0 = absl::Now();
  store.Tick(t0);
  ASSERT_TRUE(Push(store, Keys(0, 1000), 0).ok());
  ASSERT_TRUE(Push(store, Keys(500, 1000), 1).ok());
  const Rows before = RowsOf(store);
  ASSERT_EQ(before.size(), 1500u);
  const JobSnapshot snap = store.Snapshot(kJob);
  const v1::TableStats at_snapshot = StatsOf(store);

  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(Push(store, Keys(round * 300, 900), 10 + round).ok());
    ASSERT_TRUE(Push(store, Keys(5000 + round * 1000, 1000), 20 + round).ok());
    ASSERT_TRUE(Pull(store, Keys(0, 200)).ok());
  }
  const v1::TableStats moved = StatsOf(store);
  EXPECT_GT(moved.written_back(), at_snapshot.written_back());
  EXPECT_GT(moved.disk_reads(), at_snapshot.disk_reads());
  store.Tick(t0 + absl::Seconds(1000));  // every row expires: the sweeps delete them
  store.Tick(t0 + absl::Seconds(1001));
  EXPECT_EQ(StatsOf(store).rows(), 0u);
  EXPECT_EQ(StatsOf(store).disk_rows(), 0u);

  const v1::CheckpointShard shard = Write(snap, dir.path() + "/ckpt/shard-0");
  EXPECT_EQ(ReadCheckpointMeta(shard.path())->rows(), 1500u);
  TableStore restored(WithTier(dir.path() + "/r"));
  ASSERT_TRUE(restored.CreateTable(Sparse(50, true)).ok());
  const CheckpointRows read = Read(shard, restored);
  EXPECT_EQ(RowsOf(read), before);
  ASSERT_TRUE(restored.LoadSlots(kJob, snap.slots, read.rows).ok());
  EXPECT_EQ(RowsOf(restored), before);
}

// The snapshot holds the rows in RAM (at most the cap) and a list of slots with rows on disk:
// ten times more rows on disk, the same RAM. (SnapshotSlots, a replica's copy, copies them.)
TEST(TierCheckpointTest, TheSnapshotsRamDoesNotGrowWithTheRowsOnDisk) {
  TempDir dir;
  TableStore store(WithTier(dir.path()));
  ASSERT_TRUE(store.CreateTable(Sparse(50, true)).ok());
  const uint64_t row_bytes = 8 + 8 + 12 * sizeof(float);  // key, update count, 4 x (1 + 2)
  ASSERT_TRUE(Push(store, Keys(0, 1000), 0).ok());
  const JobSnapshot small = store.Snapshot(kJob);
  ASSERT_TRUE(Push(store, Keys(1000, 9000), 0).ok());
  const JobSnapshot large = store.Snapshot(kJob);
  ASSERT_EQ(StatsOf(store).disk_rows(), 9950u);
  EXPECT_EQ(large.num_rows, 10000u);
  EXPECT_EQ(large.bytes, 10000u * 12 * sizeof(float));
  uint64_t listed = 0;
  for (const DiskSlotRows& d : large.disk) listed += d.rows;
  EXPECT_EQ(listed, 9950u);
  EXPECT_LE(small.RamBytes(), 50 * row_bytes);
  EXPECT_LE(large.RamBytes(), 50 * row_bytes);
  EXPECT_EQ(large.RamBytes(), small.RamBytes());
  const JobSnapshot copy = store.SnapshotSlots(kJob, std::vector<bool>(kNumSlots, true));
  EXPECT_TRUE(copy.disk.empty());
  EXPECT_EQ(copy.RamBytes(), 10000 * row_bytes);
}

// The views of the tier a snapshot holds (RocksDB snapshots) go with it: after a write, a
// failed write, a write abandoned at shutdown; the Checkpointer releases them before it says
// the write is done.
TEST(TierCheckpointTest, TheTiersViewsAreReleasedWhenTheWriteEndsFailsOrIsAbandoned) {
  TempDir dir;
  TableStore store(WithTier(dir.path()));
  ASSERT_TRUE(store.CreateTable(Sparse(50, true)).ok());
  ASSERT_TRUE(Push(store, Keys(0, 1000), 0).ok());
  EXPECT_EQ(store.TierSnapshots(), 0u);
  {
    const JobSnapshot snap = store.Snapshot(kJob);
    EXPECT_EQ(store.TierSnapshots(), 1u);  // one view: nothing was written between the slots
    // A path under a regular file: the write fails, and leaves nothing.
    std::ofstream(dir.path() + "/file") << "x";
    auto failed = WriteCheckpoint(snap, dir.path() + "/file/shard-0", {});
    EXPECT_FALSE(failed.ok());
  }
  EXPECT_EQ(store.TierSnapshots(), 0u);

  const std::string root = dir.path() + "/ckpts";
  fs::create_directories(root);
  CheckpointerOptions options;
  options.roots = *CheckpointRoots::Create({root});
  v1::CheckpointRequest req;
  req.set_job_id(kJob);
  req.set_shard_epoch(store.ShardEpoch(kJob));
  {
    Checkpointer checkpointer(&store, options);
    req.set_checkpoint_id(1);
    req.set_path(root + "/1/shard-0");
    ASSERT_TRUE(checkpointer.Begin(req).ok());
    auto done = checkpointer.Await(kJob, 1, absl::InfiniteFuture());
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(done->rows(), 1000u);
    EXPECT_EQ(store.TierSnapshots(), 0u);

    std::ofstream(root + "/2") << "a file where the shard's directory goes";
    req.set_checkpoint_id(2);
    req.set_path(root + "/2/shard-0");
    ASSERT_TRUE(checkpointer.Begin(req).ok());
    EXPECT_FALSE(checkpointer.Await(kJob, 2, absl::InfiniteFuture()).ok());
    EXPECT_EQ(store.TierSnapshots(), 0u);
  }
  options.write_delay = absl::Hours(1);  // held queued until the shutdown abandons it
  Checkpointer checkpointer(&store, options);
  req.set_checkpoint_id(3);
  req.set_path(root + "/3/shard-0");
  ASSERT_TRUE(checkpointer.Begin(req).ok());
  EXPECT_EQ(store.TierSnapshots(), 1u);
  checkpointer.Shutdown();
  EXPECT_EQ(store.TierSnapshots(), 0u);
  EXPECT_FALSE(fs::exists(root + "/3"));
}

// The real reader, failing after `rows` rows (a disk that stops answering mid-write).
class FailingReader : public DiskRowReader {
 public:
  FailingReader(std::shared_ptr<const DiskRowReader> real, int rows)
      : real_(std::move(real)), left_(rows) {}
  absl::Status Read(const DiskSlotRows& part, RowFn fn) const override {
    return real_->Read(part, [&](uint64_t key, int64_t updates, const float* row) {
      if (left_-- <= 0) return absl::UnavailableError("the disk tier stopped answering");
      return fn(key, updates, row);
    });
  }

 private:
  const std::shared_ptr<const DiskRowReader> real_;
  mutable int left_;
};

// A read of rows on disk that fails while the checkpoint is written fails the write with its
// error, and nothing is left at the path.
TEST(TierCheckpointTest, AReadOfRowsOnDiskThatFailsFailsTheWriteAndLeavesNothing) {
  TempDir dir;
  TableStore store(WithTier(dir.path()));
  ASSERT_TRUE(store.CreateTable(Sparse(50, true)).ok());
  ASSERT_TRUE(Push(store, Keys(0, 1000), 0).ok());
  JobSnapshot snap = store.Snapshot(kJob);
  snap.disk_reader = std::make_shared<FailingReader>(snap.disk_reader, 500);
  const std::string path = dir.path() + "/ckpt/shard-0";
  auto written = WriteCheckpoint(snap, path, {});
  ASSERT_EQ(written.status().code(), absl::StatusCode::kUnavailable) << written.status();
  EXPECT_NE(written.status().message().find("stopped answering"), std::string::npos);
  EXPECT_FALSE(fs::exists(path));
  snap = JobSnapshot();  // the views go with the reader
  EXPECT_EQ(store.TierSnapshots(), 0u);
}

// Threads push the table's keys (no new ones) through a small cap while checkpoints are taken:
// every checkpoint holds each key exactly once, whatever was evicted or read back as its
// slots were copied. (TSan.)
TEST(TierCheckpointTest, CheckpointsTakenDuringEvictionsHoldEveryRowOnce) {
  TempDir dir;
  TableStore store(WithTier(dir.path()));
  ASSERT_TRUE(store.CreateTable(Sparse(64, true)).ok());
  constexpr uint64_t kRows = 600;
  ASSERT_TRUE(Push(store, Keys(0, kRows), 0).ok());
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(w);
      for (int r = 0; r < 200 && !done.load(); ++r) {
        std::vector<uint64_t> keys = Keys(0, kRows);
        std::shuffle(keys.begin(), keys.end(), rng);
        keys.resize(100);
        EXPECT_TRUE(Push(store, keys, r).ok());
      }
    });
  }
  for (int i = 0; i < 6; ++i) {
    const JobSnapshot snap = store.Snapshot(kJob);
    const v1::CheckpointShard shard = Write(snap, absl::StrCat(dir.path(), "/ckpt-", i));
    TableStore target(WithTier(absl::StrCat(dir.path(), "/t-", i)));
    ASSERT_TRUE(target.CreateTable(Sparse(64, true)).ok());
    const Rows rows = RowsOf(Read(shard, target));
    EXPECT_EQ(rows.size(), kRows) << "checkpoint " << i;
  }
  done.store(true);
  for (auto& t : threads) t.join();
  EXPECT_EQ(store.TierSnapshots(), 0u);
}

}  // namespace
}  // namespace ps::table_store_tier_checkpoint_test
