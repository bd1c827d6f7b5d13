#include "client/push_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "common/codec.h"
#include "common/value_codec.h"
#include "client/rpc_client.h"

namespace ps {

namespace {

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
  const size_t row = static_cast<size_t>(dim), rows = seg->idx.size();
  // The block's values: every one is written below, so the buffer is not zeroed first.
  std::unique_ptr<float[]> buffer(new float[rows * row]);
  float* const values = buffer.get();
  const absl::Span<const float> block(values, rows * row);
  auto gather = [&] {
    for (size_t j = 0; j < rows; ++j) {
      std::memcpy(values + j * row, op.grads + seg->idx[j] * row, row * sizeof(float));
    }
  };
  seg->encoded.reserve(EncodedBytes(codec, block.size()));
  uint64_t max_key = 0;
  bool consecutive = true;  // keys k, k + 1, ...: their residual rows are one span
  const uint64_t first = rows == 0 ? 0 : op.keys[seg->idx[0]];
  for (size_t j = 0; j < rows; ++j) {
    const uint64_t key = op.keys[seg->idx[j]];
    max_key = std::max(max_key, key);
    consecutive &= key == first + j;
  }
  if (!KeepsResidual(codec.codec()) || max_key >= num_rows) {
    gather();
    EncodeValueBlock(codec, block, &seg->encoded);
    return;
  }
  Residual* r = ResidualOf(op.table_id);
  absl::MutexLock l(&r->mu);
  const bool topk = codec.codec() == v1::CODEC_TOPK;
  const float m = topk ? codec.momentum() : 0.0f;
  const uint32_t warmup = topk ? codec.warmup_steps() : 0;
  if (r->values.size() < (max_key + 1) * row) r->values.resize((max_key + 1) * row, 0.0f);
  if (m != 0.0f && r->velocity.size() < (max_key + 1) * row) {
    r->velocity.resize((max_key + 1) * row, 0.0f);
  }
  v1::CodecSpec spec = codec;  // with the warm-up's ratio
  if (warmup != 0) {
    if (r->pushes.size() < max_key + 1) r->pushes.resize(max_key + 1, 0);
    uint32_t pushes = std::numeric_limits<uint32_t>::max();  // the block's least pushed row's
    for (size_t j = 0; j < rows; ++j) pushes = std::min(pushes, r->pushes[op.keys[seg->idx[j]]]);
    spec.set_ratio(WarmupRatio(codec, pushes));
  }
  if (consecutive) {
    // One pass adds the residual (and the momentum's share of the velocity) to the gradients;
    // the encoder writes the new residual in place.
    float* const res = r->values.data() + first * row;
    float* const vel = m != 0.0f ? r->velocity.data() + first * row : nullptr;
    for (size_t j = 0; j < rows; ++j) {
      const float* g = op.grads + seg->idx[j] * row;
      float* v = values + j * row;
      const float* old = res + j * row;
      if (vel == nullptr) {
        for (size_t k = 0; k < row; ++k) v[k] = g[k] + old[k];
      } else {
        const float* u = vel + j * row;
        for (size_t k = 0; k < row; ++k) v[k] = g[k] + m * u[k] + old[k];
      }
    }
    if (!AllFinite(block)) {
      // Sent as it is (the servers refuse it); the residual and velocity are left as they
      // were, not poisoned.
      EncodeValueBlock(codec, block, &seg->encoded);
      return;
    }
    EncodeValueBlock(spec, block, &seg->encoded, res);
    if (warmup != 0) CountPush(op, *seg, warmup, &r->pushes);
    if (vel == nullptr) return;
    for (size_t j = 0; j < rows; ++j) {
      const float* g = op.grads + seg->idx[j] * row;
      float* u = vel + j * row;
      for (size_t k = 0; k < row; ++k) u[k] = m * u[k] + g[k];
    }
    ClearSent(seg->encoded, vel);  // momentum factor masking
    return;
  }
  gather();
  if (!AllFinite(block)) {
    EncodeValueBlock(codec, block, &seg->encoded);  // refused by the servers; residual kept
    return;
  }
  // A key pushed twice takes its residual and velocity once: taken (zeroed) by its first
  // occurrence. With momentum, `values` become the velocities' shares u = m * velocity +
  // gradient, kept in `shares` to be added back to the velocity of what is not sent.
  std::unique_ptr<float[]> shares;
  if (m != 0.0f) {
    shares.reset(new float[rows * row]);
    for (size_t j = 0; j < rows; ++j) {
      float* u = &r->velocity[op.keys[seg->idx[j]] * row];
      float* v = values + j * row;
      for (size_t k = 0; k < row; ++k) v[k] += m * std::exchange(u[k], 0.0f);
    }
    std::memcpy(shares.get(), values, rows * row * sizeof(float));
  }
  for (size_t j = 0; j < rows; ++j) {
    float* res = &r->values[op.keys[seg->idx[j]] * row];
    for (size_t k = 0; k < row; ++k) values[j * row + k] += std::exchange(res[k], 0.0f);
  }
  // The residual is finite, so the sum is too unless it overflows; then it is sent as it is
  // and what the residual and velocity held of those rows is lost with it.
  if (!AllFinite(block)) {
    EncodeValueBlock(codec, block, &seg->encoded);
    return;
  }
  EncodeValueBlock(spec, block, &seg->encoded, values);  // values: now the residual
  if (warmup != 0) CountPush(op, *seg, warmup, &r->pushes);
  for (size_t j = 0; j < rows; ++j) {
    float* res = &r->values[op.keys[seg->idx[j]] * row];
    for (size_t k = 0; k < row; ++k) res[k] += values[j * row + k];
  }
  if (shares == nullptr) return;
  ClearSent(seg->encoded, shares.get());
  for (size_t j = 0; j < rows; ++j) {
    float* u = &r->velocity[op.keys[seg->idx[j]] * row];
    for (size_t k = 0; k < row; ++k) u[k] += shares[j * row + k];
  }
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
