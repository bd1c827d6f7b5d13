// The arithmetic of one spam_logreg training step on a ComputeBackend (what the model runs on a
// GPU), in the backend's gathers and scatter-adds:
//   v_i = w[positions_i]                        (Gather: the weight of each feature occurrence)
//   logits[e] = (0, b + sum of v_i over e)      (ScatterAdd into column 1, AddBias (0, b))
//   softmax cross-entropy of (0, z) = the logistic loss of z; its gradient's column 1 is
//   g_e = (sigmoid(z) - y) * grad_scale          (SoftmaxCrossEntropy)
//   grads[positions_i] += g_e, bias_grad = sum g_e   (Gather, ScatterAdd, BiasGradient)
// The CPU model computes the same in double precision (sparse_logreg.cc); the parity tests
// compare the two.
#ifndef PS_WORKER_MODELS_SPAM_STEP_H_
#define PS_WORKER_MODELS_SPAM_STEP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/compute/compute_backend.h"
#include "worker/models/model.h"

namespace ps {

// A batch of examples with binary features, in compressed rows: example e's features are
// positions[offsets[e] .. offsets[e + 1]), each an index into the step's weights.
struct SpamBatch {
  std::vector<int32_t> offsets = {0};  // batch + 1 entries, non-decreasing
  std::vector<int32_t> positions;
  std::vector<int32_t> labels;  // per example: 1 spam, 0 ham

  int batch() const { return static_cast<int>(labels.size()); }
  void Clear() {
    offsets.assign(1, 0);
    positions.clear();
    labels.clear();
  }
};

// Runs steps on one backend, keeping its staging and device buffers from step to step (they
// grow to the largest batch seen). Not thread-safe, like the backend.
class SpamBackendStep {
 public:
  explicit SpamBackendStep(ComputeBackend* backend) : backend_(backend) {}

  // Loss, accuracy (margin > 0 predicts spam) and gradients of `batch` at `weights` and `bias`:
  // grads gets weights.size() values, bias_grad one. INVALID_ARGUMENT for a malformed batch (a
  // position outside weights, a label not 0 or 1, bad offsets); the backend's errors as they
  // are (e.g. a CUDA failure, the call named).
  absl::StatusOr<StepStats> Run(const SpamBatch& batch, absl::Span<const float> weights, float bias,
                                float grad_scale, std::vector<float>* grads, float* bias_grad);

 private:
  // At least `bytes` in `buffer` (reallocated, contents lost, when smaller).
  absl::Status Reserve(BackendBuffer* buffer, MemoryKind kind, size_t bytes);

  ComputeBackend* const backend_;
  // Staging (host) side: what goes to the device and what comes back.
  BackendBuffer positions_, slots_, labels_, weights_, bias_, zeros_, grads_out_, bias_out_;
  // Device side.
  BackendBuffer d_positions_, d_slots_, d_labels_, d_weights_, d_bias_, d_values_, d_logits_,
      d_logit_grads_, d_grads_, d_bias_grad_;
};

}  // namespace ps

#endif  // PS_WORKER_MODELS_SPAM_STEP_H_
