#include "worker/models/sparse_logreg.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/zoo_models.h"

namespace ps {
namespace {

constexpr uint64_t kBiasKey = 0;

// log(1 + exp(x)) without overflow.
double Softplus(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }

double Sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

// Adds example's loss and correctness at margin `z` (log-odds of spam) to `stats`.
void Score(double z, int32_t label, StepStats& stats) {
  stats.loss_sum += label == 1 ? Softplus(-z) : Softplus(z);
  stats.correct += (z > 0) == (label == 1) ? 1 : 0;
  stats.examples += 1;
}

// w . x + b for binary features `features`, whose weights are `weights[i]` for `keys[i]`.
// Every feature must be among `keys` (sorted).
double Margin(const std::vector<uint64_t>& features, const std::vector<uint64_t>& keys,
              const std::vector<float>& weights, float bias) {
  double z = bias;
  auto it = keys.begin();
  for (uint64_t f : features) {  // features are sorted too: search only forward
    it = std::lower_bound(it, keys.end(), f);
    z += weights[it - keys.begin()];
  }
  return z;
}

// Area under the ROC curve of `scored` (margin, label) pairs; ties count one half.
double Auc(std::vector<std::pair<double, int32_t>> scored) {
  std::sort(scored.begin(), scored.end());
  double positive_rank_sum = 0;
  int64_t positives = 0;
  for (size_t i = 0; i < scored.size();) {
    size_t end = i;
    while (end < scored.size() && scored[end].first == scored[i].first) ++end;
    const double mean_rank = 0.5 * static_cast<double>(i + 1 + end);  // ranks i+1..end
    for (size_t k = i; k < end; ++k) {
      if (scored[k].second == 1) {
        positive_rank_sum += mean_rank;
        ++positives;
      }
    }
    i = end;
  }
  const int64_t negatives = static_cast<int64_t>(scored.size()) - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  const double p = static_cast<double>(positives);
  return (positive_rank_sum - p * (p + 1) / 2) / (p * static_cast<double>(negatives));
}

absl::Status CheckTable(RpcClient* client, uint32_t table_id, v1::TableKind kind) {
  PS_ASSIGN_OR_RETURN(const v1::TableSpec spec, client->DescribeTable(table_id));
  if (spec.kind() != kind || spec.dim() != 1 || (kind == v1::DENSE && spec.num_rows() != 1)) {
    return absl::FailedPreconditionError(
        absl::StrCat("table ", table_id, " is ", spec.ShortDebugString(), "; spam_logreg needs a ",
                     kind == v1::DENSE ? "DENSE 1-row" : "SPARSE", " table of dim 1"));
  }
  return absl::OkStatus();
}

}  // namespace

v1::OptimizerSpec DefaultSpamLogRegOptimizer() {
  return SpamLogregZooModel().default_optimizer();  // the registry's (common/zoo/spam_logreg.cc)
}

SparseLogReg::SparseLogReg(SpamDataset data, v1::OptimizerSpec optimizer, uint64_t seed,
                           std::unique_ptr<ComputeBackend> backend)
    : data_(std::move(data)),
      optimizer_(std::move(optimizer)),
      seed_(seed),
      backend_(std::move(backend)) {
  if (backend_ != nullptr) backend_step_ = std::make_unique<SpamBackendStep>(backend_.get());
  for (const SpamExample& e : data_.test()) {
    test_keys_.insert(test_keys_.end(), e.features.begin(), e.features.end());
  }
  std::sort(test_keys_.begin(), test_keys_.end());
  test_keys_.erase(std::unique(test_keys_.begin(), test_keys_.end()), test_keys_.end());
}

std::vector<v1::TableSpec> SparseLogReg::Tables(const std::string& job_id,
                                                uint32_t first_table_id) const {
  first_table_id_ = first_table_id;
  std::vector<v1::TableSpec> specs(2);
  for (int t = 0; t < 2; ++t) {
    v1::TableSpec& spec = specs[t];
    spec.set_table_id(first_table_id + t);
    spec.set_job_id(job_id);
    spec.set_dim(1);
    spec.mutable_initializer()->set_kind(v1::InitializerSpec::ZEROS);
    spec.mutable_initializer()->set_seed(seed_);
    *spec.mutable_optimizer() = optimizer_;
  }
  specs[0].set_name("spam_logreg/weights");
  specs[0].set_kind(v1::SPARSE);
  specs[1].set_name("spam_logreg/bias");
  specs[1].set_kind(v1::DENSE);
  specs[1].set_num_rows(1);
  return specs;
}

absl::Status SparseLogReg::Start(RpcClient* client) {
  PS_RETURN_IF_ERROR(CheckTable(client, weights_table_id(), v1::SPARSE));
  return CheckTable(client, bias_table_id(), v1::DENSE);
}

absl::Status SparseLogReg::PullWeights(RpcClient* client, absl::Span<const uint64_t> keys,
                                       std::vector<float>* weights, float* bias) {
  weights->assign(keys.size(), 0.0f);
  std::vector<TableOp> ops;
  // The client cuts large requests into parts of at most max_part_bytes.
  if (!keys.empty()) ops.push_back({weights_table_id(), keys, nullptr, weights->data()});
  ops.push_back({bias_table_id(), absl::MakeConstSpan(&kBiasKey, 1), nullptr, bias});
  return client->Pull(std::move(ops));
}

absl::StatusOr<StepStats> SparseLogReg::TrainStep(RpcClient* client,
                                                  absl::Span<const int64_t> examples,
                                                  float grad_scale) {
  const std::vector<SpamExample>& train = data_.train();
  keys_.clear();
  for (int64_t i : examples) {
    if (i < 0 || i >= data_.num_train()) {
      return absl::InvalidArgumentError(
          absl::StrCat("example ", i, " is out of range [0, ", data_.num_train(), ")"));
    }
    keys_.insert(keys_.end(), train[i].features.begin(), train[i].features.end());
  }
  std::sort(keys_.begin(), keys_.end());
  keys_.erase(std::unique(keys_.begin(), keys_.end()), keys_.end());

  float bias = 0;
  PS_RETURN_IF_ERROR(PullWeights(client, keys_, &weights_, &bias));

  StepStats stats;
  bias_grad_ = 0;
  if (backend_step_ != nullptr) {
    batch_.Clear();
    for (int64_t i : examples) {
      const SpamExample& e = train[i];
      auto it = keys_.begin();
      for (uint64_t f : e.features) {
        it = std::lower_bound(it, keys_.end(), f);
        batch_.positions.push_back(static_cast<int32_t>(it - keys_.begin()));
      }
      batch_.offsets.push_back(static_cast<int32_t>(batch_.positions.size()));
      batch_.labels.push_back(e.label);
    }
    PS_ASSIGN_OR_RETURN(
        stats, backend_step_->Run(batch_, weights_, bias, grad_scale, &grads_, &bias_grad_));
  } else {
    grads_.assign(keys_.size(), 0.0f);
    double bias_grad = 0;
    for (int64_t i : examples) {
      const SpamExample& e = train[i];
      const double z = Margin(e.features, keys_, weights_, bias);
      Score(z, e.label, stats);
      const double g = (Sigmoid(z) - e.label) * grad_scale;
      bias_grad += g;
      auto it = keys_.begin();
      for (uint64_t f : e.features) {
        it = std::lower_bound(it, keys_.end(), f);
        grads_[it - keys_.begin()] += static_cast<float>(g);
      }
    }
    bias_grad_ = static_cast<float>(bias_grad);
  }
  std::vector<TableOp> push;
  if (!keys_.empty()) push.push_back({weights_table_id(), keys_, grads_.data(), nullptr});
  push.push_back({bias_table_id(), absl::MakeConstSpan(&kBiasKey, 1), &bias_grad_, nullptr});
  PS_RETURN_IF_ERROR(client->PushPull(std::move(push), {}));
  return stats;
}

absl::StatusOr<StepStats> SparseLogReg::Evaluate(RpcClient* client) {
  PS_ASSIGN_OR_RETURN(const SpamEvaluation evaluation, EvaluateWithAuc(client));
  return evaluation.stats;
}

absl::StatusOr<SpamEvaluation> SparseLogReg::EvaluateWithAuc(RpcClient* client) {
  std::vector<float> weights;
  float bias = 0;
  PS_RETURN_IF_ERROR(PullWeights(client, test_keys_, &weights, &bias));
  SpamEvaluation evaluation;
  std::vector<std::pair<double, int32_t>> scored;
  scored.reserve(data_.test().size());
  for (const SpamExample& e : data_.test()) {
    const double z = Margin(e.features, test_keys_, weights, bias);
    Score(z, e.label, evaluation.stats);
    scored.emplace_back(z, e.label);
  }
  evaluation.auc = Auc(std::move(scored));
  return evaluation;
}

absl::StatusOr<std::unique_ptr<Model>> MakeSpamLogReg(const std::string& data_dir, int hash_bits,
                                                      const v1::OptimizerSpec& optimizer,
                                                      uint64_t seed,
                                                      const ComputeOptions& compute) {
  SpamDatasetOptions options;
  options.hash_bits = hash_bits;
  PS_ASSIGN_OR_RETURN(SpamDataset data, SpamDataset::Load(data_dir, options));
  std::unique_ptr<ComputeBackend> backend;
  if (compute.device.kind == DeviceSpec::Kind::kCuda) {
    PS_ASSIGN_OR_RETURN(backend, MakeBackend(compute));
  }
  return std::unique_ptr<Model>(
      new SparseLogReg(std::move(data), optimizer, seed, std::move(backend)));
}

}  // namespace ps
