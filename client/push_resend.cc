#include "client/push_resend.h"

#include <utility>

#include "common/shard_map.h"

namespace ps {

std::optional<InFlightPush> CopyFailedPushPull(const RpcClient& client) {
  std::optional<RpcClient::FailedPush> failed = client.FailedPushPull();
  if (!failed.has_value()) return std::nullopt;
  InFlightPush push;
  push.clock = failed->clock;
  push.lr_scale = failed->lr_scale;
  for (size_t i = 0; i < failed->ops.size(); ++i) {
    const TableOp& op = failed->ops[i];
    InFlightPush::Table& t = push.tables.emplace_back();
    t.table_id = op.table_id;
    t.dim = failed->dims[i];
    t.keys.assign(op.keys.begin(), op.keys.end());
    if (op.grads != nullptr) t.grads.assign(op.grads, op.grads + op.keys.size() * t.dim);
  }
  const ShardMap& map = client.shard_map();
  push.slot_servers.reserve(kNumSlots);
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    push.slot_servers.push_back(map.servers()[map.OwnerOfSlot(s)]);
  }
  return push;
}

absl::Status ResendMovedSlots(RpcClient& client, const InFlightPush& push) {
  if (push.slot_servers.size() != kNumSlots) return absl::OkStatus();
  const ShardMap& map = client.shard_map();
  std::vector<bool> moved(kNumSlots, false);
  bool any = false;
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    moved[s] = push.slot_servers[s] != map.servers()[map.OwnerOfSlot(s)];
    any = any || moved[s];
  }
  if (!any) return absl::OkStatus();
  // The moved keys of each table and their gradients (owned here until the push is answered).
  std::vector<InFlightPush::Table> kept;
  for (const InFlightPush::Table& t : push.tables) {
    auto spec = client.DescribeTable(t.table_id);
    if (spec.ok() && spec->push_codec().codec() != v1::CODEC_NONE) continue;
    InFlightPush::Table& k = kept.emplace_back();
    k.table_id = t.table_id;
    k.dim = t.dim;
    for (size_t i = 0; i < t.keys.size(); ++i) {
      if (!moved[SlotOf(t.table_id, t.keys[i])]) continue;
      k.keys.push_back(t.keys[i]);
      if (!t.grads.empty()) {
        k.grads.insert(k.grads.end(), t.grads.begin() + i * t.dim,
                       t.grads.begin() + (i + 1) * t.dim);
      }
    }
  }
  std::vector<TableOp> ops;
  for (const InFlightPush::Table& k : kept) {
    if (k.keys.empty() || k.grads.empty()) continue;
    ops.push_back(TableOp{k.table_id, k.keys, k.grads.data(), nullptr});
  }
  const int64_t clock = client.clock();
  client.SetClock(push.clock);
  client.SetLearningRateScale(push.lr_scale);
  absl::Status s = client.StartPush(std::move(ops), /*caller_waits=*/true, /*resend=*/true).Wait();
  client.SetClock(clock);
  return s;
}

}  // namespace ps
