#include "worker/client/push_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
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
  const size_t row = static_cast<size_t>(dim);
  std::vector<float> values(seg->idx.size() * row);
  for (size_t j = 0; j < seg->idx.size(); ++j) {
    std::memcpy(&values[j * row], op.grads + seg->idx[j] * row, row * sizeof(float));
  }
  seg->encoded.reserve(EncodedBytes(codec, values.size()));
  uint64_t max_key = 0;
  for (uint32_t i : seg->idx) max_key = std::max(max_key, op.keys[i]);
  if (!KeepsResidual(codec.codec()) || max_key >= num_rows) {
    EncodeValueBlock(codec, values, &seg->encoded);
    return;
  }
  Residual* r = ResidualOf(op.table_id);
  absl::MutexLock l(&r->mu);
  if (r->values.size() < (max_key + 1) * row) r->values.resize((max_key + 1) * row, 0.0f);
  // A key pushed twice takes its residual once: taken (zeroed) by its first occurrence.
  for (size_t j = 0; j < seg->idx.size(); ++j) {
    float* res = &r->values[op.keys[seg->idx[j]] * row];
    for (size_t k = 0; k < row; ++k) values[j * row + k] += std::exchange(res[k], 0.0f);
  }
  if (!AllFinite(values)) {
    // Sent as it is (the servers refuse it); the residual is left as it was, not poisoned.
    EncodeValueBlock(codec, values, &seg->encoded);
    return;
  }
  EncodeValueBlock(codec, values, &seg->encoded, values.data());  // values: now the residual
  for (size_t j = 0; j < seg->idx.size(); ++j) {
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
