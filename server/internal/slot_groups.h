// Visiting a request's keys slot by slot, one lock per slot (TableStore's row passes).
#ifndef PS_SERVER_INTERNAL_SLOT_GROUPS_H_
#define PS_SERVER_INTERNAL_SLOT_GROUPS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/shard_map.h"
#include "common/status_macros.h"

namespace ps {

// Calls fn(slot, group) while holding the slot's lock, `group` being the indices (into `keys`) of
// the keys of that slot, in their order in `keys`. Keys of one slot are visited under one lock
// (counting-sorted by slot first; a pull of 4096 random keys locks each of the 1024 slots once
// instead of 4096 times). fn starts with slot.mu.AssertHeld() (for clang's lock analysis). Stops
// at fn's first error.
template <typename SlotT, typename Fn>
absl::Status ForEachSlotGroup(SlotT* slots, uint32_t table_id, absl::Span<const uint64_t> keys,
                              Fn fn) {
  constexpr size_t kGroupFrom = 64;  // fewer keys: one lock each (sorting costs more)
  if (keys.size() < kGroupFrom) {
    for (uint32_t i = 0; i < keys.size(); ++i) {
      SlotT& slot = slots[SlotOf(table_id, keys[i])];
      absl::MutexLock l(&slot.mu);
      PS_RETURN_IF_ERROR(fn(slot, absl::Span<const uint32_t>(&i, 1)));
    }
    return absl::OkStatus();
  }
  std::vector<uint32_t> slot_of(keys.size());
  std::vector<uint32_t> start(kNumSlots + 1, 0);
  for (size_t i = 0; i < keys.size(); ++i) {
    slot_of[i] = SlotOf(table_id, keys[i]);
    ++start[slot_of[i] + 1];
  }
  for (uint32_t s = 0; s < kNumSlots; ++s) start[s + 1] += start[s];
  std::vector<uint32_t> order(keys.size());
  std::vector<uint32_t> next(start.begin(), start.end() - 1);
  for (uint32_t i = 0; i < keys.size(); ++i) order[next[slot_of[i]]++] = i;
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    if (start[s] == start[s + 1]) continue;
    SlotT& slot = slots[s];
    absl::MutexLock l(&slot.mu);
    PS_RETURN_IF_ERROR(
        fn(slot, absl::Span<const uint32_t>(order.data() + start[s], start[s + 1] - start[s])));
  }
  return absl::OkStatus();
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
