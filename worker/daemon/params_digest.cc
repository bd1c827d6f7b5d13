#include "worker/daemon/params_digest.h"

#include <cstring>

#include "common/status_macros.h"

namespace ps {

absl::StatusOr<uint64_t> ParamsDigest(RpcClient* client, const std::vector<v1::TableSpec>& tables) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a offset basis
  for (const v1::TableSpec& table : tables) {
    if (table.kind() != v1::DENSE) continue;
    const std::vector<uint64_t> keys = DenseKeys(table.num_rows());
    std::vector<float> values(keys.size() * table.dim());
    PS_RETURN_IF_ERROR(client->Pull({TableOp{table.table_id(), keys, nullptr, values.data()}}));
    const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
    for (size_t i = 0; i < values.size() * sizeof(float); ++i) {
      hash = (hash ^ bytes[i]) * 1099511628211ull;  // FNV prime
    }
  }
  return hash & ((uint64_t{1} << 48) - 1);
}

}  // namespace ps
