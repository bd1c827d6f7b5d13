#include "worker/fashion_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/cpu_backend.h"
#include "worker/fashion_mnist.h"
#include "worker/mlp_model.h"

namespace ps {
namespace {

class FashionMlp : public Model {
 public:
  FashionMlp(Dataset train, Dataset test, std::vector<int> layers, v1::OptimizerSpec optimizer,
             uint64_t seed)
      : train_(std::move(train)),
        test_(std::move(test)),
        backend_(MakeCpuBackend()),
        mlp_(std::move(layers), backend_.get()),
        optimizer_(std::move(optimizer)),
        seed_(seed) {}

  std::vector<v1::TableSpec> Tables(const std::string& job_id,
                                    uint32_t first_table_id) const override {
    first_table_id_ = first_table_id;
    std::vector<v1::TableSpec> tables;
    for (int t = 0; t < mlp_.num_tensors(); ++t) {
      v1::TableSpec spec;
      spec.set_table_id(first_table_id + t);
      spec.set_name(absl::StrCat(t % 2 == 0 ? "weights" : "bias", t / 2));
      spec.set_job_id(job_id);
      spec.set_kind(v1::DENSE);
      spec.set_dim(mlp_.tensor_dim(t));
      spec.set_num_rows(mlp_.tensor_rows(t));
      if (t % 2 == 0) {
        const float limit =
            std::sqrt(6.0f / static_cast<float>(mlp_.tensor_rows(t) + mlp_.tensor_dim(t)));
        spec.mutable_initializer()->set_kind(v1::InitializerSpec::UNIFORM);
        spec.mutable_initializer()->set_low(-limit);
        spec.mutable_initializer()->set_high(limit);
        spec.mutable_initializer()->set_seed(seed_);
      }
      *spec.mutable_optimizer() = optimizer_;
      tables.push_back(std::move(spec));
    }
    return tables;
  }

  int64_t num_train_examples() const override { return train_.num_examples; }

  absl::Status Start(Client* client) override {
    keys_.assign(mlp_.num_tensors(), {});
    pull_ops_.clear();
    push_ops_.clear();
    for (int t = 0; t < mlp_.num_tensors(); ++t) {
      keys_[t] = DenseKeys(mlp_.tensor_rows(t));
      const uint32_t id = first_table_id_ + t;
      pull_ops_.push_back(TableOp{id, keys_[t], nullptr, mlp_.param(t).data()});
      push_ops_.push_back(TableOp{id, keys_[t], mlp_.grad(t).data(), nullptr});
    }
    return client->Pull(pull_ops_);
  }

  absl::StatusOr<StepStats> TrainStep(Client* client, absl::Span<const int64_t> examples,
                                      float grad_scale) override {
    const int batch = static_cast<int>(examples.size());
    const int features = train_.num_features;
    x_.resize(static_cast<size_t>(batch) * features);
    y_.resize(batch);
    for (int b = 0; b < batch; ++b) {
      const int64_t i = examples[b];
      std::copy_n(train_.features.data() + i * features, features,
                  x_.data() + static_cast<size_t>(b) * features);
      y_[b] = train_.labels[i];
    }
    LossStats s = mlp_.Step(x_.data(), y_.data(), batch, /*backward=*/true, grad_scale);
    // Push this step's gradients, advance the clock, get the parameters of the next clock.
    PS_RETURN_IF_ERROR(client->PushPull(push_ops_, pull_ops_));
    return StepStats{s.loss_sum, s.correct, batch};
  }

  absl::StatusOr<StepStats> Evaluate(Client*) override {
    // The parameters of the last PushPull are current: no pull needed.
    constexpr int kBatch = 1000;
    StepStats stats;
    for (int i = 0; i < test_.num_examples; i += kBatch) {
      const int n = std::min(kBatch, test_.num_examples - i);
      LossStats s = mlp_.Step(test_.features.data() + static_cast<size_t>(i) * test_.num_features,
                              test_.labels.data() + i, n, /*backward=*/false, 0.0f);
      stats.loss_sum += s.loss_sum;
      stats.correct += s.correct;
      stats.examples += n;
    }
    return stats;
  }

 private:
  const Dataset train_;
  const Dataset test_;
  std::unique_ptr<ComputeBackend> backend_;
  MlpModel mlp_;
  const v1::OptimizerSpec optimizer_;
  const uint64_t seed_;
  mutable uint32_t first_table_id_ = 1;  // from the last Tables() call
  std::vector<std::vector<uint64_t>> keys_;
  std::vector<TableOp> pull_ops_, push_ops_;
  std::vector<float> x_;
  std::vector<int32_t> y_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> MakeFashionMlp(const std::string& data_dir,
                                                      const std::vector<int>& layers,
                                                      const v1::OptimizerSpec& optimizer,
                                                      uint64_t seed) {
  PS_RETURN_IF_ERROR(MlpModel::ValidateLayers(layers));
  PS_ASSIGN_OR_RETURN(Dataset train, LoadFashionMnist(data_dir, "train", 0, 1));
  PS_ASSIGN_OR_RETURN(Dataset test, LoadFashionMnist(data_dir, "t10k", 0, 1));
  if (train.num_features != layers.front() || train.num_classes != layers.back()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model layers ", layers.front(), "..", layers.back(), " do not fit the data set (",
        train.num_features, " features, ", train.num_classes, " classes)"));
  }
  return std::unique_ptr<Model>(
      new FashionMlp(std::move(train), std::move(test), layers, optimizer, seed));
}

}  // namespace ps
