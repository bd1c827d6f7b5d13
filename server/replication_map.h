// What a job's replica map (ConfigureJobRequest.replicas) means for the server receiving it.
#ifndef PS_SERVER_REPLICATION_MAP_H_
#define PS_SERVER_REPLICATION_MAP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/v1/parameter_server.pb.h"

namespace ps {

struct ReplicaRoles {
  std::string self;                    // this server's address in the job's server list
  std::vector<std::string> primaries;  // kNumSlots: the primary of each slot backed up here
  std::vector<std::string> backups;    // kNumSlots: the backup of each slot owned here
};

// The roles of server `map.server_index()`. INVALID_ARGUMENT for a malformed map: no servers or
// more than kMaxServers, owners or backups not kNumSlots entries (owners may be empty: slot s
// on server s % n), an index out of range, or a slot whose backup is its owner.
absl::StatusOr<ReplicaRoles> ResolveReplicaMap(const v1::ReplicaMap& map);

// INVALID_ARGUMENT, naming the table, if one of a job's `tables` cannot be replicated: a cap on
// its rows (eviction.max_rows) or a disk tier (a backup's rows would count against the cap).
absl::Status CheckReplicable(const std::vector<v1::TableSpec>& tables);

}  // namespace ps

#endif  // PS_SERVER_REPLICATION_MAP_H_
