#include "server/internal/row_index.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "server/internal/admission_sketch.h"

namespace ps {
namespace {

// Rows of 16 bytes whose first 8 hold the key.
class RowIndexTest : public ::testing::Test {
 protected:
  uint32_t NewRow(uint64_t key) {
    const uint32_t row = arena_.Allocate();
    std::memcpy(arena_.At(row), &key, sizeof(key));
    return row;
  }
  RowArena arena_{16};
  RowIndex index_;
};

TEST_F(RowIndexTest, FindsWhatWasInsertedAndNothingElse) {
  absl::flat_hash_map<uint64_t, uint32_t> expected;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 50000; ++i) {
    const uint64_t key = i < 1000 ? static_cast<uint64_t>(i) : rng();  // dense and random keys
    if (expected.contains(key)) continue;
    const uint32_t row = NewRow(key);
    ASSERT_TRUE(index_.Insert(arena_, row));
    expected[key] = row;
  }
  EXPECT_EQ(index_.size(), expected.size());
  for (const auto& [key, row] : expected) ASSERT_EQ(index_.Find(arena_, key), row) << key;
  for (uint64_t key = 1000; key < 2000; ++key) {
    EXPECT_EQ(index_.Find(arena_, key), RowArena::kNoRow);
  }
  // Between 3/8 and 3/4 full, 5 bytes a bucket.
  EXPECT_GE(index_.bytes(), expected.size() * RowIndex::kBucketBytes * 4 / 3);
  EXPECT_LE(index_.bytes(), expected.size() * RowIndex::kBucketBytes * 8 / 3 + 16);
}

TEST_F(RowIndexTest, EraseKeepsEveryOtherKeyFindable) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 20000; ++k) {
    keys.push_back(k * 1024);  // keys alike in their low bits
    ASSERT_TRUE(index_.Insert(arena_, NewRow(keys.back())));
  }
  std::mt19937 rng(3);
  std::shuffle(keys.begin(), keys.end(), rng);
  absl::flat_hash_set<uint64_t> erased;
  for (size_t i = 0; i < keys.size() / 2; ++i) {
    ASSERT_NE(index_.Erase(arena_, keys[i]), RowArena::kNoRow);
    erased.insert(keys[i]);
  }
  EXPECT_EQ(index_.Erase(arena_, keys[0]), RowArena::kNoRow);  // already gone
  EXPECT_EQ(index_.size(), keys.size() - erased.size());
  for (uint64_t key : keys) {
    EXPECT_EQ(index_.Find(arena_, key) == RowArena::kNoRow, erased.contains(key)) << key;
  }
  size_t visited = 0;
  index_.ForEach([&](uint32_t row) {
    ++visited;
    EXPECT_FALSE(erased.contains(RowIndex::KeyOf(arena_.At(row))));
  });
  EXPECT_EQ(visited, index_.size());
}

TEST_F(RowIndexTest, SampleReturnsRowsOfTheIndex) {
  absl::flat_hash_set<uint32_t> rows;
  for (uint64_t k = 0; k < 100; ++k) {
    const uint32_t row = NewRow(k);
    rows.insert(row);
    ASSERT_TRUE(index_.Insert(arena_, row));
  }
  uint32_t sample[8];
  for (uint64_t start : {0ull, 5ull, 1000003ull}) {
    ASSERT_EQ(index_.Sample(start, sample, 8), 8u);
    for (uint32_t r : sample) EXPECT_TRUE(rows.contains(r));
  }
  RowIndex empty;
  EXPECT_EQ(empty.Sample(0, sample, 8), 0u);
  index_.Clear();
  EXPECT_EQ(index_.size(), 0u);
  EXPECT_EQ(index_.bytes(), 0u);
  EXPECT_EQ(index_.Find(arena_, 5), RowArena::kNoRow);
}

TEST(AdmissionSketchTest, CountsNeverUnderestimateAndHalve) {
  AdmissionSketch sketch;
  EXPECT_EQ(sketch.Estimate(42), 0u);
  EXPECT_EQ(sketch.bytes(), 0u);
  for (uint32_t i = 1; i <= 5; ++i) EXPECT_GE(sketch.Add(42, 1024), i);
  EXPECT_EQ(sketch.bytes(), 2048u);
  // Many other keys: 42's estimate can only grow.
  for (uint64_t k = 1000; k < 3000; ++k) sketch.Add(k, 1024);
  EXPECT_GE(sketch.Estimate(42), 5u);
  sketch.Halve();
  EXPECT_GE(sketch.Estimate(42), 2u);
  for (int i = 0; i < 1000; ++i) sketch.Add(7, 1024);
  EXPECT_EQ(sketch.Estimate(7), AdmissionSketch::kMaxCount);  // saturates, never wraps
}

}  // namespace
}  // namespace ps
