#include "server/replication_map.h"

#include "absl/strings/str_cat.h"
#include "common/shard_map.h"

namespace ps {
namespace {

constexpr int kMaxServers = 1024;

absl::Status Malformed(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("replica map: ", what));
}

}  // namespace

absl::StatusOr<ReplicaRoles> ResolveReplicaMap(const v1::ReplicaMap& map) {
  const int n = map.servers_size();
  if (n < 2 || n > kMaxServers) {
    return Malformed(absl::StrCat(n, " servers; a replicated job has 2..", kMaxServers));
  }
  if ((map.slot_owners_size() != 0 && map.slot_owners_size() != static_cast<int>(kNumSlots)) ||
      map.slot_backups_size() != static_cast<int>(kNumSlots)) {
    return Malformed(absl::StrCat(map.slot_owners_size(), " owners and ", map.slot_backups_size(),
                                  " backups; want ", kNumSlots, " of each"));
  }
  if (map.server_index() >= static_cast<uint32_t>(n)) {
    return Malformed(absl::StrCat("server index ", map.server_index(), " of ", n, " servers"));
  }
  ReplicaRoles roles;
  roles.self = map.servers(map.server_index());
  roles.primaries.resize(kNumSlots);
  roles.backups.resize(kNumSlots);
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    const uint32_t owner = map.slot_owners_size() == 0 ? s % n : map.slot_owners(s);
    const uint32_t backup = map.slot_backups(s);
    if (owner >= static_cast<uint32_t>(n) || backup >= static_cast<uint32_t>(n) ||
        owner == backup) {
      return Malformed(absl::StrCat("slot ", s, ": owner ", owner, ", backup ", backup, " of ", n,
                                    " servers (the backup must be another server)"));
    }
    if (backup == map.server_index()) roles.primaries[s] = map.servers(owner);
    if (owner == map.server_index()) roles.backups[s] = map.servers(backup);
  }
  return roles;
}

absl::Status CheckReplicable(const std::vector<v1::TableSpec>& tables) {
  for (const v1::TableSpec& t : tables) {
    if (t.eviction().has_max_rows() || t.tier().disk()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table ", t.name(), " (id ", t.table_id(), ") of job ", t.job_id(),
          " has eviction.max_rows or a disk tier: not available with replication.replicas (a "
          "backup's rows would count against the cap and evict the server's own rows)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ps
