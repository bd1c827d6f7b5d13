#include "worker/models/mlp_model.h"

#include <glog/logging.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

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
  offsets_.push_back(0);
  device_offsets_.push_back(0);
  for (int t = 0; t < num_tensors(); ++t) {
    offsets_.push_back(offsets_.back() + tensor_size(t));
    // On a device each tensor starts on a 256-byte boundary: cuBLAS's tensor-core kernels want
    // 16-byte aligned matrices, and a bias of 10 floats would misalign every tensor after it.
    device_offsets_.push_back((device_offsets_.back() + tensor_size(t) + 63) / 64 * 64);
  }
}

void MlpModel::EnsureHostTensors() const {
  if (!params_.empty() || num_tensors() == 0) return;
  for (int t = 0; t < num_tensors(); ++t) {
    params_.emplace_back(tensor_size(t), 0.0f);
    grads_.emplace_back(tensor_size(t), 0.0f);
  }
}

std::vector<float>& MlpModel::param(int t) {
  EnsureHostTensors();
  return params_[t];
}

const std::vector<float>& MlpModel::grad(int t) const {
  EnsureHostTensors();
  return grads_[t];
}

absl::StatusOr<LossStats> MlpModel::RunStep(const float* features, const int32_t* labels, int batch,
                                            bool backward, float grad_scale) {
  EnsureHostTensors();
  std::vector<const float*> params;
  std::vector<float*> grads;
  for (int t = 0; t < num_tensors(); ++t) {
    params.push_back(params_[t].data());
    if (backward) grads.push_back(grads_[t].data());
  }
  PS_RETURN_IF_ERROR(StartStep(params, features, labels, batch, grad_scale, grads));
  return FinishStep();
}

LossStats MlpModel::Step(const float* features, const int32_t* labels, int batch, bool backward,
                         float grad_scale) {
  absl::StatusOr<LossStats> stats = RunStep(features, labels, batch, backward, grad_scale);
  if (stats.ok()) return *stats;
  LOG(ERROR) << "MlpModel::Step on " << backend_->name() << ": " << stats.status();
  return LossStats{std::numeric_limits<double>::quiet_NaN(), 0};
}

absl::Status MlpModel::Reserve(int max_batch) {
  if (max_batch <= capacity_) return absl::OkStatus();
  const int L = num_layers();
  const size_t batch = static_cast<size_t>(max_batch);
  // Grow to at least the old capacity doubled: a few growing batches cost O(log) reallocations.
  const size_t rows =
      std::max<size_t>(batch, capacity_ > 0 ? 2 * static_cast<size_t>(capacity_) : 0);
  capacity_ = -1;  // until everything below succeeded
  std::vector<BackendBuffer> acts(L);
  int widest = 0;
  for (int l = 0; l < L; ++l) {
    PS_ASSIGN_OR_RETURN(
        acts[l], backend_->Allocate(MemoryKind::kDevice, sizeof(float) * rows * layers_[l + 1]));
    widest = std::max(widest, layers_[l + 1]);
  }
  acts_ = std::move(acts);
  // delta of layer l is batch x layers[l+1]; the delta handed down to layer l-1 is batch x
  // layers[l] (l >= 1): both fit in batch x (widest layer after the inputs).
  PS_ASSIGN_OR_RETURN(delta_,
                      backend_->Allocate(MemoryKind::kDevice, sizeof(float) * rows * widest));
  PS_ASSIGN_OR_RETURN(next_delta_,
                      backend_->Allocate(MemoryKind::kDevice, sizeof(float) * rows * widest));
  if (!backend_->host_memory()) {
    const size_t params = static_cast<size_t>(device_offsets_.back());
    if (device_params_.data() == nullptr && params > 0) {
      PS_ASSIGN_OR_RETURN(device_params_,
                          backend_->Allocate(MemoryKind::kDevice, sizeof(float) * params));
      PS_ASSIGN_OR_RETURN(device_grads_,
                          backend_->Allocate(MemoryKind::kDevice, sizeof(float) * params));
    }
    PS_ASSIGN_OR_RETURN(device_features_,
                        backend_->Allocate(MemoryKind::kDevice, sizeof(float) * rows * layers_[0]));
    PS_ASSIGN_OR_RETURN(device_labels_,
                        backend_->Allocate(MemoryKind::kDevice, sizeof(int32_t) * rows));
  }
  capacity_ = static_cast<int>(std::min<size_t>(rows, std::numeric_limits<int>::max()));
  return absl::OkStatus();
}

absl::Status MlpModel::StartStep(absl::Span<const float* const> params, const float* features,
                                 const int32_t* labels, int batch, float grad_scale,
                                 absl::Span<float* const> grads) {
  const int T = num_tensors();
  if (static_cast<int>(params.size()) != T ||
      (!grads.empty() && static_cast<int>(grads.size()) != T)) {
    return absl::InvalidArgumentError(absl::StrCat("StartStep: ", params.size(), " parameter and ",
                                                   grads.size(), " gradient pointers for ", T,
                                                   " tensors"));
  }
  if (batch < 0) return absl::InvalidArgumentError(absl::StrCat("StartStep: batch ", batch));
  PS_RETURN_IF_ERROR(Reserve(batch));
  const bool backward = !grads.empty();
  const bool host = backend_->host_memory();
  const int L = num_layers();
  ComputeBackend& be = *backend_;

  // On the device: the batch first, then each layer's parameters just before its forward.
  const float* x = features;
  const int32_t* y = labels;
  if (!host) {
    be.CopyToDevice(device_features_.data(), features, sizeof(float) * batch * layers_[0]);
    be.CopyToDevice(device_labels_.data(), labels, sizeof(int32_t) * batch);
    x = device_features_.floats();
    y = device_labels_.ints();
  }
  std::vector<const float*> p(T);  // where the compute reads tensor t
  for (int t = 0; t < T; ++t) {
    p[t] = host ? params[t] : device_params_.floats() + device_offsets_[t];
  }

  // Forward: acts_[l] = relu(in * W_l + b_l), the last layer without relu (logits).
  const float* in = x;
  for (int l = 0; l < L; ++l) {
    const int n_in = layers_[l], n_out = layers_[l + 1];
    if (!host) {
      for (int t : {2 * l, 2 * l + 1}) {
        be.CopyToDevice(const_cast<float*>(p[t]), params[t], sizeof(float) * tensor_size(t));
      }
      be.ComputeAfterCopies();
    }
    float* act = acts_[l].floats();
    be.Gemm(false, false, batch, n_out, n_in, 1.0f, in, p[2 * l], 0.0f, act);
    if (l + 1 < L) {
      be.AddBiasRelu(batch, n_out, p[2 * l + 1], act);
    } else {
      be.AddBias(batch, n_out, p[2 * l + 1], act);
    }
    in = act;
  }
  const int classes = layers_.back();
  stats_ = LossStats();
  if (!backward) {
    be.SoftmaxCrossEntropyAsync(batch, classes, acts_[L - 1].floats(), y, 0.0f, nullptr, &stats_);
    return absl::OkStatus();
  }
  float* delta = delta_.floats();
  float* next_delta = next_delta_.floats();
  be.SoftmaxCrossEntropyAsync(batch, classes, acts_[L - 1].floats(), y, grad_scale, delta, &stats_);
  // Backward: delta is dLoss/d(pre-activation) of layer l.
  for (int l = L - 1; l >= 0; --l) {
    const int n_in = layers_[l], n_out = layers_[l + 1];
    const float* layer_in = l == 0 ? x : acts_[l - 1].floats();
    float* grad_w = host ? grads[2 * l] : device_grads_.floats() + device_offsets_[2 * l];
    float* grad_b = host ? grads[2 * l + 1] : device_grads_.floats() + device_offsets_[2 * l + 1];
    // dW = in^T * delta; db = column sums of delta.
    be.Gemm(true, false, n_in, n_out, batch, 1.0f, layer_in, delta, 0.0f, grad_w);
    be.BiasGradient(batch, n_out, delta, grad_b);
    if (!host) {
      // This layer's gradients go to the host while the layers below are differentiated.
      be.CopiesAfterCompute();
      be.CopyToHost(grads[2 * l], grad_w, sizeof(float) * tensor_size(2 * l));
      be.CopyToHost(grads[2 * l + 1], grad_b, sizeof(float) * tensor_size(2 * l + 1));
    }
    if (l == 0) break;
    // delta_prev = (delta * W^T) masked by relu'(acts_[l-1]).
    be.Gemm(false, true, batch, n_in, n_out, 1.0f, delta, p[2 * l], 0.0f, next_delta);
    be.ReluBackward(static_cast<int64_t>(batch) * n_in, acts_[l - 1].floats(), next_delta);
    std::swap(delta, next_delta);
  }
  return absl::OkStatus();
}

absl::StatusOr<LossStats> MlpModel::FinishStep() {
  PS_RETURN_IF_ERROR(backend_->Synchronize());
  return stats_;
}

}  // namespace ps
