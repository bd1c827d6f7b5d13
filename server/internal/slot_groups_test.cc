#include "server/internal/slot_groups.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/shard_map.h"

namespace ps {
namespace {

struct TestSlot {
  absl::Mutex mu;
};

constexpr uint32_t kTable = 7;

// True if `mu` is free now (taken and given back at once).
bool IsFree(absl::Mutex& mu) {
  if (!mu.TryLock()) return false;
  mu.Unlock();
  return true;
}

// `n` keys spread over the slots (a few per slot).
std::vector<uint64_t> SpreadKeys(size_t n, uint64_t seed) {
  std::vector<uint64_t> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = (i + 1) * 0x9E3779B97F4A7C15ull + seed;
  return keys;
}

TEST(ForEachSlotBatchTest, VisitsEveryKeyOnceInBatchesOfLockedSlotsInIncreasingOrder) {
  auto slots = std::make_unique<TestSlot[]>(kNumSlots);
  const std::vector<uint64_t> keys = SpreadKeys(5000, 1);
  constexpr size_t kBatch = 64;
  std::vector<int> seen(keys.size(), 0);
  std::vector<size_t> batch_sizes;
  uint32_t first_slot = kNumSlots;
  size_t wraps = 0;  // batches that start at a lower slot than the one before
  uint32_t last_slot_seen = 0;
  const absl::Status s = ForEachSlotBatch(
      slots.get(), kTable, keys, kBatch, nullptr,
      [&](absl::Span<const SlotGroupRef<TestSlot>> batch) {
        size_t held = 0;
        for (size_t b = 0; b < batch.size(); ++b) {
          const uint32_t s = static_cast<uint32_t>(batch[b].slot - slots.get());
          if (first_slot == kNumSlots) first_slot = s;
          if (b > 0) {
            EXPECT_GT(batch[b].slot, batch[b - 1].slot) << "locks not in increasing order";
          } else if (!batch_sizes.empty() && s < last_slot_seen) {
            ++wraps;
          }
          last_slot_seen = s;
          // Locked by the walk: another try fails.
          EXPECT_FALSE(IsFree(batch[b].slot->mu));
          EXPECT_FALSE(batch[b].group.empty());
          for (uint32_t i : batch[b].group) {
            EXPECT_EQ(SlotOf(kTable, keys[i]), s);
            ++seen[i];
          }
          held += batch[b].group.size();
        }
        batch_sizes.push_back(held);
        return absl::OkStatus();
      });
  ASSERT_TRUE(s.ok()) << s;
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(seen[i], 1) << "key " << i;
  EXPECT_EQ(first_slot, SlotOf(kTable, keys[0]));  // the walk starts at the first key's slot
  EXPECT_EQ(wraps, 1u);                            // and goes round once
  // Every batch but the one ending at the last slot and the one ending the walk is full.
  size_t short_batches = 0;
  for (size_t n : batch_sizes) short_batches += n < kBatch;
  EXPECT_LE(short_batches, 2u);
  // Every lock was given back.
  for (uint32_t s = 0; s < kNumSlots; ++s) ASSERT_TRUE(IsFree(slots[s].mu)) << "slot " << s;
}

TEST(ForEachSlotBatchTest, ABatchLocksAtMostkMaxBatchSlotsSlots) {
  auto slots = std::make_unique<TestSlot[]>(kNumSlots);
  const std::vector<uint64_t> keys = SpreadKeys(300, 4);  // most slots hold one key or none
  size_t visited = 0, batches = 0;
  ASSERT_TRUE(ForEachSlotBatch(slots.get(), kTable, keys, /*batch_keys=*/1000, nullptr,
                               [&](absl::Span<const SlotGroupRef<TestSlot>> batch) {
                                 EXPECT_LE(batch.size(), kMaxBatchSlots);
                                 for (const auto& g : batch) visited += g.group.size();
                                 ++batches;
                                 return absl::OkStatus();
                               })
                  .ok());
  EXPECT_EQ(visited, keys.size());
  EXPECT_GT(batches, 1u);  // 300 keys < batch_keys: only the slot cap cut them
}

TEST(ForEachSlotBatchTest, StopsAtTheFirstErrorAndUnlocksEverything) {
  auto slots = std::make_unique<TestSlot[]>(kNumSlots);
  const std::vector<uint64_t> keys = SpreadKeys(3000, 2);
  int batches = 0;
  const absl::Status s = ForEachSlotBatch(
      slots.get(), kTable, keys, 100, nullptr, [&](absl::Span<const SlotGroupRef<TestSlot>>) {
        return ++batches == 3 ? absl::DataLossError("third") : absl::OkStatus();
      });
  EXPECT_EQ(s, absl::DataLossError("third"));
  EXPECT_EQ(batches, 3);
  for (uint32_t s = 0; s < kNumSlots; ++s) ASSERT_TRUE(IsFree(slots[s].mu)) << "slot " << s;
}

TEST(ForEachSlotBatchTest, UsesAPrebuiltGroupingAndAcceptsNoKeys) {
  auto slots = std::make_unique<TestSlot[]>(kNumSlots);
  const std::vector<uint64_t> keys = SpreadKeys(500, 3);
  SlotGroups groups;
  groups.Build(kTable, keys);
  size_t visited = 0;
  ASSERT_TRUE(ForEachSlotBatch(slots.get(), kTable, keys, 32, &groups,
                               [&](absl::Span<const SlotGroupRef<TestSlot>> batch) {
                                 for (const auto& g : batch) {
                                   // Spans into the grouping given, not a copy.
                                   EXPECT_GE(g.group.data(), groups.order.data());
                                   EXPECT_LT(g.group.data(),
                                             groups.order.data() + groups.order.size());
                                   visited += g.group.size();
                                 }
                                 return absl::OkStatus();
                               })
                  .ok());
  EXPECT_EQ(visited, keys.size());
  int calls = 0;
  ASSERT_TRUE(ForEachSlotBatch(slots.get(), kTable, {}, 32, nullptr,
                               [&](absl::Span<const SlotGroupRef<TestSlot>>) {
                                 ++calls;
                                 return absl::OkStatus();
                               })
                  .ok());
  EXPECT_EQ(calls, 0);
}

// Walks that start at different slots, go round past the last slot and hold many locks at once
// never deadlock, and never run two batches over one slot at the same time.
TEST(ForEachSlotBatchTest, ConcurrentWalksFromDifferentSlotsFinish) {
  auto slots = std::make_unique<TestSlot[]>(kNumSlots);
  std::vector<std::atomic<int>> inside(kNumSlots);
  for (auto& n : inside) n = 0;
  std::atomic<int> overlaps{0};
  constexpr int kThreads = 6;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 40; ++round) {
        // The same keys in a rotated order: each walk starts at another slot.
        std::vector<uint64_t> keys = SpreadKeys(2048, 4);
        std::rotate(keys.begin(), keys.begin() + (t * 331 + round * 97) % keys.size(), keys.end());
        const absl::Status s =
            ForEachSlotBatch(slots.get(), kTable, keys, 16 + 8 * t, nullptr,
                             [&](absl::Span<const SlotGroupRef<TestSlot>> batch) {
                               for (const auto& g : batch) {
                                 if (inside[g.slot - slots.get()].fetch_add(1) != 0) ++overlaps;
                               }
                               std::this_thread::yield();
                               for (const auto& g : batch)
                                 inside[g.slot - slots.get()].fetch_sub(1);
                               return absl::OkStatus();
                             });
        if (!s.ok()) ADD_FAILURE() << s;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(overlaps.load(), 0);
}

}  // namespace
}  // namespace ps
