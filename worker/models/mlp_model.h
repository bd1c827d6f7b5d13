// A multi-layer perceptron (ReLU hidden layers, softmax output) over a ComputeBackend.
#ifndef PS_WORKER_MODELS_MLP_MODEL_H_
#define PS_WORKER_MODELS_MLP_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/compute/compute_backend.h"

namespace ps {

// Parameters are held as 2L tensors for L layers: tensor 2l is layer l's weight matrix
// (in x out, row-major: row i holds the weights leaving input unit i) and tensor 2l+1 its bias
// (out). Gradients have the same shapes.
//
// Two ways to run a step:
//  - Step() / RunStep() on the model's own host tensors param(t) / grad(t) (simple; tests).
//  - StartStep() / FinishStep() on the caller's host arrays, e.g. staging memory that a worker
//    pulls into and pushes from. On a device backend StartStep only queues the work: uploads of
//    the parameters layer by layer (each layer's forward starts as soon as its weights are
//    there) and downloads of each layer's gradients as soon as backward has made them (they
//    overlap the backward of the layers below). FinishStep waits.
// On the CPU backend both compute in the host arrays directly (no copies).
// Backend memory (activations, deltas; on a device also parameters, gradients and the batch) is
// allocated by Reserve() once for the largest batch, then reused. Not thread-safe; `backend`
// must outlive the model.
class MlpModel {
 public:
  // `layers` = {inputs, hidden..., classes}; at least two entries, all positive.
  static absl::Status ValidateLayers(const std::vector<int>& layers);
  MlpModel(std::vector<int> layers, ComputeBackend* backend);

  int num_layers() const { return static_cast<int>(layers_.size()) - 1; }
  int num_tensors() const { return 2 * num_layers(); }
  // Rows and row width of tensor t as a parameter-server table: weights are `in` rows of `out`
  // floats; a bias is 1 row of `out` floats.
  int tensor_rows(int t) const { return t % 2 == 0 ? layers_[t / 2] : 1; }
  int tensor_dim(int t) const { return layers_[t / 2 + 1]; }
  int64_t tensor_size(int t) const { return static_cast<int64_t>(tensor_rows(t)) * tensor_dim(t); }
  // Where tensor t starts in a flat array of all tensors in order (num_parameters() floats).
  int64_t tensor_offset(int t) const { return offsets_[t]; }
  int64_t num_parameters() const { return offsets_.back(); }
  const std::vector<int>& layers() const { return layers_; }
  ComputeBackend* backend() const { return backend_; }

  // The host tensors of Step() (allocated, zero, on first use).
  std::vector<float>& param(int t);
  const std::vector<float>& grad(int t) const;

  // Runs the batch forward with param(); with `backward`, fills grad() with the gradients of the
  // summed loss times `grad_scale` (1/batch gives the mean). Returns the batch's loss sum and
  // correct count. A device backend copies the host tensors in and out and waits.
  absl::StatusOr<LossStats> RunStep(const float* features, const int32_t* labels, int batch,
                                    bool backward, float grad_scale);
  // RunStep for code that cannot fail (the CPU backend with valid labels): an error is logged
  // and gives a NaN loss.
  LossStats Step(const float* features, const int32_t* labels, int batch, bool backward,
                 float grad_scale);

  // Allocates the backend memory for batches of up to `max_batch` examples (StartStep grows it
  // on demand; calling this first keeps allocations out of the steps).
  absl::Status Reserve(int max_batch);

  // Starts one step. `params[t]` points to tensor t's values (host memory); `features` holds
  // batch x inputs floats and `labels` batch classes. With `grads` (one pointer per tensor) it
  // runs backward and writes the gradients there; with an empty `grads`, forward only. All of
  // this host memory must stay untouched until FinishStep() returns. INVALID_ARGUMENT for wrong
  // pointer counts or a negative batch; allocation errors.
  absl::Status StartStep(absl::Span<const float* const> params, const float* features,
                         const int32_t* labels, int batch, float grad_scale,
                         absl::Span<float* const> grads);
  // Waits for the step; its loss sum and correct count, or the backend's error.
  absl::StatusOr<LossStats> FinishStep();

 private:
  void EnsureHostTensors() const;

  const std::vector<int> layers_;
  ComputeBackend* const backend_;
  std::vector<int64_t> offsets_;         // num_tensors() + 1 prefix sums of tensor_size()
  std::vector<int64_t> device_offsets_;  // the same, each rounded up to 64 floats
  mutable std::vector<std::vector<float>> params_;  // host tensors, created on first use
  mutable std::vector<std::vector<float>> grads_;
  // Backend memory for up to capacity_ examples.
  int capacity_ = -1;
  std::vector<BackendBuffer> acts_;  // acts_[l]: output of layer l (batch x out)
  BackendBuffer delta_, next_delta_;
  // Device backends only: the parameters, gradients and batch on the device.
  BackendBuffer device_params_, device_grads_, device_features_, device_labels_;
  LossStats stats_;  // of the step in flight; filled by the backend's Synchronize()
};

}  // namespace ps

#endif  // PS_WORKER_MODELS_MLP_MODEL_H_
