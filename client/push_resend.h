// Failover (JobSpec.replication, sync jobs): the push of the clock in flight when a server died
// is sent again, under the new shard map, for the slots that moved to the dead server's backups
// (PushRequest.resend_parts). Their new owners apply it once per worker and hold pulls past
// that clock until every worker that owes one re-sent it (server/consistency_gate.h).
#ifndef PS_CLIENT_PUSH_RESEND_H_
#define PS_CLIENT_PUSH_RESEND_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/rpc_client.h"

namespace ps {

// A failed PushPull's push, copied out of the caller's buffers, with the map it was sent under.
struct InFlightPush {
  int64_t clock = 0;
  float lr_scale = 1.0f;
  struct Table {
    uint32_t table_id = 0;
    int dim = 0;
    std::vector<uint64_t> keys;
    std::vector<float> grads;  // keys.size() * dim
  };
  std::vector<Table> tables;
  // The address of each slot's server in that map (kNumSlots entries).
  std::vector<std::string> slot_servers;
};

// The push of `client`'s last PushPull if it failed (RpcClient::FailedPushPull), copied; call
// it before the caller's gradient buffers are reused.
std::optional<InFlightPush> CopyFailedPushPull(const RpcClient& client);

// Sends `push` again through `client` (a newer shard map), for the keys of the slots whose
// server changed since `push`'s map, to every server (an empty part where it has none of
// them); waits for the answers. Nothing is sent where no slot moved. Tables pushed with a
// codec are left out (their error feedback would count the re-sent values twice).
absl::Status ResendMovedSlots(RpcClient& client, const InFlightPush& push);

}  // namespace ps

#endif  // PS_CLIENT_PUSH_RESEND_H_
