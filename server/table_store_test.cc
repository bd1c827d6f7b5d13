#include "server/table_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/packed_bytes.h"
#include "common/shard_map.h"
#include "common/testing/key_blocks.h"
#include "gtest/gtest.h"
#include "server/initializer.h"

namespace ps::table_store_test {
namespace {

using testing::Block;
using testing::Floats;
using v1::KeyBlock;
using v1::TableSpec;

constexpr char kJob[] = "job";
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

TableSpec DenseSpec(uint32_t id, uint32_t dim, uint64_t rows, float init = 0.5f) {
  TableSpec spec;
  spec.set_table_id(id);
  spec.set_name("dense");
  spec.set_job_id(kJob);
  spec.set_kind(v1::DENSE);
  spec.set_dim(dim);
  spec.set_num_rows(rows);
  spec.mutable_initializer()->set_kind(v1::InitializerSpec::CONSTANT);
  spec.mutable_initializer()->set_value(init);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  return spec;
}

TableSpec SparseSpec(uint32_t id, uint32_t dim) {
  TableSpec spec;
  spec.set_table_id(id);
  spec.set_name("sparse");
  spec.set_job_id(kJob);
  spec.set_kind(v1::SPARSE);
  spec.set_dim(dim);
  spec.mutable_initializer()->set_kind(v1::InitializerSpec::UNIFORM);
  spec.mutable_initializer()->set_low(-1.0f);
  spec.mutable_initializer()->set_high(1.0f);
  spec.mutable_initializer()->set_seed(3);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  return spec;
}

// The raw bytes of the rows (pulls create missing sparse rows, so pull only existing keys).
std::string PullBytes(TableStore& store, uint32_t table_id, const std::vector<uint64_t>& keys,
                      const std::string& job = kJob) {
  TableStore::BlockView view;
  const KeyBlock block = Block(table_id, keys);
  const absl::Status s = store.Resolve(job, block, /*with_values=*/false, &view);
  EXPECT_TRUE(s.ok()) << s;
  std::string out;
  if (s.ok()) {
    EXPECT_TRUE(store.Pull(view, &out).ok());
  }
  return out;
}

// As ParameterService does: every block is resolved before any is applied.
absl::Status Push(TableStore& store, const std::vector<KeyBlock>& blocks,
                  const std::string& job = kJob) {
  std::vector<TableStore::BlockView> views(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    absl::Status s = store.Resolve(job, blocks[i], /*with_values=*/true, &views[i]);
    if (!s.ok()) return s;
  }
  for (const auto& view : views) {
    if (absl::Status s = store.Apply(view); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void Accumulate(TableStore& store, const KeyBlock& block, int64_t clock,
                const std::string& job = kJob) {
  TableStore::BlockView view;
  const absl::Status s = store.Resolve(job, block, /*with_values=*/true, &view);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(store.Accumulate(view, clock).ok());
}

TEST(TableStoreTest, CreatesDenseTableWithEveryRow) {
  TableStore store({});
  const TableSpec spec = DenseSpec(1, 4, 10);
  ASSERT_TRUE(store.CreateTable(spec).ok());
  auto described = store.Describe(1);
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_EQ(described->spec().SerializeAsString(), spec.SerializeAsString());
  EXPECT_EQ(described->rows_on_server(), 10u);
  EXPECT_EQ(Floats(PullBytes(store, 1, {9, 0, 3})), std::vector<float>(12, 0.5f));
  EXPECT_EQ(store.Describe(2).status().code(), absl::StatusCode::kNotFound);
}

TEST(TableStoreTest, PullOfUnknownSparseKeyCreatesInitializedRow) {
  TableStore store({});
  const TableSpec spec = SparseSpec(2, 8);
  ASSERT_TRUE(store.CreateTable(spec).ok());
  EXPECT_EQ(store.NumRows(2), 0u);
  const std::vector<uint64_t> keys = {123, uint64_t{1} << 63};
  const std::string first = PullBytes(store, 2, keys);
  std::vector<float> want(16);
  InitializeRow(spec.initializer(), InitializerStream(spec), keys[0], want.data(), 8);
  InitializeRow(spec.initializer(), InitializerStream(spec), keys[1], want.data() + 8, 8);
  EXPECT_EQ(Floats(first), want);
  EXPECT_EQ(store.NumRows(2), 2u);
  EXPECT_EQ(PullBytes(store, 2, keys), first);
  EXPECT_EQ(store.NumRows(2), 2u);
}

// Large requests go slot by slot with the next rows fetched ahead, and a row created on the way
// may move the slot's others: rows new and old, many per slot, must each get their own values.
TEST(TableStoreTest, LargeRequestsMixingNewAndExistingRowsMatchKeyByKeyOnes) {
  TableStore batched({});
  TableStore single({});
  const TableSpec spec = SparseSpec(2, 5);
  ASSERT_TRUE(batched.CreateTable(spec).ok());
  ASSERT_TRUE(single.CreateTable(spec).ok());
  // 20000 keys over 1024 slots (about 20 per slot); a third of them exist before.
  std::vector<uint64_t> keys(20000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i * 0x9E3779B97F4A7C15ull;
  std::vector<uint64_t> existing;
  for (size_t i = 0; i < keys.size(); i += 3) existing.push_back(keys[i]);
  PullBytes(batched, 2, existing);
  std::vector<float> grad(keys.size() * 5);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = static_cast<float>(i % 1009) / 1024.0f;
  ASSERT_TRUE(Push(batched, {Block(2, keys, grad)}).ok());
  const std::string pulled = PullBytes(batched, 2, keys);
  // The same, one key per request.
  for (uint64_t key : existing) PullBytes(single, 2, {key});
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(
        Push(single, {Block(2, {keys[i]}, std::vector<float>(&grad[i * 5], &grad[i * 5 + 5]))})
            .ok());
  }
  std::string want;
  for (uint64_t key : keys) want += PullBytes(single, 2, {key});
  EXPECT_EQ(Floats(pulled), Floats(want));
  EXPECT_EQ(batched.NumRows(2), keys.size());
  // Counted per request: a 16-byte header and 5 floats a row, in 48-byte strides.
  EXPECT_EQ(batched.JobBytes(kJob), keys.size() * 48);
  // A pull of more keys than one request's group threshold, with every row existing.
  EXPECT_EQ(PullBytes(batched, 2, existing).size(), existing.size() * 5 * sizeof(float));
}

TEST(TableStoreTest, SameSpecTwiceIsOkAnotherSpecIsAlreadyExists) {
  TableStore store({});
  ASSERT_TRUE(store.CreateTable(DenseSpec(1, 2, 4)).ok());
  ASSERT_TRUE(Push(store, {Block(1, {0}, {1.0f, 1.0f})}).ok());
  EXPECT_TRUE(store.CreateTable(DenseSpec(1, 2, 4)).ok());
  // Creating it again neither resets nor duplicates rows.
  EXPECT_EQ(Floats(PullBytes(store, 1, {0})), std::vector<float>({-0.5f, -0.5f}));
  EXPECT_EQ(store.NumRows(1), 4u);
  TableSpec other = DenseSpec(1, 3, 4);
  other.set_name("other");
  const absl::Status s = store.CreateTable(other);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  EXPECT_NE(s.message().find("table 1 already exists"), std::string::npos) << s;
  EXPECT_EQ(store.Describe(1)->spec().dim(), 2u);
}

TEST(TableStoreTest, CreateRejectsBadSpecs) {
  TableStoreOptions options;
  options.max_dense_table_bytes = 4096;
  TableStore store(options);
  struct Case {
    std::string name;
    TableSpec spec;
    std::string want;
  };
  std::vector<Case> cases;
  cases.push_back({"dim 0", DenseSpec(1, 0, 4), "dim 0"});
  cases.push_back({"dim too big", SparseSpec(1, (1u << 20) + 1), "dim 1048577"});
  cases.push_back({"kind unspecified", SparseSpec(1, 4), "kind"});
  cases.back().spec.set_kind(v1::TABLE_KIND_UNSPECIFIED);
  cases.push_back({"empty job id", SparseSpec(1, 4), "job_id"});
  cases.back().spec.clear_job_id();
  cases.push_back({"dense without rows", DenseSpec(1, 4, 0), "num_rows 0"});
  cases.push_back({"huge dense table", DenseSpec(1, 1024, uint64_t{1} << 30), "num_rows"});
  // 100 rows x 4 floats x (1 value + 2 adam state) x 4 bytes = 4800 > 4096: state counts.
  cases.push_back({"dense table with state over the limit", DenseSpec(1, 4, 100), "4096 bytes"});
  cases.back().spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  cases.push_back({"bad initializer", SparseSpec(1, 4), "initializer"});
  cases.back().spec.mutable_initializer()->set_high(-2.0f);
  cases.push_back({"bad optimizer", SparseSpec(1, 4), "learning_rate"});
  cases.back().spec.mutable_optimizer()->set_learning_rate(-1.0f);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const absl::Status s = store.CreateTable(c.spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(c.want), std::string::npos) << s;
    EXPECT_FALSE(store.Describe(1).ok()) << "a rejected spec left a table behind";
  }
  // 100 rows x 4 floats x 4 bytes (sgd keeps no state) = 1600 bytes fits.
  EXPECT_TRUE(store.CreateTable(DenseSpec(1, 4, 100)).ok());
  // Under the default limit (64 GiB) a 4 TiB dense table is refused before any allocation.
  TableStore default_store({});
  EXPECT_EQ(default_store.CreateTable(DenseSpec(1, 1024, uint64_t{1} << 30)).code(),
            absl::StatusCode::kInvalidArgument);
}

// Tables: dense 1 (dim 2, 4 rows) and sparse 2 (dim 3) of kJob, dense 3 of another job.
class TableStoreResolveTest : public ::testing::Test {
 protected:
  TableStoreResolveTest() : store_(Options()) {}
  static TableStoreOptions Options() {
    TableStoreOptions options;
    options.max_keys_per_block = 8;
    return options;
  }
  void SetUp() override {
    ASSERT_TRUE(store_.CreateTable(DenseSpec(1, 2, 4)).ok());
    ASSERT_TRUE(store_.CreateTable(SparseSpec(2, 3)).ok());
    TableSpec other = DenseSpec(3, 2, 4);
    other.set_job_id("other");
    ASSERT_TRUE(store_.CreateTable(other).ok());
    PullBytes(store_, 2, {10, 11});  // creates the two sparse rows
  }
  std::string Snapshot() {
    return PullBytes(store_, 1, {0, 1, 2, 3}) + PullBytes(store_, 2, {10, 11}) +
           PullBytes(store_, 3, {0, 1, 2, 3}, "other") + std::to_string(store_.NumRows(2));
  }

  TableStore store_;
};

TEST_F(TableStoreResolveTest, RejectsBadBlocksAndChangesNothing) {
  struct Case {
    std::string name;
    KeyBlock block;
    bool with_values;
    std::string want;
  };
  KeyBlock short_keys = Block(2, {10});
  short_keys.mutable_keys()->resize(12);
  KeyBlock odd_values = Block(1, {0}, {1, 2});
  odd_values.mutable_values()->pop_back();
  std::vector<uint64_t> nine_keys = {10, 11, 12, 13, 14, 15, 16, 17, 18};
  const std::vector<Case> cases = {
      {"unknown table", Block(99, {0}, {1, 2}), true, "unknown table id 99"},
      {"table of another job", Block(3, {0}, {1, 2}), true, "belongs to job 'other'"},
      {"keys not a multiple of 8 bytes", short_keys, true, "not a multiple of 8"},
      {"values not a multiple of 4 bytes", odd_values, true, "not a multiple of 4"},
      {"values wrong for dim", Block(2, {10, 11}, {1, 2, 3, 4, 5}), true,
       "5 values for 2 keys of dim 3"},
      {"duplicate keys", Block(2, {10, 11, 10}, std::vector<float>(9, 1)), true,
       "duplicate key 10"},
      {"duplicate keys in a pull", Block(1, {3, 3}), false, "duplicate key 3"},
      {"dense key out of range", Block(1, {1, 4}, {1, 1, 1, 1}), true, "key 4 is out of range"},
      {"NaN gradient", Block(2, {10, 500}, {1, 1, 1, 1, kNaN, 1}), true, "NaN or Inf"},
      {"Inf gradient", Block(1, {0}, {-kInf, 1}), true, "NaN or Inf"},
      {"too many keys", Block(2, nine_keys, std::vector<float>(27, 1)), true,
       "9 keys in one block; at most 8"},
      {"pull block carrying values", Block(2, {10}, {1, 2, 3}), false, "must not carry values"},
  };
  const std::string before = Snapshot();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TableStore::BlockView view;
    absl::Status s = store_.Resolve(kJob, c.block, c.with_values, &view);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(c.want), std::string::npos) << s;
    if (c.with_values) {
      // A valid block before the bad one is not applied either.
      s = Push(store_, {Block(1, {0, 1}, {1, 1, 1, 1}), Block(2, {11}, {1, 1, 1}), c.block});
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    }
    EXPECT_EQ(Snapshot(), before);
  }
  // The store still serves a valid push.
  ASSERT_TRUE(Push(store_, {Block(1, {0}, {0.5f, -0.5f})}).ok());
  EXPECT_EQ(Floats(PullBytes(store_, 1, {0})), std::vector<float>({0.0f, 1.0f}));
}

TEST(TableStoreTest, KeyOfAnotherServerIsFailedPreconditionNamingTheEpoch) {
  TableStoreOptions options;
  options.owned_slots = ShardMap::RoundRobin({"a:1", "b:1"}).SlotsOf(0);
  options.shard_epoch = 7;
  TableStore store(options);
  ASSERT_TRUE(store.CreateTable(DenseSpec(1, 2, 64)).ok());
  ASSERT_TRUE(store.CreateTable(SparseSpec(2, 2)).ok());
  uint64_t mine = 0, theirs = 0;
  while (!options.owned_slots[SlotOf(1, mine)]) ++mine;
  while (options.owned_slots[SlotOf(1, theirs)]) ++theirs;
  uint64_t owned_rows = 0;
  for (uint64_t k = 0; k < 64; ++k) owned_rows += options.owned_slots[SlotOf(1, k)];
  EXPECT_EQ(store.NumRows(1), owned_rows);  // only its own dense rows
  const std::string before = PullBytes(store, 1, {mine});
  for (bool with_values : {true, false}) {
    const KeyBlock block =
        Block(1, {mine, theirs}, with_values ? std::vector<float>(4, 1) : std::vector<float>{});
    TableStore::BlockView view;
    const absl::Status s = store.Resolve(kJob, block, with_values, &view);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("epoch 7"), std::string::npos) << s;
    EXPECT_NE(s.message().find("key " + std::to_string(theirs)), std::string::npos) << s;
  }
  EXPECT_EQ(PullBytes(store, 1, {mine}), before);
  EXPECT_EQ(store.NumRows(2), 0u);
}

// A block of 64 keys or more is grouped by slot once in Resolve, which checks ownership and
// repeated keys slot by slot; the row passes reuse the grouping. The same refusals as for a
// small block, naming the same key, with nothing changed.
TEST(TableStoreTest, LargeBlocksAreCheckedSlotBySlot) {
  TableStoreOptions options;
  options.owned_slots = ShardMap::RoundRobin({"a:1", "b:1"}).SlotsOf(0);
  options.shard_epoch = 3;
  TableStore store(options);
  ASSERT_TRUE(store.CreateTable(SparseSpec(2, 2)).ok());
  ASSERT_TRUE(store.CreateTable(DenseSpec(1, 2, 4096)).ok());
  std::vector<uint64_t> keys;
  uint64_t theirs = 0;
  for (uint64_t k = 0; keys.size() < 1000; ++k) {
    if (options.owned_slots[SlotOf(2, k)]) {
      keys.push_back(k);
    } else {
      theirs = k;
    }
  }
  std::reverse(keys.begin(), keys.end());  // owned keys, in no slot order
  ASSERT_TRUE(Push(store, {Block(2, keys, std::vector<float>(2000, 1.0f))}).ok());
  ASSERT_EQ(store.NumRows(2), 1000u);
  const std::string before = PullBytes(store, 2, keys);
  // The batched pull matches key-by-key pulls.
  std::string one_by_one;
  for (uint64_t k : keys) one_by_one += PullBytes(store, 2, {k});
  EXPECT_EQ(before, one_by_one);

  std::vector<uint64_t> repeated = keys;
  repeated[900] = keys[17];
  std::vector<uint64_t> foreign = keys;
  foreign[500] = theirs;
  std::vector<uint64_t> dense(100);
  std::iota(dense.begin(), dense.end(), 0);
  dense[70] = 4096;
  for (bool with_values : {true, false}) {
    SCOPED_TRACE(with_values ? "push" : "pull");
    auto block = [&](uint32_t table, const std::vector<uint64_t>& k) {
      return Block(table, k,
                   with_values ? std::vector<float>(k.size() * 2, 1.0f) : std::vector<float>{});
    };
    TableStore::BlockView view;
    absl::Status s = store.Resolve(kJob, block(2, repeated), with_values, &view);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(absl::StrCat("duplicate key ", keys[17], " ")), std::string::npos)
        << s;
    TableStore::BlockView view2;
    s = store.Resolve(kJob, block(2, foreign), with_values, &view2);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find(absl::StrCat("key ", theirs, ")")), std::string::npos) << s;
    EXPECT_NE(s.message().find("epoch 3"), std::string::npos) << s;
    TableStore::BlockView view3;
    s = store.Resolve(kJob, block(1, dense), with_values, &view3);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("key 4096 is out of range"), std::string::npos) << s;
  }
  EXPECT_EQ(Push(store, {Block(2, repeated, std::vector<float>(2000, 1.0f))}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PullBytes(store, 2, keys), before);
  EXPECT_EQ(store.NumRows(2), 1000u);
}

TEST(TableStoreTest, SkipRowPolicyLeavesOnlyNonFiniteRowsUnchanged) {
  TableStoreOptions options;
  options.nonfinite = NonFinitePolicy::kSkipRow;
  TableStore store(options);
  ASSERT_TRUE(store.CreateTable(DenseSpec(1, 2, 4, /*init=*/1.0f)).ok());
  const std::vector<float> grads = {1, 1, kNaN, 0, 2, 2, 0, -kInf};
  // Async: applied on arrival.
  ASSERT_TRUE(Push(store, {Block(1, {0, 1, 2, 3}, grads)}).ok());
  EXPECT_EQ(Floats(PullBytes(store, 1, {0, 1, 2, 3})),
            std::vector<float>({0, 0, 1, 1, -1, -1, 1, 1}));
  // Sync: a non-finite row of one push is dropped from the sum; the other workers' gradients
  // for that row still apply (row 1 gets only the second push's 1s).
  Accumulate(store, Block(1, {0, 1, 2, 3}, grads), 0);
  Accumulate(store, Block(1, {0, 1}, {1, 1, 1, 1}), 0);
  store.ApplyAccumulated(kJob, 0);
  EXPECT_EQ(Floats(PullBytes(store, 1, {0, 1, 2, 3})),
            std::vector<float>({-2, -2, 0, 0, -3, -3, 1, 1}));
}

// A push read in place (ParameterService's Push and PushPull) applies its gradients from the
// received pieces: misaligned, rows cut across pieces; the rows end as with one contiguous copy.
TEST(TableStoreTest, GradientsReadInPlaceApplyAsContiguousOnes) {
  TableStore contiguous{TableStoreOptions()}, in_place{TableStoreOptions()};
  for (TableStore* store : {&contiguous, &in_place}) {
    ASSERT_TRUE(store->CreateTable(DenseSpec(1, 5, 300)).ok());
  }
  std::vector<uint64_t> keys(200);
  std::vector<float> grads(200 * 5);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = (i * 37) % 300;
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.01f * static_cast<float>(i % 97) - 0.3f;
  const KeyBlock block = Block(1, keys, grads);
  // The values cut into 7-byte pieces, each one byte past an aligned address.
  std::vector<std::string> storage;
  ScatteredValues scattered;
  for (size_t at = 0; at < block.values().size(); at += 7) {
    storage.push_back("x" + block.values().substr(at, 7));
  }
  for (const std::string& piece : storage) scattered.Add(piece.data() + 1, piece.size() - 1);
  KeyBlock keys_only = block;
  keys_only.clear_values();
  for (int64_t clock : {-1, 0}) {  // async apply, then a sync clock
    ASSERT_TRUE(Push(contiguous, {block}).ok());
    TableStore::BlockView view;
    ASSERT_TRUE(in_place.Resolve(kJob, keys_only, /*with_values=*/true, &view, &scattered).ok());
    if (clock < 0) {
      ASSERT_TRUE(in_place.Apply(view).ok());
    } else {
      Accumulate(contiguous, block, clock);
      ASSERT_TRUE(in_place.Accumulate(view, clock).ok());
      ASSERT_TRUE(in_place.Apply(view).ok());
      contiguous.ApplyAccumulated(kJob, clock);
      in_place.ApplyAccumulated(kJob, clock);
    }
  }
  std::vector<uint64_t> all(300);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(PullBytes(in_place, 1, all), PullBytes(contiguous, 1, all));
  // Bad sizes and non-finite values are refused as for a contiguous block.
  storage.back()[1] = '\xff';
  storage.back()[2] = '\xff';
  storage.back()[3] = '\xff';
  storage.back()[4] = '\xff';
  TableStore::BlockView view;
  const absl::Status nan = in_place.Resolve(kJob, keys_only, true, &view, &scattered);
  EXPECT_EQ(nan.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(nan.message().find("NaN or Inf"), std::string::npos) << nan;
  ScatteredValues short_by_one;
  short_by_one.Add(block.values().data(), block.values().size() - 4);
  const absl::Status size = in_place.Resolve(kJob, keys_only, true, &view, &short_by_one);
  EXPECT_EQ(size.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(size.message().find("999 values for 200 keys of dim 5"), std::string::npos) << size;
}

TEST(TableStoreTest, AccumulateThenApplyAccumulatedEqualsOneApplyOfTheSum) {
  // Adam is not linear in the gradient: applying the parts one by one would differ.
  auto adam = [](TableSpec spec) {
    spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
    spec.mutable_optimizer()->set_learning_rate(0.1f);
    return spec;
  };
  TableStore accumulated({}), summed({});
  for (TableStore* store : {&accumulated, &summed}) {
    ASSERT_TRUE(store->CreateTable(adam(DenseSpec(1, 2, 4))).ok());
    ASSERT_TRUE(store->CreateTable(adam(SparseSpec(2, 2))).ok());
    TableSpec other = adam(DenseSpec(3, 2, 4));
    other.set_job_id("other");
    ASSERT_TRUE(store->CreateTable(other).ok());
  }
  // Three workers' gradients for clock 5 (key 7 of the sparse table does not exist yet).
  const std::vector<KeyBlock> parts = {Block(1, {0, 1}, {0.25f, -1.5f, 3.0f, 0.125f}),
                                       Block(1, {1, 2}, {-0.75f, 2.0f, 1.0f, 1.0f}),
                                       Block(1, {0, 1}, {0.5f, 0.5f, -0.25f, 0.0625f}),
                                       Block(2, {7}, {1.5f, -2.5f}), Block(2, {7}, {0.1f, 0.2f})};
  for (const KeyBlock& part : parts) Accumulate(accumulated, part, 5);
  Accumulate(accumulated, Block(3, {0}, {1, 1}), 5, "other");
  // Another clock's gradients stay pending.
  Accumulate(accumulated, Block(1, {3}, {9, 9}), 6);
  const std::string dense_before = PullBytes(accumulated, 1, {0, 1, 2, 3});
  accumulated.ApplyAccumulated(kJob, 4);  // nothing pending at clock 4
  EXPECT_EQ(PullBytes(accumulated, 1, {0, 1, 2, 3}), dense_before);
  accumulated.ApplyAccumulated(kJob, 5);

  // The sums, added in arrival order as the store does.
  const float k0[] = {0.25f + 0.5f, -1.5f + 0.5f};
  const float k1[] = {(3.0f + -0.75f) + -0.25f, (0.125f + 2.0f) + 0.0625f};
  const float k7[] = {1.5f + 0.1f, -2.5f + 0.2f};
  ASSERT_TRUE(Push(summed, {Block(1, {0, 1, 2}, {k0[0], k0[1], k1[0], k1[1], 1.0f, 1.0f}),
                            Block(2, {7}, {k7[0], k7[1]})})
                  .ok());
  EXPECT_EQ(PullBytes(accumulated, 1, {0, 1, 2, 3}), PullBytes(summed, 1, {0, 1, 2, 3}));
  EXPECT_EQ(PullBytes(accumulated, 2, {7}), PullBytes(summed, 2, {7}));
  // The other job's table waits for its own job's clock.
  EXPECT_EQ(PullBytes(accumulated, 3, {0}, "other"), PullBytes(summed, 3, {0}, "other"));
  accumulated.ApplyAccumulated("other", 5);
  EXPECT_NE(PullBytes(accumulated, 3, {0}, "other"), PullBytes(summed, 3, {0}, "other"));
  // Applied sums are cleared: applying clock 5 again changes nothing.
  const std::string after = PullBytes(accumulated, 1, {0, 1, 2, 3});
  accumulated.ApplyAccumulated(kJob, 5);
  EXPECT_EQ(PullBytes(accumulated, 1, {0, 1, 2, 3}), after);
  // Clock 6 is still pending and applies on its own.
  accumulated.ApplyAccumulated(kJob, 6);
  EXPECT_NE(PullBytes(accumulated, 1, {3}), PullBytes(summed, 1, {3}));
}

TEST(TableStoreTest, ConcurrentPushesEndAtTheExactSum) {
  TableStore store({});
  TableSpec sparse = SparseSpec(1, 4);
  sparse.mutable_initializer()->set_kind(v1::InitializerSpec::ZEROS);
  ASSERT_TRUE(store.CreateTable(sparse).ok());
  ASSERT_TRUE(store.CreateTable(DenseSpec(2, 2, 8, /*init=*/0.0f)).ok());
  constexpr int kThreads = 4;
  constexpr int kPushes = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&store, t] {
      // SGD with lr 1 and gradient -(t+1): each push adds t+1, exactly, to every value.
      const float g = -static_cast<float>(t + 1);
      const KeyBlock sparse_block =
          Block(1, {0, 1, 1000 + static_cast<uint64_t>(t)}, std::vector<float>(12, g));
      const KeyBlock dense_block =
          Block(2, {static_cast<uint64_t>(t), 7}, std::vector<float>(4, g));
      for (int i = 0; i < kPushes; ++i) {
        const absl::Status s = Push(store, {sparse_block, dense_block});
        if (!s.ok()) ADD_FAILURE() << s;
      }
    });
  }
  // A reader meanwhile sees the shared row only grow, and stay a whole number.
  std::thread reader([&store] {
    float last = 0;
    for (int i = 0; i < 200; ++i) {
      const float v = Floats(PullBytes(store, 1, {0}))[0];
      EXPECT_GE(v, last);
      EXPECT_EQ(v, std::floor(v));
      last = v;
    }
  });
  for (auto& th : threads) th.join();
  reader.join();
  const float shared = kPushes * (1 + 2 + 3 + 4);
  EXPECT_EQ(Floats(PullBytes(store, 1, {0, 1})), std::vector<float>(8, shared));
  EXPECT_EQ(Floats(PullBytes(store, 2, {7})), std::vector<float>(2, shared));
  for (int t = 0; t < kThreads; ++t) {
    const float own = static_cast<float>(kPushes * (t + 1));
    EXPECT_EQ(Floats(PullBytes(store, 1, {1000 + static_cast<uint64_t>(t)})),
              std::vector<float>(4, own));
    EXPECT_EQ(Floats(PullBytes(store, 2, {static_cast<uint64_t>(t)})), std::vector<float>(2, own));
  }
  EXPECT_EQ(store.NumRows(1), 2u + kThreads);
}

// Large requests lock their slots a batch at a time, starting at their first key's slot: pushes
// and pulls of the same keys in different orders, at once, neither deadlock nor lose an update.
TEST(TableStoreTest, ConcurrentLargeRequestsEndAtTheExactSum) {
  TableStore store({});
  TableSpec sparse = SparseSpec(1, 4);
  sparse.mutable_initializer()->set_kind(v1::InitializerSpec::ZEROS);
  ASSERT_TRUE(store.CreateTable(sparse).ok());
  std::vector<uint64_t> keys(3000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = (i + 1) * 0x9E3779B97F4A7C15ull;
  constexpr int kThreads = 4;
  constexpr int kPushes = 40;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&store, &keys, t] {
      std::vector<uint64_t> mine = keys;
      std::rotate(mine.begin(), mine.begin() + 700 * t, mine.end());
      // SGD with lr 1 and gradient -(t+1): each push adds t+1, exactly, to every value.
      const KeyBlock block =
          Block(1, mine, std::vector<float>(mine.size() * 4, -static_cast<float>(t + 1)));
      for (int i = 0; i < kPushes; ++i) {
        const absl::Status s = Push(store, {block});
        if (!s.ok()) ADD_FAILURE() << s;
        if (PullBytes(store, 1, mine).size() != mine.size() * 4 * sizeof(float)) {
          ADD_FAILURE() << "short pull";
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  const float sum = kPushes * (1 + 2 + 3 + 4);
  EXPECT_EQ(Floats(PullBytes(store, 1, keys)), std::vector<float>(keys.size() * 4, sum));
  EXPECT_EQ(store.NumRows(1), keys.size());
}

}  // namespace
}  // namespace ps::table_store_test

namespace ps::table_store_test {
namespace {

// A schedule's factor scales the learning rate: on arrival (async) and once per clock (sync).
TEST(TableStoreTest, LearningRateScaleMultipliesTheStep) {
  TableStore store({});
  ASSERT_TRUE(store.CreateTable(DenseSpec(1, 2, 2, /*init=*/0.0f)).ok());  // sgd, lr 1
  TableStore::BlockView view;
  const KeyBlock push = Block(1, {0}, {-4, -8});
  ASSERT_TRUE(store.Resolve(kJob, push, true, &view).ok());
  ASSERT_TRUE(store.Apply(view, 0.5f).ok());
  EXPECT_EQ(Floats(PullBytes(store, 1, {0})), std::vector<float>({2, 4}));
  const KeyBlock sync = Block(1, {1}, {-4, -8});
  ASSERT_TRUE(store.Resolve(kJob, sync, true, &view).ok());
  ASSERT_TRUE(store.Accumulate(view, 3, 0.25f).ok());
  ASSERT_TRUE(store.Accumulate(view, 3, 0.25f).ok());
  store.ApplyAccumulated(kJob, 3);
  EXPECT_EQ(Floats(PullBytes(store, 1, {1})), std::vector<float>({2, 4}));
}

}  // namespace
}  // namespace ps::table_store_test

namespace ps::table_store_test {
namespace {

std::vector<bool> SlotsWhere(bool (*pred)(uint32_t)) {
  std::vector<bool> slots(kNumSlots);
  for (uint32_t s = 0; s < kNumSlots; ++s) slots[s] = pred(s);
  return slots;
}

TEST(TableStoreSnapshotTest, CopiesOwnedSlotsOfTheJobWithStateAndUpdateCounts) {
  TableStoreOptions options;
  options.owned_slots = SlotsWhere([](uint32_t s) { return s < 512; });
  TableStore store(options);
  TableSpec spec = DenseSpec(1, 2, 200);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAGRAD);  // 1 state float per value
  ASSERT_TRUE(store.CreateTable(spec).ok());
  TableSpec other_job = DenseSpec(9, 2, 50);
  other_job.set_job_id("other");
  ASSERT_TRUE(store.CreateTable(other_job).ok());
  std::vector<uint64_t> owned;
  for (uint64_t k = 0; k < 200; ++k) {
    if (SlotOf(1, k) < 512) owned.push_back(k);
  }
  ASSERT_TRUE(Push(store, {Block(1, owned, std::vector<float>(owned.size() * 2, 1.0f))}).ok());

  const JobSnapshot snap = store.Snapshot(kJob);
  EXPECT_EQ(snap.job_id, kJob);
  EXPECT_EQ(snap.shard_epoch, 1u);
  EXPECT_EQ(snap.slots, options.owned_slots);
  ASSERT_EQ(snap.tables.size(), 1u);
  EXPECT_EQ(snap.tables[0].table_id(), 1u);
  EXPECT_EQ(snap.num_rows, owned.size());
  EXPECT_EQ(snap.bytes, owned.size() * 4 * sizeof(float));
  size_t rows = 0;
  uint32_t last_slot = 0;
  for (const SlotRows& r : snap.rows) {
    EXPECT_GE(r.slot, last_slot);  // by slot
    last_slot = r.slot;
    EXPECT_EQ(r.table_id, 1u);
    EXPECT_EQ(r.row_floats, 4u);
    for (size_t i = 0; i < r.size(); ++i) {
      EXPECT_EQ(SlotOf(1, r.keys[i]), r.slot);
      EXPECT_EQ(r.updates[i], 1);
      EXPECT_EQ(std::vector<float>(r.row(i), r.row(i) + 2),
                Floats(PullBytes(store, 1, {r.keys[i]})));
    }
    rows += r.size();
  }
  EXPECT_EQ(rows, owned.size());
}

TEST(TableStoreSnapshotTest, LoadSlotsReplacesRowsAndPendingOfListedSlotsOnly) {
  TableStore store({});
  ASSERT_TRUE(store.CreateTable(DenseSpec(1, 2, 64)).ok());
  ASSERT_TRUE(store.CreateTable(SparseSpec(2, 2)).ok());
  ASSERT_TRUE(Push(store, {Block(1, {3, 4}, {1, 1, 1, 1}), Block(2, {77, 78}, {1, 1, 1, 1})}).ok());
  const uint32_t slot3 = SlotOf(1, 3);
  ASSERT_NE(slot3, SlotOf(1, 4));
  Accumulate(store, Block(1, {3, 4}, {5, 5, 5, 5}), /*clock=*/0);

  // Load slot3 with one loaded row for key 3; everything else of that slot goes.
  std::vector<bool> slots(kNumSlots);
  slots[slot3] = true;
  SlotRows loaded;
  loaded.slot = slot3;
  loaded.table_id = 1;
  loaded.row_floats = 2;
  loaded.keys = {3};
  loaded.updates = {42};
  loaded.data = {7.0f, 8.0f};
  ASSERT_TRUE(store.LoadSlots(kJob, slots, {loaded}).ok());
  EXPECT_EQ(Floats(PullBytes(store, 1, {3})), std::vector<float>({7.0f, 8.0f}));
  store.ForEachRow(1, [&](uint64_t key, int64_t updates, absl::Span<const float>) {
    if (key == 3) {
      EXPECT_EQ(updates, 42);
    }
  });
  // The pending gradient of key 3 was dropped; key 4's (another slot) still applies.
  store.ApplyAccumulated(kJob, 0);
  EXPECT_EQ(Floats(PullBytes(store, 1, {3})), std::vector<float>({7.0f, 8.0f}));
  EXPECT_EQ(Floats(PullBytes(store, 1, {4})), std::vector<float>({-5.5f, -5.5f}));
}

TEST(TableStoreSnapshotTest, EmptiedDenseSlotGetsInitialRowsOnNextUse) {
  TableStore store({});
  ASSERT_TRUE(store.CreateTable(DenseSpec(1, 2, 64)).ok());
  ASSERT_TRUE(Push(store, {Block(1, {5}, {1, 1})}).ok());
  std::vector<bool> slots(kNumSlots);
  slots[SlotOf(1, 5)] = true;
  const uint64_t before = store.NumRows(1);
  ASSERT_TRUE(store.LoadSlots(kJob, slots, {}).ok());
  EXPECT_LT(store.NumRows(1), before);
  EXPECT_EQ(Floats(PullBytes(store, 1, {5})), std::vector<float>({0.5f, 0.5f}));
  ASSERT_TRUE(Push(store, {Block(1, {5}, {1, 1})}).ok());
  EXPECT_EQ(Floats(PullBytes(store, 1, {5})), std::vector<float>({-0.5f, -0.5f}));
}

TEST(TableStoreSnapshotTest, BadLoadIsRefusedAndChangesNothing) {
  TableStore store({});
  ASSERT_TRUE(store.CreateTable(DenseSpec(1, 2, 64)).ok());
  TableSpec foreign = DenseSpec(9, 2, 64);
  foreign.set_job_id("other");
  ASSERT_TRUE(store.CreateTable(foreign).ok());
  const uint32_t slot = SlotOf(1, 3);
  std::vector<bool> slots(kNumSlots);
  slots[slot] = true;
  SlotRows good;
  good.slot = slot;
  good.table_id = 1;
  good.row_floats = 2;
  good.keys = {3};
  good.updates = {1};
  good.data = {1, 2};
  struct Case {
    std::string name;
    SlotRows rows;
  };
  std::vector<Case> cases(5, Case{"", good});
  cases[0].name = "wrong slot for the key";
  cases[0].rows.keys = {4};
  cases[1].name = "another job's table";
  cases[1].rows.table_id = 9;
  cases[2].name = "row width";
  cases[2].rows.row_floats = 3;
  cases[2].rows.data = {1, 2, 3};
  cases[3].name = "slot not listed";
  cases[3].rows.slot = (slot + 1) % kNumSlots;
  cases[4].name = "dense key out of range";
  for (uint64_t k = 64;; ++k) {
    if (SlotOf(1, k) == slot) {
      cases[4].rows.keys = {k};
      break;
    }
  }
  const std::string before = PullBytes(store, 1, {3});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const absl::Status s = store.LoadSlots(kJob, slots, {good, c.rows});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(PullBytes(store, 1, {3}), before);
    EXPECT_EQ(store.NumRows(1), 64u);
  }
}

TEST(TableStoreSnapshotTest, ClearPendingDropsOnlyThatJobsGradients) {
  TableStore store({});
  ASSERT_TRUE(store.CreateTable(DenseSpec(1, 2, 8)).ok());
  TableSpec other = DenseSpec(2, 2, 8);
  other.set_job_id("other");
  ASSERT_TRUE(store.CreateTable(other).ok());
  Accumulate(store, Block(1, {0}, {1, 1}), 0);
  Accumulate(store, Block(2, {0}, {1, 1}), 0, "other");
  store.ClearPending(kJob);
  store.ApplyAccumulated(kJob, 0);
  store.ApplyAccumulated("other", 0);
  EXPECT_EQ(Floats(PullBytes(store, 1, {0})), std::vector<float>({0.5f, 0.5f}));
  EXPECT_EQ(Floats(PullBytes(store, 2, {0}, "other")), std::vector<float>({-0.5f, -0.5f}));
}

TEST(TableStoreSnapshotTest, StaleShardEpochIsRefused) {
  TableStore store({});
  EXPECT_TRUE(store.CheckShardEpoch(kJob, 0).ok());  // the default shards, epoch 1
  EXPECT_TRUE(store.CheckShardEpoch(kJob, 1).ok());
  ASSERT_TRUE(store.SetJobShards(kJob, std::vector<bool>(kNumSlots, true), 3).ok());
  EXPECT_EQ(store.ShardEpoch(kJob), 3u);
  const absl::Status s = store.CheckShardEpoch(kJob, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(s.message(), "stale shard map epoch 2 of job job; this server is at 3");
  EXPECT_TRUE(store.CheckShardEpoch(kJob, 0).ok());
  EXPECT_TRUE(store.CheckShardEpoch(kJob, 3).ok());
  EXPECT_TRUE(store.CheckShardEpoch("other", 1).ok());
}

}  // namespace
}  // namespace ps::table_store_test
