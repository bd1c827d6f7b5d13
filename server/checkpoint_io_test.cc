// Checkpoint shards: TableStore::Snapshot -> WriteCheckpoint -> ReadCheckpointSlots ->
// TableStore::LoadSlots, bit for bit, and every way a damaged checkpoint is detected.
#include "server/checkpoint_io.h"

#include <rocksdb/db.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/shard_map.h"
#include "common/testing/key_blocks.h"
#include "gtest/gtest.h"
#include "server/table_store.h"

namespace ps::checkpoint_io_test {
namespace {

namespace fs = std::filesystem;
using testing::Block;
using v1::TableSpec;

constexpr char kJob[] = "job";
constexpr uint32_t kDense = 1;   // adam, dim 8, 300 rows
constexpr uint32_t kSparse = 2;  // adagrad, dim 4

TableSpec Spec(uint32_t id, const std::string& name, v1::TableKind kind,
               v1::OptimizerSpec::Kind optimizer, uint32_t dim, const std::string& job = kJob) {
  TableSpec spec;
  spec.set_table_id(id);
  spec.set_name(name);
  spec.set_job_id(job);
  spec.set_kind(kind);
  spec.set_dim(dim);
  if (kind == v1::DENSE) spec.set_num_rows(300);
  spec.mutable_initializer()->set_kind(v1::InitializerSpec::UNIFORM);
  spec.mutable_initializer()->set_low(-1.0f);
  spec.mutable_initializer()->set_high(1.0f);
  spec.mutable_initializer()->set_seed(id);
  spec.mutable_optimizer()->set_kind(optimizer);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  return spec;
}

std::vector<TableSpec> Specs(uint32_t dense_id = kDense, uint32_t sparse_id = kSparse,
                             const std::string& job = kJob) {
  return {Spec(dense_id, "dense", v1::DENSE, v1::OptimizerSpec::ADAM, 8, job),
          Spec(sparse_id, "sparse", v1::SPARSE, v1::OptimizerSpec::ADAGRAD, 4, job)};
}

std::unique_ptr<TableStore> NewStore(const std::vector<TableSpec>& specs,
                                     std::vector<bool> owned = {}) {
  TableStoreOptions options;
  options.owned_slots = std::move(owned);
  auto store = std::make_unique<TableStore>(options);
  for (const TableSpec& spec : specs) EXPECT_TRUE(store->CreateTable(spec).ok());
  return store;
}

// Pushes `rounds` rounds of gradients to the keys this store owns (every key gets its own
// number of updates, so update counts differ), creating sparse rows.
void Train(TableStore& store, const std::vector<TableSpec>& specs, int rounds) {
  for (int round = 0; round < rounds; ++round) {
    for (const TableSpec& spec : specs) {
      std::vector<uint64_t> keys;
      const uint64_t n = spec.kind() == v1::DENSE ? spec.num_rows() : 500;
      for (uint64_t k = 0; k < n; ++k) {
        const uint64_t key = spec.kind() == v1::DENSE ? k : k * 7919 + 3;
        if (k % (round + 1) != 0) continue;
        TableStore::BlockView probe;
        if (!store.Resolve(kJob, Block(spec.table_id(), {key}), false, &probe).ok()) continue;
        keys.push_back(key);
      }
      std::vector<float> grads(keys.size() * spec.dim());
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.01f * ((i * 31 + round) % 17) - 0.08f;
      const v1::KeyBlock block = Block(spec.table_id(), keys, grads);
      TableStore::BlockView view;
      ASSERT_TRUE(store.Resolve(spec.job_id(), block, true, &view).ok());
      ASSERT_TRUE(store.Apply(view).ok());
    }
  }
}

// A row's raw contents: update count and every float's bytes.
using RawRows = std::map<uint64_t, std::pair<int64_t, std::string>>;

RawRows Raw(const TableStore& store, uint32_t table_id) {
  RawRows rows;
  store.ForEachRow(table_id, [&](uint64_t key, int64_t updates, absl::Span<const float> row) {
    rows[key] = {updates, std::string(reinterpret_cast<const char*>(row.data()),
                                      row.size() * sizeof(float))};
  });
  return rows;
}

std::vector<bool> AllSlots() { return std::vector<bool>(kNumSlots, true); }
std::vector<bool> ParitySlots(int parity) {
  std::vector<bool> slots(kNumSlots);
  for (uint32_t s = 0; s < kNumSlots; ++s) slots[s] = static_cast<int>(s % 2) == parity;
  return slots;
}

class CheckpointIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            absl::StrCat("checkpoint_io_test_", getpid(), "_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Writes `store`'s job as one shard at root/<name>; returns the shard as a restore names it.
  v1::CheckpointShard Write(const TableStore& store, const std::string& name,
                            const CheckpointWriteOptions& options = {}) {
    const JobSnapshot snapshot = store.Snapshot(kJob);
    v1::CheckpointShardMeta meta;
    meta.set_checkpoint_id(7);
    meta.set_clock(3);
    const std::string path = (root_ / name).string();
    auto stats = WriteCheckpoint(snapshot, path, meta, options);
    EXPECT_TRUE(stats.ok()) << stats.status();
    if (stats.ok()) {
      EXPECT_EQ(stats->rows, snapshot.num_rows);
      EXPECT_EQ(stats->bytes, snapshot.bytes);
      EXPECT_GT(stats->disk_bytes, stats->bytes);
    }
    v1::CheckpointShard shard;
    shard.set_path(path);
    shard.set_slots(EncodeSlotBitmap(snapshot.slots));
    return shard;
  }

  std::vector<fs::path> SstFiles(const v1::CheckpointShard& shard) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(shard.path())) {
      if (entry.path().extension() == ".sst") files.push_back(entry.path());
    }
    return files;
  }

  fs::path root_;
};

TEST_F(CheckpointIoTest, RestoreIntoAFreshStoreGivesBitIdenticalRows) {
  const std::vector<TableSpec> specs = Specs();
  auto source = NewStore(specs);
  Train(*source, specs, 3);
  const v1::CheckpointShard shard = Write(*source, "shard-0");

  auto read = ReadCheckpointSlots({shard}, AllSlots(), specs);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->num_rows, 300u + 500u);
  EXPECT_EQ(read->bytes, 300u * 8 * 3 * 4 + 500u * 4 * 2 * 4);  // adam: 3 floats, adagrad: 2
  // No table's rows take room for the other table's rows of the slot (the slot record counts
  // both): memory grows with what is read.
  for (const SlotRows& r : read->rows) {
    ASSERT_LE(r.data.capacity(), 2 * r.data.size()) << "slot " << r.slot << " table " << r.table_id;
  }
  auto target = NewStore(specs);
  ASSERT_TRUE(target->LoadSlots(kJob, AllSlots(), read->rows).ok());
  for (uint32_t table : {kDense, kSparse}) {
    SCOPED_TRACE(table);
    const RawRows want = Raw(*source, table);
    EXPECT_EQ(want.size(), table == kDense ? 300u : 500u);
    EXPECT_EQ(Raw(*target, table), want);
  }
  // The update counts moved too: at least one row was updated more than once.
  EXPECT_EQ(Raw(*target, kDense).at(0).first, 3);
  auto meta = ReadCheckpointMeta(shard.path());
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(meta->checkpoint_id(), 7u);
  EXPECT_EQ(meta->clock(), 3);
  EXPECT_EQ(meta->job_id(), kJob);
  EXPECT_EQ(meta->tables_size(), 2);
  EXPECT_EQ(meta->rows(), 800u);
}

// A table with a cap, a TTL and half-precision rows: the checkpoint holds the rows live when it
// is taken (none of those evicted or expired before), in float32, and restores bit-identically;
// restoring it into a table whose cap is smaller is refused and loads nothing.
TEST_F(CheckpointIoTest, ACappedHalfPrecisionTableRestoresItsLiveRows) {
  std::vector<TableSpec> specs = Specs();
  TableSpec& sparse = specs[1];
  sparse.set_storage(TableSpec::FP16);
  sparse.mutable_eviction()->set_max_rows(400);
  sparse.mutable_eviction()->set_ttl_seconds(30);
  auto source = NewStore(specs);
  const absl::Time t0 = absl::Now();
  source->Tick(t0);
  Train(*source, specs, 3);  // 500 sparse keys: past the cap
  const uint64_t live = source->NumRows(kSparse);
  EXPECT_LE(live, 400u + 2);
  EXPECT_GT(source->Stats(kSparse)->evicted(), 0u);
  const v1::CheckpointShard shard = Write(*source, "shard-0");
  auto read = ReadCheckpointSlots({shard}, AllSlots(), specs);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->num_rows, 300u + live);
  auto target = NewStore(specs);
  ASSERT_TRUE(target->LoadSlots(kJob, AllSlots(), read->rows).ok());
  EXPECT_EQ(Raw(*target, kSparse), Raw(*source, kSparse));
  EXPECT_EQ(Raw(*target, kDense), Raw(*source, kDense));
  // The restored rows count as used at the restore: they expire a TTL after it, not before.
  EXPECT_EQ(target->Tick(absl::Now() + absl::Seconds(20)), 0u);
  EXPECT_EQ(target->NumRows(kSparse), live);

  std::vector<TableSpec> smaller = specs;
  smaller[1].mutable_eviction()->set_max_rows(100);
  auto capped = NewStore(smaller);
  const absl::Status s = capped->LoadSlots(kJob, AllSlots(), read->rows);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("over the table's cap of 100"), std::string::npos) << s;
  EXPECT_EQ(capped->NumRows(kSparse), 0u);
  EXPECT_EQ(capped->NumRows(kDense), 300u);  // its own, untouched
}

TEST_F(CheckpointIoTest, ShardsOfSeveralServersRestoreTogether) {
  const std::vector<TableSpec> specs = Specs();
  auto even = NewStore(specs, ParitySlots(0));
  auto odd = NewStore(specs, ParitySlots(1));
  Train(*even, specs, 2);
  Train(*odd, specs, 2);
  const std::vector<v1::CheckpointShard> shards = {Write(*even, "s0"), Write(*odd, "s1")};
  auto read = ReadCheckpointSlots(shards, AllSlots(), specs);
  ASSERT_TRUE(read.ok()) << read.status();
  auto target = NewStore(specs);
  ASSERT_TRUE(target->LoadSlots(kJob, AllSlots(), read->rows).ok());
  for (uint32_t table : {kDense, kSparse}) {
    RawRows want = Raw(*even, table);
    want.merge(Raw(*odd, table));
    EXPECT_EQ(Raw(*target, table), want);
  }
}

TEST_F(CheckpointIoTest, OneSlotIsReadAlone) {
  const std::vector<TableSpec> specs = Specs();
  auto source = NewStore(specs);
  Train(*source, specs, 1);
  const v1::CheckpointShard shard = Write(*source, "shard-0");
  const uint32_t slot = SlotOf(kDense, 5);
  std::vector<bool> wanted(kNumSlots);
  wanted[slot] = true;
  auto read = ReadCheckpointSlots({shard}, wanted, specs);
  ASSERT_TRUE(read.ok()) << read.status();
  uint64_t in_slot = 0;
  for (uint32_t table : {kDense, kSparse}) {
    for (const auto& [key, row] : Raw(*source, table)) in_slot += SlotOf(table, key) == slot;
  }
  EXPECT_EQ(read->num_rows, in_slot);
  bool found = false;
  for (const SlotRows& r : read->rows) {
    EXPECT_EQ(r.slot, slot);
    for (size_t i = 0; i < r.size(); ++i) found = found || (r.table_id == kDense && r.keys[i] == 5);
  }
  EXPECT_TRUE(found);
}

TEST_F(CheckpointIoTest, TablesAreMatchedByNameAcrossTableIds) {
  const std::vector<TableSpec> specs = Specs();
  auto source = NewStore(specs);
  Train(*source, specs, 2);
  const v1::CheckpointShard shard = Write(*source, "shard-0");
  // Another job whose tables have other ids (and so other slots), in the opposite order.
  const std::vector<TableSpec> other = Specs(/*dense_id=*/12, /*sparse_id=*/11, "job2");
  auto read = ReadCheckpointSlots({shard}, AllSlots(), other);
  ASSERT_TRUE(read.ok()) << read.status();
  TableStoreOptions options;
  TableStore target(options);
  for (const TableSpec& spec : other) ASSERT_TRUE(target.CreateTable(spec).ok());
  ASSERT_TRUE(target.LoadSlots("job2", AllSlots(), read->rows).ok());
  EXPECT_EQ(Raw(target, 12), Raw(*source, kDense));
  EXPECT_EQ(Raw(target, 11), Raw(*source, kSparse));

  // Only the target's slots that are wanted are filled, wherever the rows were stored.
  auto half = ReadCheckpointSlots({shard}, ParitySlots(0), other);
  ASSERT_TRUE(half.ok()) << half.status();
  for (const SlotRows& r : half->rows) EXPECT_EQ(r.slot % 2, 0u);
  EXPECT_GT(half->num_rows, 0u);
  EXPECT_LT(half->num_rows, read->num_rows);
}

TEST_F(CheckpointIoTest, TableOfAnotherShapeIsRefusedByName) {
  const std::vector<TableSpec> specs = Specs();
  auto source = NewStore(specs);
  const v1::CheckpointShard shard = Write(*source, "shard-0");
  std::vector<TableSpec> other = specs;
  other[1].mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);  // 3 floats per value, not 2
  auto read = ReadCheckpointSlots({shard}, AllSlots(), other);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition) << read.status();
  EXPECT_NE(read.status().message().find("table 'sparse'"), std::string::npos) << read.status();
}

TEST_F(CheckpointIoTest, WriteBatchMethodWritesTheSameRows) {
  const std::vector<TableSpec> specs = Specs();
  auto source = NewStore(specs);
  Train(*source, specs, 2);
  CheckpointWriteOptions options;
  options.method = CheckpointWriteOptions::Method::kWriteBatch;
  const v1::CheckpointShard shard = Write(*source, "batch", options);
  auto read = ReadCheckpointSlots({shard}, AllSlots(), specs);
  ASSERT_TRUE(read.ok()) << read.status();
  auto target = NewStore(specs);
  ASSERT_TRUE(target->LoadSlots(kJob, AllSlots(), read->rows).ok());
  EXPECT_EQ(Raw(*target, kDense), Raw(*source, kDense));
  EXPECT_EQ(Raw(*target, kSparse), Raw(*source, kSparse));
}

TEST_F(CheckpointIoTest, SeveralSstFilesReadBackAsOne) {
  // 4096 rows of 64 floats: 1 MiB, many 64 KiB blocks; a new file after every block.
  TableSpec spec = Spec(3, "wide", v1::DENSE, v1::OptimizerSpec::SGD, 64);
  spec.set_num_rows(4096);
  auto source = NewStore({spec});
  CheckpointWriteOptions options;
  options.target_file_bytes = 1;
  const v1::CheckpointShard shard = Write(*source, "small-files", options);
  EXPECT_GT(SstFiles(shard).size(), 4u);
  auto read = ReadCheckpointSlots({shard}, AllSlots(), {spec});
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->num_rows, 4096u);
  auto target = NewStore({spec});
  ASSERT_TRUE(target->LoadSlots(kJob, AllSlots(), read->rows).ok());
  EXPECT_EQ(Raw(*target, 3), Raw(*source, 3));
}

TEST_F(CheckpointIoTest, ExistingPathIsRefusedAndLeftAlone) {
  auto source = NewStore(Specs());
  const std::string path = (root_ / "taken").string();
  fs::create_directories(path);
  std::ofstream(path + "/precious") << "data";
  auto stats = WriteCheckpoint(source->Snapshot(kJob), path, {});
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kAlreadyExists) << stats.status();
  EXPECT_TRUE(fs::exists(path + "/precious"));
  EXPECT_EQ(WriteCheckpoint(source->Snapshot(kJob), "", {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CheckpointIoTest, CancelledWriteLeavesNothing) {
  auto source = NewStore(Specs());
  std::atomic<bool> cancel{true};
  CheckpointWriteOptions options;
  options.cancel = &cancel;
  const std::string path = (root_ / "cancelled").string();
  auto stats = WriteCheckpoint(source->Snapshot(kJob), path, {}, options);
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kCancelled) << stats.status();
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(CheckpointIoTest, FlippedBytesInAnSstFileAreDataLoss) {
  const std::vector<TableSpec> specs = Specs();
  auto source = NewStore(specs);
  Train(*source, specs, 1);
  const v1::CheckpointShard shard = Write(*source, "flipped");
  const std::vector<fs::path> files = SstFiles(shard);
  ASSERT_EQ(files.size(), 1u);
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    const auto size = static_cast<std::streamoff>(fs::file_size(files[0]));
    for (std::streamoff at : {size / 5, size / 3, size / 2}) {  // inside the data blocks
      f.seekg(at);
      char c = 0;
      f.read(&c, 1);
      c = static_cast<char>(c ^ 0x5A);
      f.seekp(at);
      f.write(&c, 1);
    }
  }
  auto read = ReadCheckpointSlots({shard}, AllSlots(), specs);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss) << read.status();
  EXPECT_NE(read.status().message().find(shard.path()), std::string::npos) << read.status();
}

TEST_F(CheckpointIoTest, MissingSstFileIsDataLoss) {
  const std::vector<TableSpec> specs = Specs();
  auto source = NewStore(specs);
  const v1::CheckpointShard shard = Write(*source, "missing-file");
  for (const fs::path& f : SstFiles(shard)) fs::remove(f);
  auto read = ReadCheckpointSlots({shard}, AllSlots(), specs);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss) << read.status();
  EXPECT_NE(read.status().message().find(shard.path()), std::string::npos) << read.status();
}

TEST_F(CheckpointIoTest, MissingDirectoryIsNotFound) {
  const std::vector<TableSpec> specs = Specs();
  auto source = NewStore(specs);
  const v1::CheckpointShard shard = Write(*source, "gone");
  fs::remove_all(shard.path());
  auto read = ReadCheckpointSlots({shard}, AllSlots(), specs);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound) << read.status();
  EXPECT_NE(read.status().message().find(shard.path()), std::string::npos) << read.status();
}

// Damage RocksDB cannot see (valid blocks, other contents) is caught by the slot records.
TEST_F(CheckpointIoTest, ChangedRowOrMissingSlotRecordIsDataLossNamingTheSlot) {
  const std::vector<TableSpec> specs = Specs();
  auto source = NewStore(specs);
  Train(*source, specs, 1);
  const v1::CheckpointShard shard = Write(*source, "edited");
  const uint32_t slot = SlotOf(kDense, 9);
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), shard.path(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    char key[14];
    const uint64_t parts[] = {slot, kDense, 9};
    const int widths[] = {2, 4, 8};
    for (int p = 0, at = 0; p < 3; at += widths[p++]) {
      for (int i = 0; i < widths[p]; ++i) {
        key[at + i] = static_cast<char>(parts[p] >> (8 * (widths[p] - 1 - i)));
      }
    }
    std::string value;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), rocksdb::Slice(key, 14), &value).ok());
    value[10] ^= 1;
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), rocksdb::Slice(key, 14), value).ok());
    ASSERT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());
  }
  auto read = ReadCheckpointSlots({shard}, AllSlots(), specs);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss) << read.status();
  EXPECT_NE(read.status().message().find(absl::StrCat("slot ", slot, ":")), std::string::npos)
      << read.status();
  // Other slots still read.
  std::vector<bool> others = AllSlots();
  others[slot] = false;
  EXPECT_TRUE(ReadCheckpointSlots({shard}, others, specs).ok());

  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), shard.path(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    const char record[] = {'\xFF', '\x01', static_cast<char>(slot >> 8),
                           static_cast<char>(slot & 0xFF)};
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), rocksdb::Slice(record, 4)).ok());
    ASSERT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());
  }
  read = ReadCheckpointSlots({shard}, AllSlots(), specs);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss) << read.status();
  EXPECT_NE(read.status().message().find("no slot record"), std::string::npos) << read.status();
}

TEST_F(CheckpointIoTest, SlotInNoShardIsDataLoss) {
  const std::vector<TableSpec> specs = Specs();
  auto even = NewStore(specs, ParitySlots(0));
  const v1::CheckpointShard shard = Write(*even, "even");
  auto read = ReadCheckpointSlots({shard}, AllSlots(), specs);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss) << read.status();
  EXPECT_NE(read.status().message().find("slot 1 is in no shard"), std::string::npos)
      << read.status();
  EXPECT_TRUE(ReadCheckpointSlots({shard}, ParitySlots(0), specs).ok());
}

TEST_F(CheckpointIoTest, ShardOfAnotherCheckpointIsRefused) {
  const std::vector<TableSpec> specs = Specs();
  auto source = NewStore(specs);
  const v1::CheckpointShard shard = Write(*source, "shard-0");  // checkpoint 7 of "job"
  CheckpointReadOptions options;
  options.job_id = kJob;
  options.checkpoint_id = 8;
  auto read = ReadCheckpointSlots({shard}, AllSlots(), specs, options);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition) << read.status();
  options.checkpoint_id = 7;
  EXPECT_TRUE(ReadCheckpointSlots({shard}, AllSlots(), specs, options).ok());
}

}  // namespace
}  // namespace ps::checkpoint_io_test
