// Key -> virtual slot -> server placement.
#ifndef PS_COMMON_SHARD_MAP_H_
#define PS_COMMON_SHARD_MAP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ps {

inline constexpr uint32_t kNumSlots = 1024;

// slot = hash(table_id, key) mod kNumSlots. Stable across versions: it decides placement.
inline uint32_t SlotOf(uint32_t table_id, uint64_t key) {
  // splitmix64 finalizer over key mixed with the table id.
  uint64_t z = key + 0x9e3779b97f4a7c15ULL * (static_cast<uint64_t>(table_id) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z = z ^ (z >> 31);
  return static_cast<uint32_t>(z % kNumSlots);
}

// Which server owns each slot, with an epoch that grows on every change.
// Immutable after construction; copy to change. Thread-compatible.
class ShardMap {
 public:
  // Slot s goes to server s % servers.size() (a balanced static placement).
  static ShardMap RoundRobin(std::vector<std::string> servers, uint64_t epoch = 1);
  // Slot s goes to servers[owners[s]] (the scheduler's map after a server loss); `owners` must
  // have kNumSlots entries, each a valid index (else INVALID_ARGUMENT).
  static absl::StatusOr<ShardMap> FromOwners(std::vector<std::string> servers,
                                             const std::vector<uint32_t>& owners, uint64_t epoch);
  // Reads a static shard-map file: one "address slot_ranges" line per server, e.g.
  // "127.0.0.1:7100 0-511" or "host:7101 512-1023"; '#' starts a comment. Every slot
  // must be owned exactly once.
  static absl::StatusOr<ShardMap> FromFile(const std::string& path);
  static absl::StatusOr<ShardMap> Parse(const std::string& text);

  uint64_t epoch() const { return epoch_; }
  const std::vector<std::string>& servers() const { return servers_; }
  int OwnerOfSlot(uint32_t slot) const { return owner_[slot]; }
  int OwnerOf(uint32_t table_id, uint64_t key) const { return owner_[SlotOf(table_id, key)]; }
  // The slots owned by server `index`.
  std::vector<bool> SlotsOf(int index) const;

 private:
  uint64_t epoch_ = 0;
  std::vector<std::string> servers_;
  std::vector<int> owner_;  // kNumSlots entries
};

// A set of slots as a kNumSlots-bit bitmap (bit s of byte s / 8), as ConfigureJob carries it.
std::string EncodeSlotBitmap(const std::vector<bool>& slots);
// INVALID_ARGUMENT unless `bytes` is kNumSlots / 8 bytes long.
absl::StatusOr<std::vector<bool>> DecodeSlotBitmap(const std::string& bytes);

}  // namespace ps

#endif  // PS_COMMON_SHARD_MAP_H_
