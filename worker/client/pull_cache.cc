#include "worker/client/pull_cache.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/value_codec.h"
#include "worker/client/rpc_client.h"

namespace ps {
namespace {

// Sizes the copy for `num_rows` rows of `dim` values (the first time).
void Reserve(std::vector<float>& values, std::vector<uint64_t>& tokens, int dim,
             uint64_t num_rows) {
  if (tokens.size() == num_rows) return;
  values.assign(num_rows * static_cast<size_t>(dim), 0.0f);
  tokens.assign(num_rows, 0);
}

}  // namespace

PullCache::Table* PullCache::TableOf(uint32_t table_id) {
  absl::MutexLock l(&mu_);
  std::unique_ptr<Table>& t = tables_[table_id];
  if (t == nullptr) t = std::make_unique<Table>();
  return t.get();
}

uint64_t PullCache::Since(const TableOp& op, const KeySegment& seg, int dim, uint64_t num_rows) {
  if (seg.idx.empty()) return 0;
  Table* t = TableOf(op.table_id);
  absl::MutexLock l(&t->mu);
  if (t->tokens.size() != num_rows) return 0;
  uint64_t since = std::numeric_limits<uint64_t>::max();
  for (uint32_t i : seg.idx) {
    const uint64_t key = op.keys[i];
    if (key >= num_rows) return 0;
    const uint64_t token = t->tokens[key];
    // 0: not held; another server's table (its upper half): the rows moved or were answered by
    // another instance of the table.
    if (token == 0 ||
        (since != std::numeric_limits<uint64_t>::max() && (token >> 32) != (since >> 32))) {
      return 0;
    }
    since = std::min(since, token);
  }
  return since;
}

void PullCache::StoreWhole(const TableOp& op, const KeySegment& seg, int dim, uint64_t num_rows,
                           uint64_t token) {
  Table* t = TableOf(op.table_id);
  absl::MutexLock l(&t->mu);
  Reserve(t->values, t->tokens, dim, num_rows);
  const size_t row = static_cast<size_t>(dim);
  for (uint32_t i : seg.idx) {
    const uint64_t key = op.keys[i];
    if (key >= num_rows) continue;  // (the servers refuse such keys)
    std::memcpy(&t->values[key * row], op.out + i * row, row * sizeof(float));
    t->tokens[key] = token;
  }
}

absl::Status PullCache::ApplyDelta(const TableOp& op, const KeySegment& seg, int dim,
                                   uint64_t num_rows, absl::string_view bytes, uint64_t token) {
  const size_t row = static_cast<size_t>(dim);
  const size_t n = seg.idx.size() * row;
  std::vector<uint32_t> indices;
  std::vector<float> values;
  if (absl::Status s = DecodeDeltaBlock(seg.codec, bytes, n, &indices, &values); !s.ok()) {
    return absl::InternalError(absl::StrCat("malformed pull answer: ", s.message()));
  }
  Table* t = TableOf(op.table_id);
  absl::MutexLock l(&t->mu);
  if (seg.since == 0 || t->tokens.size() != num_rows) {
    return absl::InternalError(
        "malformed pull answer: a delta block answers a block sent without a token");
  }
  for (uint32_t i : seg.idx) {
    if (op.keys[i] >= num_rows || t->tokens[op.keys[i]] == 0) {
      return absl::InternalError(absl::StrCat("malformed pull answer: a delta block answers row ",
                                              op.keys[i], ", which this client does not hold"));
    }
  }
  for (size_t j = 0; j < indices.size(); ++j) {
    const uint64_t key = op.keys[seg.idx[indices[j] / row]];
    t->values[key * row + indices[j] % row] = values[j];
  }
  for (uint32_t i : seg.idx) {
    const uint64_t key = op.keys[i];
    std::memcpy(op.out + i * row, &t->values[key * row], row * sizeof(float));
    t->tokens[key] = token;
  }
  return absl::OkStatus();
}

void PullCache::Clear() {
  absl::MutexLock l(&mu_);
  tables_.clear();
}

}  // namespace ps
