// Visiting a request's keys slot by slot, one lock per slot (TableStore's row passes).
#ifndef PS_SERVER_INTERNAL_SLOT_GROUPS_H_
#define PS_SERVER_INTERNAL_SLOT_GROUPS_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/shard_map.h"
#include "common/status_macros.h"

namespace ps {

// A request's keys grouped by slot (counting-sorted): the keys of slot s are
// keys[order[start[s]]] .. keys[order[start[s + 1] - 1]], in their order in the request.
// TableStore::Resolve groups a large block once (it checks ownership and repeated keys slot by
// slot) and the row passes reuse the grouping.
struct SlotGroups {
  // Fewer keys are visited one by one: sorting them costs more than it saves.
  static constexpr size_t kGroupFrom = 64;

  std::vector<uint32_t> order;
  std::vector<uint32_t> start;      // kNumSlots + 1 offsets; empty until Build
  absl::Span<const uint64_t> keys;  // the keys grouped (borrowed)

  void Build(uint32_t table_id, absl::Span<const uint64_t> keys_to_group) {
    keys = keys_to_group;
    std::vector<uint32_t> slot_of(keys.size());
    start.assign(kNumSlots + 1, 0);
    for (size_t i = 0; i < keys.size(); ++i) {
      slot_of[i] = SlotOf(table_id, keys[i]);
      ++start[slot_of[i] + 1];
    }
    for (uint32_t s = 0; s < kNumSlots; ++s) start[s + 1] += start[s];
    order.resize(keys.size());
    std::vector<uint32_t> next(start.begin(), start.end() - 1);
    for (uint32_t i = 0; i < keys.size(); ++i) order[next[slot_of[i]]++] = i;
  }
  // True if built for exactly these keys (the same span).
  bool Covers(absl::Span<const uint64_t> k) const {
    return !start.empty() && k.data() == keys.data() && k.size() == keys.size();
  }
  absl::Span<const uint32_t> Group(uint32_t slot) const {
    return absl::Span<const uint32_t>(order.data() + start[slot], start[slot + 1] - start[slot]);
  }
};

// `groups` if it was built for `keys`, else `own`, built for them.
inline const SlotGroups* GroupingOf(uint32_t table_id, absl::Span<const uint64_t> keys,
                                    const SlotGroups* groups, SlotGroups* own) {
  if (groups != nullptr && groups->Covers(keys)) return groups;
  own->Build(table_id, keys);
  return own;
}

// Calls fn(slot, group) while holding the slot's lock, `group` being the indices (into `keys`) of
// the keys of that slot, in their order in `keys`. Keys of one slot are visited under one lock
// (grouped by slot first, or by `groups` if it was built for these keys; a pull of 4096 random
// keys locks each of the 1024 slots once instead of 4096 times). fn starts with
// slot.mu.AssertHeld() (for clang's lock analysis). Stops at fn's first error.
template <typename SlotT, typename Fn>
absl::Status ForEachSlotGroup(SlotT* slots, uint32_t table_id, absl::Span<const uint64_t> keys,
                              Fn fn, const SlotGroups* groups = nullptr) {
  if (keys.size() < SlotGroups::kGroupFrom) {
    for (uint32_t i = 0; i < keys.size(); ++i) {
      SlotT& slot = slots[SlotOf(table_id, keys[i])];
      absl::MutexLock l(&slot.mu);
      PS_RETURN_IF_ERROR(fn(slot, absl::Span<const uint32_t>(&i, 1)));
    }
    return absl::OkStatus();
  }
  SlotGroups own;
  groups = GroupingOf(table_id, keys, groups, &own);
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    if (groups->start[s] == groups->start[s + 1]) continue;
    SlotT& slot = slots[s];
    absl::MutexLock l(&slot.mu);
    PS_RETURN_IF_ERROR(fn(slot, groups->Group(s)));
  }
  return absl::OkStatus();
}

// One slot of a batch (ForEachSlotBatch) and the indices (into the keys) of its keys.
template <typename SlotT>
struct SlotGroupRef {
  SlotT* slot;
  absl::Span<const uint32_t> group;
};

// Most slots a batch of ForEachSlotBatch locks at once, whatever its keys: fn may take a lock of
// its own under them (a row arena's, the disk tier's), and a thread holding more than 64 locks
// at once overflows ThreadSanitizer's deadlock detector (a CHECK in its runtime, then a hang).
inline constexpr size_t kMaxBatchSlots = 32;

// Like ForEachSlotGroup, but hands fn(batch) a batch of slots at a time, all locked: the next
// slots that hold keys, until they hold at least `batch_keys` keys (fewer at the end) or are
// kMaxBatchSlots, so that
// fn can work on the keys of several slots as one stream (a few keys a slot is common: 8192 keys
// spread over 1024 slots). A walk starts at the slot of keys[0], so that two requests served at
// once are seldom at the same slot, and goes round; a batch never holds slot kNumSlots - 1 and
// slot 0 together, so every batch takes its locks in increasing slot order and two walks cannot
// deadlock. fn may touch what each batch slot's mu guards (clang's lock analysis cannot follow a
// varying set of locks: fn opts out of it, as this function does). Stops at fn's first error.
template <typename SlotT, typename Fn>
absl::Status ForEachSlotBatch(SlotT* slots, uint32_t table_id, absl::Span<const uint64_t> keys,
                              size_t batch_keys, const SlotGroups* groups,
                              Fn fn) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (keys.empty()) return absl::OkStatus();
  SlotGroups own;
  groups = GroupingOf(table_id, keys, groups, &own);
  std::vector<SlotGroupRef<SlotT>> batch;
  size_t held_keys = 0;
  auto run = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    absl::Status s = fn(absl::Span<const SlotGroupRef<SlotT>>(batch));
    for (auto it = batch.rbegin(); it != batch.rend(); ++it) it->slot->mu.Unlock();
    batch.clear();
    held_keys = 0;
    return s;
  };
  const uint32_t first = SlotOf(table_id, keys[0]);
  for (uint32_t n = 0; n < kNumSlots; ++n) {
    const uint32_t s = (first + n) % kNumSlots;
    if (s == 0 && !batch.empty()) PS_RETURN_IF_ERROR(run());
    const absl::Span<const uint32_t> group = groups->Group(s);
    if (group.empty()) continue;
    slots[s].mu.Lock();
    batch.push_back(SlotGroupRef<SlotT>{&slots[s], group});
    held_keys += group.size();
    if (held_keys >= batch_keys || batch.size() >= kMaxBatchSlots) PS_RETURN_IF_ERROR(run());
  }
  return batch.empty() ? absl::OkStatus() : run();
}

// The same, key by key: fn(slot, i) for every key i, in their order within the slot.
template <typename SlotT, typename Fn>
absl::Status ForEachKeyBySlot(SlotT* slots, uint32_t table_id, absl::Span<const uint64_t> keys,
                              Fn fn) {
  return ForEachSlotGroup(slots, table_id, keys,
                          [&](SlotT& slot, absl::Span<const uint32_t> group) {
                            slot.mu.AssertHeld();
                            for (uint32_t i : group) PS_RETURN_IF_ERROR(fn(slot, i));
                            return absl::OkStatus();
                          });
}

}  // namespace ps

#endif  // PS_SERVER_INTERNAL_SLOT_GROUPS_H_
