#include "worker/models/spam_step.h"

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ps {
namespace {

absl::Status CheckBatch(const SpamBatch& batch, size_t num_weights) {
  const size_t n = batch.positions.size();
  if (batch.offsets.size() != batch.labels.size() + 1 || batch.offsets.front() != 0 ||
      static_cast<size_t>(batch.offsets.back()) != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spam batch: ", batch.offsets.size(), " offsets (",
        batch.offsets.empty()
            ? "none"
            : absl::StrCat("from ", batch.offsets.front(), " to ", batch.offsets.back()),
        ") for ", batch.labels.size(), " examples and ", n,
        " feature positions; want examples + 1 offsets from 0 to the positions"));
  }
  for (size_t e = 0; e < batch.labels.size(); ++e) {
    if (batch.offsets[e + 1] < batch.offsets[e]) {
      return absl::InvalidArgumentError(
          absl::StrCat("spam batch: offsets decrease at example ", e));
    }
    if (batch.labels[e] != 0 && batch.labels[e] != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("spam batch: example ", e, " has label ", batch.labels[e], "; want 0 or 1"));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (batch.positions[i] < 0 || static_cast<size_t>(batch.positions[i]) >= num_weights) {
      return absl::InvalidArgumentError(absl::StrCat("spam batch: feature position ",
                                                     batch.positions[i], " is outside the ",
                                                     num_weights, " weights"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SpamBackendStep::Reserve(BackendBuffer* buffer, MemoryKind kind, size_t bytes) {
  if (buffer->bytes() >= bytes) return absl::OkStatus();
  buffer->Reset();
  // Some headroom: batches differ in their number of features from step to step.
  PS_ASSIGN_OR_RETURN(*buffer, backend_->Allocate(kind, bytes + bytes / 4));
  return absl::OkStatus();
}

absl::StatusOr<StepStats> SpamBackendStep::Run(const SpamBatch& batch,
                                               absl::Span<const float> weights, float bias,
                                               float grad_scale, std::vector<float>* grads,
                                               float* bias_grad) {
  PS_RETURN_IF_ERROR(CheckBatch(batch, weights.size()));
  const int b = batch.batch();
  const int n = static_cast<int>(batch.positions.size());
  const int k = static_cast<int>(weights.size());
  grads->assign(weights.size(), 0.0f);
  *bias_grad = 0;
  StepStats stats;
  if (b == 0) return stats;

  const size_t ib = sizeof(int32_t), fb = sizeof(float);
  constexpr MemoryKind kStaging = MemoryKind::kStaging, kDevice = MemoryKind::kDevice;
  const size_t zeros = std::max<size_t>(2 * static_cast<size_t>(b), static_cast<size_t>(k));
  PS_RETURN_IF_ERROR(Reserve(&positions_, kStaging, n * ib));
  PS_RETURN_IF_ERROR(Reserve(&slots_, kStaging, n * ib));
  PS_RETURN_IF_ERROR(Reserve(&labels_, kStaging, b * ib));
  PS_RETURN_IF_ERROR(Reserve(&weights_, kStaging, k * fb));
  PS_RETURN_IF_ERROR(Reserve(&bias_, kStaging, 2 * fb));
  PS_RETURN_IF_ERROR(Reserve(&zeros_, kStaging, zeros * fb));
  PS_RETURN_IF_ERROR(Reserve(&grads_out_, kStaging, k * fb));
  PS_RETURN_IF_ERROR(Reserve(&bias_out_, kStaging, 2 * fb));
  PS_RETURN_IF_ERROR(Reserve(&d_positions_, kDevice, n * ib));
  PS_RETURN_IF_ERROR(Reserve(&d_slots_, kDevice, n * ib));
  PS_RETURN_IF_ERROR(Reserve(&d_labels_, kDevice, b * ib));
  PS_RETURN_IF_ERROR(Reserve(&d_weights_, kDevice, k * fb));
  PS_RETURN_IF_ERROR(Reserve(&d_bias_, kDevice, 2 * fb));
  PS_RETURN_IF_ERROR(Reserve(&d_values_, kDevice, n * fb));
  PS_RETURN_IF_ERROR(Reserve(&d_logits_, kDevice, 2 * b * fb));
  PS_RETURN_IF_ERROR(Reserve(&d_logit_grads_, kDevice, 2 * b * fb));
  PS_RETURN_IF_ERROR(Reserve(&d_grads_, kDevice, k * fb));
  PS_RETURN_IF_ERROR(Reserve(&d_bias_grad_, kDevice, 2 * fb));

  // The batch into staging memory; slot 2e + 1 is example e's spam logit.
  if (n > 0) std::memcpy(positions_.data(), batch.positions.data(), n * ib);
  for (int e = 0; e < b; ++e) {
    for (int32_t i = batch.offsets[e]; i < batch.offsets[e + 1]; ++i) slots_.ints()[i] = 2 * e + 1;
  }
  std::memcpy(labels_.data(), batch.labels.data(), b * ib);
  if (k > 0) std::memcpy(weights_.data(), weights.data(), k * fb);
  bias_.floats()[0] = 0;
  bias_.floats()[1] = bias;
  std::memset(zeros_.data(), 0, zeros * fb);

  auto to_device = [this](BackendBuffer& dst, const BackendBuffer& src, size_t bytes) {
    if (bytes > 0) backend_->CopyToDevice(dst.data(), src.data(), bytes);
  };
  to_device(d_positions_, positions_, n * ib);
  to_device(d_slots_, slots_, n * ib);
  to_device(d_labels_, labels_, b * ib);
  to_device(d_weights_, weights_, k * fb);
  to_device(d_bias_, bias_, 2 * fb);
  to_device(d_logits_, zeros_, 2 * b * fb);
  to_device(d_grads_, zeros_, k * fb);
  backend_->ComputeAfterCopies();

  float* values = d_values_.floats();
  float* logits = d_logits_.floats();
  float* logit_grads = d_logit_grads_.floats();
  backend_->Gather(n, 1, k, d_weights_.floats(), d_positions_.ints(), values);
  backend_->ScatterAdd(n, 1, 2 * b, values, d_slots_.ints(), logits);
  backend_->AddBias(b, 2, d_bias_.floats(), logits);
  LossStats loss;
  backend_->SoftmaxCrossEntropyAsync(b, 2, logits, d_labels_.ints(), grad_scale, logit_grads,
                                     &loss);
  backend_->Gather(n, 1, 2 * b, logit_grads, d_slots_.ints(), values);
  backend_->ScatterAdd(n, 1, k, values, d_positions_.ints(), d_grads_.floats());
  backend_->BiasGradient(b, 2, logit_grads, d_bias_grad_.floats());
  backend_->CopiesAfterCompute();
  if (k > 0) backend_->CopyToHost(grads_out_.data(), d_grads_.data(), k * fb);
  backend_->CopyToHost(bias_out_.data(), d_bias_grad_.data(), 2 * fb);
  PS_RETURN_IF_ERROR(backend_->Synchronize());

  if (k > 0) std::memcpy(grads->data(), grads_out_.data(), k * fb);
  *bias_grad = bias_out_.floats()[1];
  stats.loss_sum = loss.loss_sum;
  stats.correct = loss.correct;
  stats.examples = b;
  return stats;
}

}  // namespace ps
