// TableStore's embedding-table features: half-precision storage, admission, eviction under a
// cap, expiry, and their figures; with checkpoints (Snapshot / LoadSlots) and concurrency.
#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "common/half.h"
#include "common/shard_map.h"
#include "common/testing/key_blocks.h"
#include "gtest/gtest.h"
#include "server/initializer.h"
#include "server/table_store.h"

namespace ps::table_store_features_test {
namespace {

using testing::Block;
using testing::Floats;
using v1::KeyBlock;
using v1::TableSpec;

constexpr char kJob[] = "job";

TableSpec Sparse(uint32_t id, uint32_t dim,
                 v1::OptimizerSpec::Kind optimizer = v1::OptimizerSpec::SGD) {
  TableSpec spec;
  spec.set_table_id(id);
  spec.set_name("emb");
  spec.set_job_id(kJob);
  spec.set_kind(v1::SPARSE);
  spec.set_dim(dim);
  spec.mutable_initializer()->set_kind(v1::InitializerSpec::UNIFORM);
  spec.mutable_initializer()->set_low(-1.0f);
  spec.mutable_initializer()->set_high(1.0f);
  spec.mutable_initializer()->set_seed(11);
  spec.mutable_optimizer()->set_kind(optimizer);
  spec.mutable_optimizer()->set_learning_rate(0.5f);
  return spec;
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

absl::Status Push(TableStore& store, uint32_t id, const std::vector<uint64_t>& keys, float grad,
                  uint32_t dim) {
  TableStore::BlockView view;
  const KeyBlock block = Block(id, keys, std::vector<float>(keys.size() * dim, grad));
  if (absl::Status s = store.Resolve(kJob, block, true, &view); !s.ok()) return s;
  return store.Apply(view);
}

// The initializer's values of `key` in table `spec`, as a new row starts.
std::vector<float> Initial(const TableSpec& spec, uint64_t key) {
  std::vector<float> v(spec.dim());
  InitializeRow(spec.initializer(), InitializerStream(spec), key, v.data(),
                static_cast<int>(spec.dim()));
  return v;
}

TEST(TableStoreStorageTest, HalfPrecisionRowsPullRoundedValuesAndUpdateInFloat32) {
  for (auto storage : {TableSpec::FP16, TableSpec::BF16}) {
    SCOPED_TRACE(TableSpec::Storage_Name(storage));
    TableStore store({});
    TableSpec spec = Sparse(1, 4, v1::OptimizerSpec::ADAGRAD);
    spec.set_storage(storage);
    ASSERT_TRUE(store.CreateTable(spec).ok());
    auto round = [&](float f) {
      return storage == TableSpec::FP16 ? Fp16ToFloat(FloatToFp16(f)) : Bf16ToFloat(FloatToBf16(f));
    };
    const std::vector<float> pulled = PullOf(store, 1, {7});
    const std::vector<float> initial = Initial(spec, 7);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(pulled[i], round(initial[i])) << i;
    ASSERT_TRUE(Push(store, 1, {7}, 0.25f, 4).ok());
    // Adagrad in float32 from the rounded value, then rounded again: acc = 0.1 + g^2.
    const float acc = 0.1f + 0.25f * 0.25f;
    const std::vector<float> after = PullOf(store, 1, {7});
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(after[i], round(pulled[i] - 0.5f * 0.25f / (std::sqrt(acc) + 1e-10f))) << i;
    }
    // Snapshots hold float32 rows, state included, and load back alike.
    const JobSnapshot snap = store.Snapshot(kJob);
    ASSERT_EQ(snap.rows.size(), 1u);
    ASSERT_EQ(snap.rows[0].row_floats, 8u);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(snap.rows[0].row(0)[i], after[i]);
    EXPECT_FLOAT_EQ(snap.rows[0].row(0)[4], acc);
    EXPECT_EQ(snap.rows[0].updates[0], 1);
    TableStore other({});
    ASSERT_TRUE(other.CreateTable(spec).ok());
    ASSERT_TRUE(other.LoadSlots(kJob, snap.slots, snap.rows).ok());
    EXPECT_EQ(PullOf(other, 1, {7}), after);
  }
}

TEST(TableStoreStorageTest, HalfPrecisionRowsTakeLessMemory) {
  TableStore store({});
  TableSpec fp32 = Sparse(1, 16);
  TableSpec fp16 = Sparse(2, 16);
  fp16.set_name("emb16");
  fp16.set_storage(TableSpec::FP16);
  ASSERT_TRUE(store.CreateTable(fp32).ok());
  ASSERT_TRUE(store.CreateTable(fp16).ok());
  PullOf(store, 1, Keys(0, 1000));
  PullOf(store, 2, Keys(0, 1000));
  const auto a = store.Stats(1);
  const auto b = store.Stats(2);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->rows(), 1000u);
  EXPECT_EQ(b->rows(), 1000u);
  // 16-byte header + 64 bytes of values against 16 + 32, each with its share of the index.
  EXPECT_LT(b->bytes(), a->bytes() * 0.75);
  EXPECT_EQ(store.JobBytes(kJob), 1000u * 80 + 1000u * 48);
}

TEST(TableStoreAdmissionTest, AKeyGetsARowAtItsMinCountthPush) {
  TableStore store({});
  TableSpec spec = Sparse(1, 2);
  spec.mutable_admission()->set_min_count(3);
  ASSERT_TRUE(store.CreateTable(spec).ok());
  // A pull of a key not admitted answers its initial values and stores nothing.
  EXPECT_EQ(PullOf(store, 1, {5}), Initial(spec, 5));
  EXPECT_EQ(store.NumRows(1), 0u);
  ASSERT_TRUE(Push(store, 1, {5}, 1.0f, 2).ok());
  ASSERT_TRUE(Push(store, 1, {5}, 1.0f, 2).ok());
  EXPECT_EQ(store.NumRows(1), 0u);  // counted, dropped
  EXPECT_EQ(PullOf(store, 1, {5}), Initial(spec, 5));
  ASSERT_TRUE(Push(store, 1, {5}, 1.0f, 2).ok());  // the third: admitted and applied
  EXPECT_EQ(store.NumRows(1), 1u);
  std::vector<float> want = Initial(spec, 5);
  for (float& v : want) v -= 0.5f;
  EXPECT_EQ(PullOf(store, 1, {5}), want);
  const auto stats = store.Stats(1);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->admitted(), 1u);
  EXPECT_EQ(stats->rejected(), 2u);
}

TEST(TableStoreAdmissionTest, ProbabilityAdmitsAboutThatShare) {
  TableStore store({});
  TableSpec spec = Sparse(1, 1);
  spec.mutable_admission()->set_probability(0.25f);
  ASSERT_TRUE(store.CreateTable(spec).ok());
  ASSERT_TRUE(Push(store, 1, Keys(0, 20000), 1.0f, 1).ok());
  const uint64_t rows = store.NumRows(1);
  EXPECT_GT(rows, 4500u);
  EXPECT_LT(rows, 5500u);
  const auto stats = store.Stats(1);
  EXPECT_EQ(stats->admitted() + stats->rejected(), 20000u);
}

TEST(TableStoreAdmissionTest, CountsDecay) {
  TableStore store({});
  TableSpec spec = Sparse(1, 1);
  spec.mutable_admission()->set_min_count(2);
  spec.mutable_admission()->set_decay_seconds(10);
  ASSERT_TRUE(store.CreateTable(spec).ok());
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(Push(store, 1, {1}, 1.0f, 1).ok());  // count 1
  store.Tick(t0 + absl::Seconds(11));              // halved: 0
  ASSERT_TRUE(Push(store, 1, {1}, 1.0f, 1).ok());  // count 1 again: not admitted
  EXPECT_EQ(store.NumRows(1), 0u);
  ASSERT_TRUE(Push(store, 1, {1}, 1.0f, 1).ok());  // count 2: admitted
  EXPECT_EQ(store.NumRows(1), 1u);
}

TEST(TableStoreAdmissionTest, SyncSumsOfKeysNotAdmittedAreDropped) {
  TableStore store({});
  TableSpec spec = Sparse(1, 1);
  spec.mutable_admission()->set_min_count(2);
  ASSERT_TRUE(store.CreateTable(spec).ok());
  for (int clock = 0; clock < 2; ++clock) {
    TableStore::BlockView view;
    const KeyBlock block = Block(1, {9}, {1.0f});
    ASSERT_TRUE(store.Resolve(kJob, block, true, &view).ok());
    ASSERT_TRUE(store.Accumulate(view, clock).ok());
    store.ApplyAccumulated(kJob, clock);
    EXPECT_EQ(store.NumRows(1), static_cast<uint64_t>(clock));  // the second clock admits it
  }
  EXPECT_EQ(PullOf(store, 1, {9})[0], Initial(spec, 9)[0] - 0.5f);
}

TEST(TableStoreEvictionTest, TheCapHoldsAndTheLeastRecentlyUsedGo) {
  TableStore store({});
  TableSpec spec = Sparse(1, 4);
  spec.mutable_eviction()->set_max_rows(20000);
  ASSERT_TRUE(store.CreateTable(spec).ok());
  const absl::Time t0 = absl::Now();
  // Hot keys used every second; cold ones once, 5000 a second.
  const std::vector<uint64_t> hot = Keys(1'000'000, 2000);
  for (int second = 1; second <= 20; ++second) {
    store.Tick(t0 + absl::Seconds(second));
    PullOf(store, 1, hot);
    PullOf(store, 1, Keys(second * 10000, 5000));
    // A row of another slot goes where the new row's slot has none; failing that the table
    // passes the cap by one, which the next inserts take back.
    EXPECT_LE(store.NumRows(1), 20000u + 50) << second;
  }
  const uint64_t rows = store.NumRows(1);
  EXPECT_GE(rows, 19900u);
  const auto stats = store.Stats(1);
  EXPECT_GE(stats->evicted(), 2000u + 20 * 5000 - rows);
  // The hot keys stay: a sampled LRU evicts the oldest of 8 rows of the slot, and they are
  // never the oldest. (Within one second rows are equally old: a few go.)
  uint64_t hot_left = 0;
  store.ForEachRow(
      1, [&](uint64_t key, int64_t, absl::Span<const float>) { hot_left += key >= 1'000'000; });
  EXPECT_GE(hot_left, 1900u);
  // An evicted key is a new key again: its initial values.
  EXPECT_EQ(PullOf(store, 1, {10000}), Initial(spec, 10000));
}

TEST(TableStoreEvictionTest, RowsExpireAfterTheirTtl) {
  TableStore store({});
  TableSpec spec = Sparse(1, 2);
  spec.mutable_eviction()->set_ttl_seconds(5);
  ASSERT_TRUE(store.CreateTable(spec).ok());
  const absl::Time t0 = absl::Now();
  store.Tick(t0);
  ASSERT_TRUE(Push(store, 1, Keys(0, 100), 1.0f, 2).ok());
  store.Tick(t0 + absl::Seconds(3));
  PullOf(store, 1, Keys(0, 10));                     // used again at 3
  EXPECT_EQ(store.Tick(t0 + absl::Seconds(5)), 0u);  // not more than 5 s unused yet
  EXPECT_EQ(store.Tick(t0 + absl::Seconds(6)), 90u);
  EXPECT_EQ(store.NumRows(1), 10u);
  EXPECT_EQ(store.Tick(t0 + absl::Seconds(9)), 10u);
  EXPECT_EQ(store.NumRows(1), 0u);
  EXPECT_EQ(store.Stats(1)->expired(), 100u);
  EXPECT_EQ(store.JobBytes(kJob), 0u);
}

TEST(TableStoreEvictionTest, ARestoreOverTheCapIsRefusedAndChangesNothing) {
  TableStore big({});
  ASSERT_TRUE(big.CreateTable(Sparse(1, 2)).ok());
  PullOf(big, 1, Keys(0, 300));
  const JobSnapshot snap = big.Snapshot(kJob);

  TableStore capped({});
  TableSpec spec = Sparse(1, 2);
  spec.mutable_eviction()->set_max_rows(200);
  ASSERT_TRUE(capped.CreateTable(spec).ok());
  ASSERT_TRUE(Push(capped, 1, {5000}, 1.0f, 2).ok());
  const std::vector<float> before = PullOf(capped, 1, {5000});
  const absl::Status s = capped.LoadSlots(kJob, snap.slots, snap.rows);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("holds 300 rows for this server, over the table's cap of 200"),
            std::string::npos)
      << s;
  EXPECT_EQ(capped.NumRows(1), 1u);
  EXPECT_EQ(PullOf(capped, 1, {5000}), before);
  // Within the cap it loads, and the snapshot holds the rows live at its time.
  spec.mutable_eviction()->set_max_rows(300);
  spec.set_table_id(2);
  TableStore fits({});
  ASSERT_TRUE(fits.CreateTable(Sparse(1, 2)).ok());
  ASSERT_TRUE(fits.LoadSlots(kJob, snap.slots, snap.rows).ok());
  EXPECT_EQ(fits.NumRows(1), 300u);
}

TEST(TableStoreFeaturesTest, BadSettingsAreRefusedAtCreateTableWithTheFieldNamed) {
  TableStore store({});
  auto refused = [&](TableSpec spec, const std::string& text) {
    const absl::Status s = store.CreateTable(spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(text), std::string::npos) << s;
  };
  TableSpec spec = Sparse(1, 2);
  spec.mutable_eviction()->set_max_rows(0);
  refused(spec, "eviction.max_rows = 0");
  spec = Sparse(1, 2);
  spec.mutable_eviction()->set_ttl_seconds(-1);
  refused(spec, "eviction.ttl_seconds = -1 must be >= 1");
  spec = Sparse(1, 2);
  spec.mutable_eviction();
  refused(spec, "eviction needs max_rows and/or ttl_seconds");
  spec = Sparse(1, 2);
  spec.mutable_admission()->set_min_count(256);
  refused(spec, "admission.min_count = 256 is not in 0..255");
  spec = Sparse(1, 2);
  spec.mutable_admission()->set_probability(0.0f);
  refused(spec, "admission.probability = 0 is not in (0, 1]");
  spec = Sparse(1, 2);
  spec.mutable_admission()->set_probability(std::nanf(""));
  refused(spec, "admission.probability = nan");
  spec = Sparse(1, 2);
  spec.mutable_admission()->set_min_count(2);
  spec.mutable_admission()->set_sketch_counters(10);
  refused(spec, "admission.sketch_counters = 10");
  spec = Sparse(1, 2);
  spec.set_kind(v1::DENSE);
  spec.set_num_rows(4);
  spec.mutable_admission()->set_min_count(2);
  refused(spec, "admission is for SPARSE tables");
  spec = Sparse(1, 2);
  spec.set_storage(static_cast<TableSpec::Storage>(9));
  refused(spec, "storage = 9");
  EXPECT_EQ(store.NumRows(1), 0u);
  // A table's storage is fixed at creation: the same id with another storage is refused.
  ASSERT_TRUE(store.CreateTable(Sparse(1, 2)).ok());
  spec = Sparse(1, 2);
  spec.set_storage(TableSpec::FP16);
  EXPECT_EQ(store.CreateTable(spec).code(), absl::StatusCode::kAlreadyExists);
}

// Eviction against pushes and pulls on other threads (run under TSan in CI): every request
// succeeds, the cap holds at the end, and every row holds values a request could have left.
TEST(TableStoreEvictionTest, EvictionRacesPushesAndPullsSafely) {
  TableStore store({});
  TableSpec spec = Sparse(1, 4);
  spec.mutable_initializer()->set_kind(v1::InitializerSpec::CONSTANT);
  spec.mutable_initializer()->set_value(1.0f);
  spec.mutable_eviction()->set_max_rows(3000);
  spec.mutable_eviction()->set_ttl_seconds(1);
  ASSERT_TRUE(store.CreateTable(spec).ok());
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 60; ++round) {
        const std::vector<uint64_t> keys = Keys((round * 7 + t) % 20 * 500, 700);
        if (!Push(store, 1, keys, 1.0f / 64, 4).ok()) failed = true;
        std::vector<float> out;
        if (!PullInto(store, 1, keys, &out).ok()) failed = true;
        for (float v : out) {
          // From 1.0 by steps of 0.5/64: exact in float32, never below what 60 x 3 pushes take.
          if (!(v <= 1.0f && v >= 1.0f - 200 * 0.5f / 64)) failed = true;
        }
      }
    });
  }
  threads.emplace_back([&] {
    const absl::Time t0 = absl::Now();
    for (int s = 0; s < 40; ++s) store.Tick(t0 + absl::Seconds(s));
  });
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(failed);
  EXPECT_LE(store.NumRows(1), 3000u + kNumSlots);
  uint64_t rows = 0;
  store.ForEachRow(1, [&](uint64_t, int64_t, absl::Span<const float>) { ++rows; });
  EXPECT_EQ(rows, store.NumRows(1));
  const auto stats = store.Stats(1);
  EXPECT_GT(stats->evicted() + stats->expired(), 0u);
}

// Delta pulls (pull_codec.delta): what PullDelta reports as changed since a token.
TableSpec DeltaDense(uint32_t id, uint32_t dim, uint64_t rows, TableSpec::Storage storage) {
  TableSpec spec;
  spec.set_table_id(id);
  spec.set_name("w");
  spec.set_job_id(kJob);
  spec.set_kind(v1::DENSE);
  spec.set_dim(dim);
  spec.set_num_rows(rows);
  spec.set_storage(storage);
  spec.mutable_initializer()->set_kind(v1::InitializerSpec::CONSTANT);
  spec.mutable_initializer()->set_value(0.5f);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  spec.mutable_pull_codec()->set_delta(true);
  return spec;
}

struct DeltaPull {
  std::vector<float> values;
  std::vector<uint32_t> changed;
  bool full = false;
  uint64_t token = 0;
};
DeltaPull PullDeltaOf(TableStore& store, uint32_t id, const std::vector<uint64_t>& keys,
                      uint64_t since) {
  TableStore::BlockView view;
  DeltaPull p;
  const KeyBlock block = Block(id, keys);
  EXPECT_TRUE(store.Resolve(kJob, block, false, &view).ok());
  p.values.resize(keys.size() * view.table->dim);
  const absl::Status s = store.PullDelta(view, since, /*max_changed=*/keys.size() * 2,
                                         p.values.data(), &p.changed, &p.full, &p.token);
  EXPECT_TRUE(s.ok()) << s;
  return p;
}

absl::Status PushValues(TableStore& store, uint32_t id, const std::vector<uint64_t>& keys,
                        const std::vector<float>& grads) {
  TableStore::BlockView view;
  const KeyBlock block = Block(id, keys, grads);
  if (absl::Status s = store.Resolve(kJob, block, true, &view); !s.ok()) return s;
  return store.Apply(view);
}

TEST(TableStoreDeltaTest, PullsSinceATokenReportTheValuesChangedSince) {
  for (auto storage : {TableSpec::FP32, TableSpec::FP16}) {
    SCOPED_TRACE(TableSpec::Storage_Name(storage));
    TableStore store({});
    ASSERT_TRUE(store.CreateTable(DeltaDense(1, 3, 4, storage)).ok());
    const std::vector<uint64_t> all = {0, 1, 2, 3};
    const DeltaPull first = PullDeltaOf(store, 1, all, 0);
    EXPECT_TRUE(first.full);  // no token: everything
    EXPECT_TRUE(first.changed.empty());
    EXPECT_EQ(first.values, std::vector<float>(12, 0.5f));
    ASSERT_NE(first.token, 0u);
    // Nothing changed yet.
    const DeltaPull none = PullDeltaOf(store, 1, all, first.token);
    EXPECT_FALSE(none.full);
    EXPECT_TRUE(none.changed.empty());
    EXPECT_GT(none.token, first.token);
    EXPECT_EQ(none.token >> 32, first.token >> 32);  // the same table object
    // A gradient of 0 changes nothing: only row 1's value 2 and row 3's value 0 move.
    ASSERT_TRUE(PushValues(store, 1, {1, 3}, {0, 0, 0.25f, 0.125f, 0, 0}).ok());
    const DeltaPull after = PullDeltaOf(store, 1, all, none.token);
    EXPECT_FALSE(after.full);
    EXPECT_EQ(after.changed, (std::vector<uint32_t>{5, 9}));
    EXPECT_EQ(after.values[5], 0.25f);
    EXPECT_EQ(after.values[9], 0.375f);
    // An older token asks for more, never less; a subset's indices are into its own values.
    EXPECT_EQ(PullDeltaOf(store, 1, all, first.token).changed, (std::vector<uint32_t>{5, 9}));
    EXPECT_EQ(PullDeltaOf(store, 1, {3}, first.token).changed, (std::vector<uint32_t>{0}));
    EXPECT_TRUE(PullDeltaOf(store, 1, all, after.token).changed.empty());
    {  // More changed than the delta can be worth: whole, and not all collected.
      TableStore::BlockView view;
      const KeyBlock block = Block(1, all);
      ASSERT_TRUE(store.Resolve(kJob, block, false, &view).ok());
      std::vector<float> values(12);
      std::vector<uint32_t> changed;
      bool full = false;
      uint64_t token = 0;
      ASSERT_TRUE(store
                      .PullDelta(view, none.token, /*max_changed=*/1, values.data(), &changed,
                                 &full, &token)
                      .ok());
      EXPECT_TRUE(full);
      EXPECT_TRUE(changed.empty());
      EXPECT_EQ(values, after.values);
    }
    // Tokens of another table object, or not answered yet (from the future), answer in full.
    EXPECT_TRUE(PullDeltaOf(store, 1, all, after.token ^ (uint64_t{1} << 40)).full);
    EXPECT_TRUE(PullDeltaOf(store, 1, all, after.token + 1000).full);
    TableStore other({});
    ASSERT_TRUE(other.CreateTable(DeltaDense(1, 3, 4, storage)).ok());
    EXPECT_TRUE(PullDeltaOf(other, 1, all, after.token).full);
  }
}

TEST(TableStoreDeltaTest, SyncSumsAndRestoredRowsAreStampedToo) {
  TableStore store({});
  ASSERT_TRUE(store.CreateTable(DeltaDense(1, 2, 3, TableSpec::FP32)).ok());
  const std::vector<uint64_t> all = {0, 1, 2};
  const uint64_t token = PullDeltaOf(store, 1, all, 0).token;
  // Sync: summed, applied at the clock's end.
  TableStore::BlockView view;
  const KeyBlock block = Block(1, {2}, {0.0f, 1.0f});
  ASSERT_TRUE(store.Resolve(kJob, block, true, &view).ok());
  ASSERT_TRUE(store.Accumulate(view, 0).ok());
  EXPECT_TRUE(PullDeltaOf(store, 1, all, token).changed.empty());  // not applied yet
  store.ApplyAccumulated(kJob, 0);
  const DeltaPull synced = PullDeltaOf(store, 1, all, token);
  EXPECT_EQ(synced.changed, (std::vector<uint32_t>{5}));
  EXPECT_EQ(synced.values[5], -0.5f);
  // A restore rewrites rows: every value it loads counts as changed (even one loaded as it was).
  const JobSnapshot snap = store.Snapshot(kJob);
  ASSERT_TRUE(PushValues(store, 1, {0}, {1.0f, 1.0f}).ok());
  ASSERT_TRUE(store.LoadSlots(kJob, snap.slots, snap.rows).ok());
  const DeltaPull restored = PullDeltaOf(store, 1, all, synced.token);
  EXPECT_FALSE(restored.full);
  EXPECT_EQ(restored.changed, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(restored.values, (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f, 0.5f, -0.5f}));
}

// Pulls racing pushes: whatever a pull did not see is reported to the next pull since its token,
// so a copy kept from the answers ends equal to the table (the client's PullCache does this).
TEST(TableStoreDeltaTest, ACopyKeptFromTheAnswersFollowsConcurrentPushes) {
  constexpr uint32_t kDim = 8;
  constexpr uint64_t kRows = 64;
  TableStore store({});
  ASSERT_TRUE(store.CreateTable(DeltaDense(1, kDim, kRows, TableSpec::FP32)).ok());
  const std::vector<uint64_t> all = Keys(0, kRows);
  std::atomic<bool> done{false};
  std::thread pusher([&] {
    for (int step = 0; step < 2000; ++step) {
      const uint64_t key = (step * 7) % kRows;
      std::vector<float> g(kDim, 0.0f);
      g[step % kDim] = 0.001f * static_cast<float>(step % 13 + 1);
      EXPECT_TRUE(PushValues(store, 1, {key}, g).ok());
    }
    done = true;
  });
  DeltaPull copy = PullDeltaOf(store, 1, all, 0);
  uint64_t token = copy.token;
  int pulls = 0;
  while (!done.load() || pulls < 4) {  // at least 4 pulls, however fast the pusher ends
    const DeltaPull p = PullDeltaOf(store, 1, all, token);
    if (p.full) {
      copy.values = p.values;
    } else {
      for (uint32_t i : p.changed) copy.values[i] = p.values[i];
    }
    token = p.token;
    ++pulls;
  }
  pusher.join();
  const DeltaPull last = PullDeltaOf(store, 1, all, token);
  for (uint32_t i : last.changed) copy.values[i] = last.values[i];
  EXPECT_EQ(copy.values, PullOf(store, 1, all));
  EXPECT_GT(pulls, 3);
}

}  // namespace
}  // namespace ps::table_store_features_test
