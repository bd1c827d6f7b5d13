#include "worker/client/push_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>

#include "common/codec.h"
#include "common/value_codec.h"
#include "worker/client/rpc_client.h"

namespace ps {

PushEncoder::Residual* PushEncoder::ResidualOf(uint32_t table_id) {
  absl::MutexLock l(&mu_);
  std::unique_ptr<Residual>& r = residuals_[table_id];
  if (r == nullptr) r = std::make_unique<Residual>();
  return r.get();
}

void PushEncoder::Encode(const v1::CodecSpec& codec, const TableOp& op, int dim, uint64_t num_rows,
                         KeySegment* seg) {
  seg->codec = codec.codec();
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
  if (r->values.size() < (max_key + 1) * row) r->values.resize((max_key + 1) * row, 0.0f);
  if (consecutive) {
    // One pass adds the residual to the gradients; the encoder writes the new residual in place.
    float* const res = r->values.data() + first * row;
    for (size_t j = 0; j < rows; ++j) {
      const float* g = op.grads + seg->idx[j] * row;
      float* v = values + j * row;
      const float* old = res + j * row;
      for (size_t k = 0; k < row; ++k) v[k] = g[k] + old[k];
    }
    if (!AllFinite(block)) {
      // Sent as it is (the servers refuse it); the residual is left as it was, not poisoned.
      EncodeValueBlock(codec, block, &seg->encoded);
      return;
    }
    EncodeValueBlock(codec, block, &seg->encoded, res);
    return;
  }
  gather();
  if (!AllFinite(block)) {
    EncodeValueBlock(codec, block, &seg->encoded);  // refused by the servers; residual kept
    return;
  }
  // A key pushed twice takes its residual once: taken (zeroed) by its first occurrence.
  for (size_t j = 0; j < rows; ++j) {
    float* res = &r->values[op.keys[seg->idx[j]] * row];
    for (size_t k = 0; k < row; ++k) values[j * row + k] += std::exchange(res[k], 0.0f);
  }
  // The residual is finite, so the sum is too unless it overflows; then it is sent as it is
  // and what the residual held of those rows is lost with it.
  if (!AllFinite(block)) {
    EncodeValueBlock(codec, block, &seg->encoded);
    return;
  }
  EncodeValueBlock(codec, block, &seg->encoded, values);  // values: now the residual
  for (size_t j = 0; j < rows; ++j) {
    float* res = &r->values[op.keys[seg->idx[j]] * row];
    for (size_t k = 0; k < row; ++k) res[k] += values[j * row + k];
  }
}

void PushEncoder::Reset() {
  absl::MutexLock l(&mu_);
  for (auto& [id, r] : residuals_) {
    absl::MutexLock rl(&r->mu);
    std::fill(r->values.begin(), r->values.end(), 0.0f);
  }
}

double PushEncoder::ResidualL1(uint32_t table_id) {
  Residual* r = ResidualOf(table_id);
  absl::MutexLock l(&r->mu);
  double sum = 0;
  for (float v : r->values) sum += std::fabs(v);
  return sum;
}

}  // namespace ps
