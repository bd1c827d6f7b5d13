#include "worker/mlp_model.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ps {

absl::Status MlpModel::ValidateLayers(const std::vector<int>& layers) {
  if (layers.size() < 2) {
    return absl::InvalidArgumentError("an MLP needs at least an input and an output layer");
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] <= 0 || layers[i] > (1 << 16)) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", i, " has ", layers[i], " units; must be in 1..65536"));
    }
  }
  if (layers.back() < 2) return absl::InvalidArgumentError("the output layer needs >= 2 classes");
  return absl::OkStatus();
}

MlpModel::MlpModel(std::vector<int> layers, ComputeBackend* backend)
    : layers_(std::move(layers)), backend_(backend) {
  for (int t = 0; t < num_tensors(); ++t) {
    const size_t n = static_cast<size_t>(tensor_rows(t)) * tensor_dim(t);
    params_.emplace_back(n, 0.0f);
    grads_.emplace_back(n, 0.0f);
  }
  acts_.resize(num_layers());
}

int64_t MlpModel::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : params_) n += static_cast<int64_t>(p.size());
  return n;
}

LossStats MlpModel::Step(const float* features, const int32_t* labels, int batch, bool backward,
                         float grad_scale) {
  const int L = num_layers();
  // Forward: acts_[l] = relu(in * W_l + b_l), the last layer without relu (logits).
  const float* in = features;
  for (int l = 0; l < L; ++l) {
    const int n_in = layers_[l], n_out = layers_[l + 1];
    acts_[l].resize(static_cast<size_t>(batch) * n_out);
    backend_->Gemm(false, false, batch, n_out, n_in, 1.0f, in, params_[2 * l].data(), 0.0f,
                   acts_[l].data());
    if (l + 1 < L) {
      backend_->AddBiasRelu(batch, n_out, params_[2 * l + 1].data(), acts_[l].data());
    } else {
      backend_->AddBias(batch, n_out, params_[2 * l + 1].data(), acts_[l].data());
    }
    in = acts_[l].data();
  }
  const int classes = layers_.back();
  if (!backward) {
    return backend_->SoftmaxCrossEntropy(batch, classes, acts_[L - 1].data(), labels, 0.0f,
                                         nullptr);
  }
  delta_.resize(static_cast<size_t>(batch) * classes);
  LossStats stats = backend_->SoftmaxCrossEntropy(batch, classes, acts_[L - 1].data(), labels,
                                                  grad_scale, delta_.data());
  // Backward: delta is dLoss/d(pre-activation) of layer l.
  for (int l = L - 1; l >= 0; --l) {
    const int n_in = layers_[l], n_out = layers_[l + 1];
    const float* layer_in = l == 0 ? features : acts_[l - 1].data();
    // dW = in^T * delta; db = column sums of delta.
    backend_->Gemm(true, false, n_in, n_out, batch, 1.0f, layer_in, delta_.data(), 0.0f,
                   grads_[2 * l].data());
    backend_->BiasGradient(batch, n_out, delta_.data(), grads_[2 * l + 1].data());
    if (l == 0) break;
    // delta_prev = (delta * W^T) masked by relu'(acts_[l-1]).
    next_delta_.resize(static_cast<size_t>(batch) * n_in);
    backend_->Gemm(false, true, batch, n_in, n_out, 1.0f, delta_.data(), params_[2 * l].data(),
                   0.0f, next_delta_.data());
    backend_->ReluBackward(batch * n_in, acts_[l - 1].data(), next_delta_.data());
    delta_.swap(next_delta_);
  }
  return stats;
}

}  // namespace ps
