#include "client/pull_cache.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/value_codec.h"
#include "client/rpc_client.h"

namespace ps {
namespace {

// The server table object a token is of (its upper half).
uint32_t InstanceOf(uint64_t token) { return static_cast<uint32_t>(token >> 32); }

// Whether a row holding `held` should take an answer with token `token`: not where it holds a
// newer answer of the same server table (answers of overlapping pulls may arrive out of order;
// tokens only grow within a table object).
bool Takes(uint64_t held, uint64_t token) {
  return held == 0 || InstanceOf(held) != InstanceOf(token) || held <= token;
}

}  // namespace

PullCache::Table* PullCache::TableOf(uint32_t table_id) {
  absl::MutexLock l(&mu_);
  std::unique_ptr<Table>& t = tables_[table_id];
  if (t == nullptr) t = std::make_unique<Table>();
  return t.get();
}

void PullCache::Table::Reserve(int d, uint64_t num_rows) {
  if (tokens.size() == num_rows && dim == d) return;
  // First use, or the table changed shape (created again): nothing held.
  dim = d;
  values.assign(num_rows * static_cast<size_t>(d), 0.0f);
  tokens.assign(num_rows, 0);
}

uint64_t PullCache::Since(const TableOp& op, const KeySegment& seg, int dim, uint64_t num_rows) {
  if (seg.idx.empty()) return 0;
  Table* t = TableOf(op.table_id);
  absl::MutexLock l(&t->mu);
  if (t->tokens.size() != num_rows || t->dim != dim) return 0;
  uint64_t since = std::numeric_limits<uint64_t>::max();
  for (uint32_t i : seg.idx) {
    const uint64_t key = op.keys[i];
    if (key >= num_rows) return 0;
    const uint64_t token = t->tokens[key];
    // 0: not held; another server table's (the rows moved, or the table is another object).
    if (token == 0 ||
        (since != std::numeric_limits<uint64_t>::max() && InstanceOf(token) != InstanceOf(since))) {
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
  t->Reserve(dim, num_rows);
  const size_t row = static_cast<size_t>(dim);
  for (uint32_t i : seg.idx) {
    const uint64_t key = op.keys[i];
    if (key >= num_rows) continue;  // (the servers refuse such keys)
    float* held = &t->values[key * row];
    if (token != 0 && !Takes(t->tokens[key], token)) {
      // A newer answer came first: the caller gets it too.
      std::memcpy(op.out + i * row, held, row * sizeof(float));
      continue;
    }
    std::memcpy(held, op.out + i * row, row * sizeof(float));
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
  if (seg.since == 0 || token == 0 || InstanceOf(token) != InstanceOf(seg.since)) {
    return absl::InternalError(
        "malformed pull answer: a delta block answers a block sent without a token of its table");
  }
  Table* t = TableOf(op.table_id);
  absl::MutexLock l(&t->mu);
  if (t->tokens.size() != num_rows || t->dim != dim) {
    return absl::InternalError("malformed pull answer: a delta block for rows not held");
  }
  for (uint32_t i : seg.idx) {
    if (op.keys[i] >= num_rows) {
      return absl::InternalError(
          absl::StrCat("malformed pull answer: a delta block answers row ", op.keys[i]));
    }
  }
  // Per row: apply where the row holds what the request's token said (or newer, up to this
  // answer); keep a newer answer's; where another pull replaced the row meanwhile with another
  // server table's values (rows moved), those are kept and the row must be pulled whole next.
  enum class Fate : uint8_t { kApply, kKeep, kForget };
  std::vector<Fate> fate(seg.idx.size());
  for (size_t r = 0; r < seg.idx.size(); ++r) {
    const uint64_t held = t->tokens[op.keys[seg.idx[r]]];
    if (held == 0 || InstanceOf(held) != InstanceOf(token) || held < seg.since) {
      fate[r] = Fate::kForget;
    } else {
      fate[r] = held <= token ? Fate::kApply : Fate::kKeep;
    }
  }
  for (size_t j = 0; j < indices.size(); ++j) {
    const size_t r = indices[j] / row;
    if (fate[r] != Fate::kApply) continue;
    t->values[op.keys[seg.idx[r]] * row + indices[j] % row] = values[j];
  }
  for (size_t r = 0; r < seg.idx.size(); ++r) {
    const uint32_t i = seg.idx[r];
    const uint64_t key = op.keys[i];
    std::memcpy(op.out + i * row, &t->values[key * row], row * sizeof(float));
    if (fate[r] == Fate::kApply) t->tokens[key] = token;
    if (fate[r] == Fate::kForget) t->tokens[key] = 0;
  }
  return absl::OkStatus();
}

}  // namespace ps
