// Test support: spam_logreg's training step straight from its definition, in double, and random
// batches, for the parity tests of SpamBackendStep (worker/spam_step.h) on each backend.
//
// Tolerance for a backend computing in FP32: every margin z is a sum of at most F weights, off
// by at most (F + 2) eps_fp32 * sum |terms|; the loss and g = (sigmoid(z) - y) * scale move by
// at most that times their slope (<= 1). So: loss within 1e-5 relative; each gradient within
// 1e-5 * (the summed |g| of its terms) + 1e-7; `correct` equal except for examples whose margin
// lies within 1e-4 of 0 (`near_zero`).
#ifndef PS_WORKER_TESTING_SPAM_REFERENCE_H_
#define PS_WORKER_TESTING_SPAM_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "worker/models/spam_step.h"

namespace ps {
namespace reference {

// `batch` examples of 0 .. max_features distinct positions among `num_weights`, labels 0 or 1.
inline SpamBatch RandomSpamBatch(int batch, int num_weights, int max_features, uint32_t seed) {
  std::mt19937 rng(seed);
  SpamBatch b;
  std::vector<int32_t> all(num_weights);
  for (int i = 0; i < num_weights; ++i) all[i] = i;
  for (int e = 0; e < batch; ++e) {
    const int f = std::uniform_int_distribution<int>(0, std::min(max_features, num_weights))(rng);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int32_t> features(all.begin(), all.begin() + f);
    std::sort(features.begin(), features.end());
    b.positions.insert(b.positions.end(), features.begin(), features.end());
    b.offsets.push_back(static_cast<int32_t>(b.positions.size()));
    b.labels.push_back(static_cast<int32_t>(rng() % 2));
  }
  return b;
}

struct SpamStepResult {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t near_zero = 0;           // examples whose margin is within 1e-4 of 0
  std::vector<double> grads;       // per weight
  std::vector<double> magnitudes;  // per weight: the summed |g| of its terms
  double bias_grad = 0;
};

inline SpamStepResult SpamStep(const SpamBatch& batch, const std::vector<float>& weights,
                               float bias, float grad_scale) {
  SpamStepResult r;
  r.grads.assign(weights.size(), 0.0);
  r.magnitudes.assign(weights.size(), 0.0);
  for (int e = 0; e < batch.batch(); ++e) {
    double z = bias;
    for (int32_t i = batch.offsets[e]; i < batch.offsets[e + 1]; ++i) {
      z += weights[batch.positions[i]];
    }
    const int y = batch.labels[e];
    r.loss_sum += std::max(y == 1 ? -z : z, 0.0) + std::log1p(std::exp(-std::fabs(z)));
    r.correct += (z > 0) == (y == 1) ? 1 : 0;
    r.near_zero += std::fabs(z) < 1e-4 ? 1 : 0;
    const double g = (1.0 / (1.0 + std::exp(-z)) - y) * grad_scale;
    r.bias_grad += g;
    for (int32_t i = batch.offsets[e]; i < batch.offsets[e + 1]; ++i) {
      r.grads[batch.positions[i]] += g;
      r.magnitudes[batch.positions[i]] += std::fabs(g);
    }
  }
  return r;
}

}  // namespace reference
}  // namespace ps

#endif  // PS_WORKER_TESTING_SPAM_REFERENCE_H_
