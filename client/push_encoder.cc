#include "client/push_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "client/rpc_client.h"
#include "common/packed_bytes.h"
#include "common/value_codec.h"

namespace ps {

namespace {

// How a block's keys lie in the table.
struct BlockKeys {
  uint64_t max = 0;
  // Keys k, k + 1, ...: their rows of the residual and velocity are one span.
  bool one_span = true;
  // Per row: its key came earlier in the block (a key pushed twice takes what is held of it
  // once, with its first row). Empty if no key did.
  std::vector<bool> repeated;
};

BlockKeys SurveyKeys(const TableOp& op, const KeySegment& seg) {
  BlockKeys keys;
  const uint64_t first = seg.idx.empty() ? 0 : op.keys[seg.idx[0]];
  for (size_t j = 0; j < seg.idx.size(); ++j) {
    const uint64_t key = op.keys[seg.idx[j]];
    keys.max = std::max(keys.max, key);
    keys.one_span &= key == first + j;
  }
  return keys;
}

// Marks the rows whose key came earlier in the block (none can in one span).
void FindRepeats(const TableOp& op, const KeySegment& seg, BlockKeys* keys) {
  if (keys->one_span) return;
  absl::flat_hash_set<uint64_t> seen;
  seen.reserve(seg.idx.size());
  std::vector<bool> repeated(seg.idx.size(), false);
  bool any = false;
  for (size_t j = 0; j < seg.idx.size(); ++j) {
    repeated[j] = !seen.insert(op.keys[seg.idx[j]]).second;
    any |= repeated[j];
  }
  if (any) keys->repeated = std::move(repeated);
}

// The gradients of seg's rows, one row after another.
void GatherGradients(const TableOp& op, const KeySegment& seg, size_t row, float* values) {
  for (size_t j = 0; j < seg.idx.size(); ++j) {
    std::memcpy(values + j * row, op.grads + seg.idx[j] * row, row * sizeof(float));
  }
}

// Each row's gradient plus what is held of its key, m times its velocity and its residual (a
// repeated key's rows after the first add zeros), into `values`. With momentum, `shares`
// receives gradient + m times velocity: the velocity to keep of what is not sent.
void AddHeld(const TableOp& op, const KeySegment& seg, size_t row, const BlockKeys& keys, float m,
             const float* velocity, const float* residual, float* values, float* shares) {
  const std::vector<float> zeros(keys.repeated.empty() ? 0 : row, 0.0f);
  for (size_t j = 0; j < seg.idx.size(); ++j) {
    const bool repeated = !keys.repeated.empty() && keys.repeated[j];
    const size_t at = op.keys[seg.idx[j]] * row;
    const float* g = op.grads + seg.idx[j] * row;
    const float* old = repeated ? zeros.data() : residual + at;
    float* v = values + j * row;
    if (m == 0.0f) {
      for (size_t k = 0; k < row; ++k) v[k] = g[k] + old[k];
      continue;
    }
    const float* u = repeated ? zeros.data() : velocity + at;
    float* s = shares + j * row;
    for (size_t k = 0; k < row; ++k) s[k] = g[k] + m * u[k];
    for (size_t k = 0; k < row; ++k) v[k] = s[k] + old[k];
  }
}

// Replaces what `table` (residual or velocity, a row per key) holds of seg's keys by `rows`,
// one row per key of the block (a repeated key's rows are summed).
void StoreRows(const float* rows, const TableOp& op, const KeySegment& seg, size_t row,
               const BlockKeys& keys, float* table) {
  if (seg.idx.empty()) return;
  if (keys.one_span) {
    std::memcpy(table + op.keys[seg.idx[0]] * row, rows, seg.idx.size() * row * sizeof(float));
    return;
  }
  for (const uint32_t i : seg.idx) std::fill_n(table + op.keys[i] * row, row, 0.0f);
  for (size_t j = 0; j < seg.idx.size(); ++j) {
    float* to = table + op.keys[seg.idx[j]] * row;
    for (size_t k = 0; k < row; ++k) to[k] += rows[j * row + k];
  }
}

// Rows held per key (residual, velocity, push counts) for keys up to a block's largest.
template <typename T>
void GrowTo(size_t size, std::vector<T>* held) {
  if (held->size() < size) held->resize(size, T{});
}

// `codec` with the warm-up's ratio for the block's least pushed row.
v1::CodecSpec WarmedUp(const v1::CodecSpec& codec, const TableOp& op, const KeySegment& seg,
                       const std::vector<uint32_t>& pushes) {
  uint32_t least = std::numeric_limits<uint32_t>::max();
  for (const uint32_t i : seg.idx) least = std::min(least, pushes[op.keys[i]]);
  v1::CodecSpec spec = codec;
  spec.set_ratio(PushEncoder::WarmupRatio(codec, least));
  return spec;
}

// Zeroes values[i] for every index i a TOPK block sends (its format: common/value_codec.cc).
void ClearSent(const std::string& block, float* values) {
  uint32_t k;
  std::memcpy(&k, block.data() + 4, sizeof(k));
  const char* idx = block.data() + 8;
  for (uint32_t j = 0; j < k; ++j) {
    uint32_t i;
    std::memcpy(&i, idx + size_t{j} * sizeof(i), sizeof(i));
    values[i] = 0.0f;
  }
}

// After a block is encoded: its rows count one more push, up to the warm-up's length.
void CountPush(const TableOp& op, const KeySegment& seg, uint32_t warmup,
               std::vector<uint32_t>* pushes) {
  for (const uint32_t j : seg.idx) {
    uint32_t& c = (*pushes)[op.keys[j]];
    if (c < warmup) ++c;
  }
}

}  // namespace

PushEncoder::Residual* PushEncoder::ResidualOf(uint32_t table_id) {
  absl::MutexLock l(&mu_);
  std::unique_ptr<Residual>& r = residuals_[table_id];
  if (r == nullptr) r = std::make_unique<Residual>();
  return r.get();
}

void PushEncoder::Encode(const v1::CodecSpec& codec, const TableOp& op, int dim, uint64_t num_rows,
                         KeySegment* seg) {
  seg->codec = codec.codec();
  seg->momentum = codec.codec() == v1::CODEC_TOPK ? codec.momentum() : 0.0f;
  seg->encoded.clear();
  if (codec.codec() == v1::CODEC_NONE) return;
  const size_t row = static_cast<size_t>(dim), n = seg->idx.size() * row;
  // The block's values: every one is written below, so the buffer is not zeroed first.
  std::unique_ptr<float[]> buffer(new float[n]);
  float* const values = buffer.get();
  const absl::Span<const float> block(values, n);
  seg->encoded.reserve(EncodedBytes(codec, n));
  BlockKeys keys = SurveyKeys(op, *seg);
  if (!KeepsResidual(codec.codec()) || keys.max >= num_rows) {
    GatherGradients(op, *seg, row, values);
    EncodeValueBlock(codec, block, &seg->encoded);  // no error feedback
    return;
  }
  FindRepeats(op, *seg, &keys);
  Residual* r = ResidualOf(op.table_id);
  absl::MutexLock l(&r->mu);
  const bool topk = codec.codec() == v1::CODEC_TOPK;
  const float m = topk ? codec.momentum() : 0.0f;
  const uint32_t warmup = topk ? codec.warmup_steps() : 0;
  GrowTo((keys.max + 1) * row, &r->values);
  if (m != 0.0f) GrowTo((keys.max + 1) * row, &r->velocity);
  if (warmup != 0) GrowTo(keys.max + 1, &r->pushes);
  const v1::CodecSpec spec = warmup != 0 ? WarmedUp(codec, op, *seg, r->pushes) : codec;
  std::unique_ptr<float[]> shares(m != 0.0f ? new float[n] : nullptr);
  AddHeld(op, *seg, row, keys, m, r->velocity.data(), r->values.data(), values, shares.get());
  if (!AllFinite(block)) {
    // Sent as it is (the servers refuse it); the residual and velocity are left as they were,
    // not poisoned. (A finite gradient can get here only by overflowing with what is held.)
    EncodeValueBlock(codec, block, &seg->encoded);
    return;
  }
  // What is not sent is the new residual: written straight into it where the rows are one span.
  float* const kept = keys.one_span && n > 0 ? &r->values[op.keys[seg->idx[0]] * row] : values;
  EncodeValueBlock(spec, block, &seg->encoded, kept);
  if (kept == values) StoreRows(values, op, *seg, row, keys, r->values.data());
  if (warmup != 0) CountPush(op, *seg, warmup, &r->pushes);
  if (m == 0.0f) return;
  ClearSent(seg->encoded, shares.get());  // momentum factor masking
  StoreRows(shares.get(), op, *seg, row, keys, r->velocity.data());
}

float PushEncoder::WarmupRatio(const v1::CodecSpec& codec, uint32_t pushes) {
  const uint32_t warmup = codec.warmup_steps();
  if (pushes >= warmup) return codec.ratio();
  const double exponent = (static_cast<double>(pushes) + 1) / (static_cast<double>(warmup) + 1);
  return static_cast<float>(std::pow(static_cast<double>(codec.ratio()), exponent));
}

void PushEncoder::Reset() {
  absl::MutexLock l(&mu_);
  for (auto& [id, r] : residuals_) {
    absl::MutexLock rl(&r->mu);
    std::fill(r->values.begin(), r->values.end(), 0.0f);
    std::fill(r->velocity.begin(), r->velocity.end(), 0.0f);
  }
}

double PushEncoder::ResidualL1(uint32_t table_id) { return SumAbs(table_id, false); }

double PushEncoder::VelocityL1(uint32_t table_id) { return SumAbs(table_id, true); }

double PushEncoder::SumAbs(uint32_t table_id, bool velocity) {
  Residual* r = ResidualOf(table_id);
  absl::MutexLock l(&r->mu);
  double sum = 0;
  for (float v : velocity ? r->velocity : r->values) sum += std::fabs(v);
  return sum;
}

}  // namespace ps
