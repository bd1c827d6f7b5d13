// What the cluster's members prove themselves with: node secrets (handed out by the scheduler at
// registration), checked addresses, and keyed digests (HMAC-SHA256) that let a daemon vouch for
// what it did (a server for the checkpoint shard it wrote) to the scheduler, which holds the key,
// and the scheduler for the restore orders it gave (to the servers, which hold the cluster token).
#ifndef PS_COMMON_NODE_IDENTITY_H_
#define PS_COMMON_NODE_IDENTITY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ps/v1/checkpoint.pb.h"

namespace ps {

// A fresh secret: 32 random bytes from the kernel, as 64 hex digits.
std::string NewSecret();

// HMAC-SHA256 of `message` under `key`, as 64 hex digits.
std::string HmacSha256Hex(absl::string_view key, absl::string_view message);

// A server's receipt for its shard of a checkpoint: HMAC-SHA256 under its node secret of what it
// wrote. Empty when `node_secret` is (a server that never registered).
std::string CheckpointReceipt(absl::string_view node_secret, absl::string_view job_id,
                              uint64_t checkpoint_id, uint64_t rows, uint64_t bytes);

// The scheduler's signature of restore order `order` for job `job_id`: HMAC-SHA256 under the
// cluster token of the job id and of what the order makes a server do: its shard epoch, source
// job, checkpoint id, clock, rollback and slots, and each shard's server index, node, path and
// slots (not the reason, nor a shard's address, rows, bytes or receipt, which change nothing;
// nor the signature field itself). Empty when `cluster_token` is.
std::string RestoreOrderSignature(absl::string_view cluster_token, absl::string_view job_id,
                                  const v1::RestoreOrder& order);

// INVALID_ARGUMENT naming `field` unless `address` is "host:port" or "[v6]:port": a host of
// letters, digits, '-', '_' and '.' (a name or an IPv4 address) or an IPv6 address in brackets,
// and a port in 1..65535.
absl::Status ValidateHostPort(absl::string_view field, absl::string_view address);

}  // namespace ps

#endif  // PS_COMMON_NODE_IDENTITY_H_
