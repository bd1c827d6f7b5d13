// A hash of a job's dense parameters as the servers hold them: two runs that end with the same
// bits have the same digest (tests compare an undisturbed run with one that lost a server).
#ifndef PS_WORKER_DAEMON_PARAMS_DIGEST_H_
#define PS_WORKER_DAEMON_PARAMS_DIGEST_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "client/rpc_client.h"
#include "ps/v1/types.pb.h"

namespace ps {

// Pulls every row of the DENSE tables among `tables` (at the client's clock, in table order)
// and hashes their values' bytes (FNV-1a, 64 bits), keeping the low 48 bits: a double holds
// it exactly (WorkerProgress.metrics). Sparse tables are left out (their keys are unknown).
absl::StatusOr<uint64_t> ParamsDigest(RpcClient* client, const std::vector<v1::TableSpec>& tables);

}  // namespace ps

#endif  // PS_WORKER_DAEMON_PARAMS_DIGEST_H_
