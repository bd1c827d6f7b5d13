// A multi-layer perceptron (ReLU hidden layers, softmax output) over a ComputeBackend.
#ifndef PS_WORKER_MLP_MODEL_H_
#define PS_WORKER_MLP_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "worker/compute_backend.h"

namespace ps {

// Parameters are held as 2L tensors for L layers: tensor 2l is layer l's weight matrix
// (in x out, row-major: row i holds the weights leaving input unit i) and tensor 2l+1 its bias
// (out). Gradients have the same shapes. Not thread-safe; `backend` must outlive the model.
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
  int64_t num_parameters() const;

  std::vector<float>& param(int t) { return params_[t]; }
  const std::vector<float>& grad(int t) const { return grads_[t]; }

  // Runs the batch forward; with `backward`, fills the gradients of the summed loss times
  // `grad_scale` (1/batch gives the mean). Returns the batch's loss sum and correct count.
  LossStats Step(const float* features, const int32_t* labels, int batch, bool backward,
                 float grad_scale);

 private:
  const std::vector<int> layers_;
  ComputeBackend* const backend_;
  std::vector<std::vector<float>> params_;
  std::vector<std::vector<float>> grads_;
  std::vector<std::vector<float>> acts_;  // acts_[l]: output of layer l (batch x out)
  std::vector<float> delta_, next_delta_;
};

}  // namespace ps

#endif  // PS_WORKER_MLP_MODEL_H_
