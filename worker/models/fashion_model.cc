#include "worker/models/fashion_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "worker/models/mlp_model.h"

namespace ps {
namespace {

constexpr int kEvalBatch = 1000;

// Trains an MlpModel through the parameter servers. Parameters are pulled into, and gradients
// pushed from, staging buffers of the backend (page-locked host memory on CUDA; on the CPU the
// compute reads and writes them in place).
//
// Without overlap a step is: compute on params[0] -> grads[0]; PushPull(grads[0] -> params[0])
// and wait. With overlap, steps alternate between two sets of buffers; step t (set c = t % 2):
//   1. compute with params[c] into grads[c]        while the push/pull of step t-1 (set 1-c)
//                                                   is on the wire
//   2. wait for that push/pull (the part of it the compute did not hide)
//   3. start the push/pull of step t: grads[c] out, the parameters of clock t+1 into params[c],
//      which step t+2 uses
// so at most one request is in flight, and no buffer is read by the compute and written by the
// network at once. Step t thus uses the parameters of clock t-1 (one clock staler than without
// overlap), which is why only async and ssp with staleness >= 1 overlap.
class FashionMlp : public Model {
 public:
  FashionMlp(Dataset train, Dataset test, std::vector<int> layers, v1::OptimizerSpec optimizer,
             uint64_t seed, std::unique_ptr<ComputeBackend> backend, bool overlap, int batch_size)
      : train_(std::move(train)),
        test_(std::move(test)),
        backend_(std::move(backend)),
        mlp_(std::move(layers), backend_.get()),
        optimizer_(std::move(optimizer)),
        seed_(seed),
        overlap_(overlap),
        batch_size_(std::max(1, batch_size)) {}

  // The request in flight uses our buffers: it must be over before they go. (The runner's
  // Flush() has normally waited already.)
  ~FashionMlp() override { Flush().IgnoreError(); }

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

  absl::Status Start(RpcClient* client) override {
    PS_RETURN_IF_ERROR(Flush());
    // Everything a step needs is allocated here, once per job.
    PS_RETURN_IF_ERROR(mlp_.Reserve(std::max(batch_size_, kEvalBatch)));
    PS_RETURN_IF_ERROR(EnsureBatchStaging(batch_size_));
    const int sets = overlap_ ? 2 : 1;
    const size_t bytes = sizeof(float) * static_cast<size_t>(mlp_.num_parameters());
    const int T = mlp_.num_tensors();
    keys_.assign(T, {});
    for (int t = 0; t < T; ++t) keys_[t] = DenseKeys(mlp_.tensor_rows(t));
    for (int s = 0; s < sets; ++s) {
      Buffers& b = buffers_[s];
      PS_ASSIGN_OR_RETURN(b.params, backend_->Allocate(MemoryKind::kStaging, bytes));
      PS_ASSIGN_OR_RETURN(b.grads, backend_->Allocate(MemoryKind::kStaging, bytes));
      b.param_ptrs.clear();
      b.grad_ptrs.clear();
      b.pull_ops.clear();
      b.push_ops.clear();
      for (int t = 0; t < T; ++t) {
        float* p = b.params.floats() + mlp_.tensor_offset(t);
        float* g = b.grads.floats() + mlp_.tensor_offset(t);
        b.param_ptrs.push_back(p);
        b.grad_ptrs.push_back(g);
        const uint32_t id = first_table_id_ + t;
        b.pull_ops.push_back(TableOp{id, keys_[t], nullptr, p});
        b.push_ops.push_back(TableOp{id, keys_[t], g, nullptr});
      }
    }
    PS_RETURN_IF_ERROR(client->Pull(buffers_[0].pull_ops));
    // Steps 0 and 1 both start from these parameters (the pull for step 2 is issued after
    // step 0).
    if (overlap_ && bytes > 0) {
      std::memcpy(buffers_[1].params.data(), buffers_[0].params.data(), bytes);
    }
    steps_ = 0;
    latest_ = 0;
    return absl::OkStatus();
  }

  absl::StatusOr<StepStats> TrainStep(RpcClient* client, absl::Span<const int64_t> examples,
                                      float grad_scale) override {
    const int batch = static_cast<int>(examples.size());
    const int features = train_.num_features;
    PS_RETURN_IF_ERROR(EnsureBatchStaging(batch));
    float* x = x_.floats();
    int32_t* y = y_.ints();
    for (int b = 0; b < batch; ++b) {
      const int64_t i = examples[b];
      if (i < 0 || i >= train_.num_examples) {
        return absl::InvalidArgumentError(
            absl::StrCat("example ", i, " is out of range [0, ", train_.num_examples, ")"));
      }
      std::copy_n(train_.features.data() + i * features, features,
                  x + static_cast<size_t>(b) * features);
      y[b] = train_.labels[i];
    }
    const int set = overlap_ ? static_cast<int>(steps_ % 2) : 0;
    Buffers& b = buffers_[set];
    PS_RETURN_IF_ERROR(mlp_.StartStep(b.param_ptrs, x, y, batch, grad_scale, b.grad_ptrs));
    PS_ASSIGN_OR_RETURN(const LossStats s, mlp_.FinishStep());
    StepStats stats;
    stats.loss_sum = s.loss_sum;
    stats.correct = s.correct;
    stats.examples = batch;
    if (!overlap_) {
      // Push this step's gradients, advance the clock, get the parameters of the next clock.
      PS_RETURN_IF_ERROR(client->PushPull(b.push_ops, b.pull_ops));
      return stats;
    }
    if (pending_.has_value()) {
      const RpcHandle previous = *pending_;
      pending_.reset();
      absl::Status done = previous.Wait();
      if (!done.ok()) {
        return WithPrefix(done, "the previous step's push/pull");
      }
      latest_ = 1 - set;
      stats.communication = previous.elapsed();
    }
    pending_ = client->PushPullAsync(b.push_ops, b.pull_ops);
    ++steps_;
    return stats;
  }

  int StepsInFlight() const override { return overlap_ ? 1 : 0; }

  absl::StatusOr<StepStats> Evaluate(RpcClient*) override {
    // The parameters of the last PushPull are current (after Flush): no pull needed.
    PS_RETURN_IF_ERROR(Flush());
    const Buffers& b = buffers_[latest_];
    StepStats stats;
    for (int i = 0; i < test_.num_examples; i += kEvalBatch) {
      const int n = std::min(kEvalBatch, test_.num_examples - i);
      PS_RETURN_IF_ERROR(mlp_.StartStep(
          b.param_ptrs, test_.features.data() + static_cast<size_t>(i) * test_.num_features,
          test_.labels.data() + i, n, 0.0f, {}));
      PS_ASSIGN_OR_RETURN(const LossStats s, mlp_.FinishStep());
      stats.loss_sum += s.loss_sum;
      stats.correct += s.correct;
      stats.examples += n;
    }
    return stats;
  }

  absl::Status Flush() override {
    if (!pending_.has_value()) return absl::OkStatus();
    const RpcHandle h = *pending_;
    pending_.reset();
    latest_ = static_cast<int>((steps_ - 1) % 2);  // the set of the last step's pull
    return h.Wait();
  }

 private:
  // One set of staging buffers, and the pointers and request ops into them.
  struct Buffers {
    BackendBuffer params, grads;  // num_parameters() floats each, tensors in order
    std::vector<const float*> param_ptrs;
    std::vector<float*> grad_ptrs;
    std::vector<TableOp> pull_ops, push_ops;
  };

  absl::Status EnsureBatchStaging(int batch) {
    const size_t x_bytes = sizeof(float) * static_cast<size_t>(batch) * train_.num_features;
    if (x_bytes > x_.bytes()) {
      PS_ASSIGN_OR_RETURN(x_, backend_->Allocate(MemoryKind::kStaging, x_bytes));
    }
    const size_t y_bytes = sizeof(int32_t) * static_cast<size_t>(batch);
    if (y_bytes > y_.bytes()) {
      PS_ASSIGN_OR_RETURN(y_, backend_->Allocate(MemoryKind::kStaging, y_bytes));
    }
    return absl::OkStatus();
  }

  const Dataset train_;
  const Dataset test_;
  std::unique_ptr<ComputeBackend> backend_;
  MlpModel mlp_;
  const v1::OptimizerSpec optimizer_;
  const uint64_t seed_;
  const bool overlap_;
  const int batch_size_;
  mutable uint32_t first_table_id_ = 1;  // from the last Tables() call
  std::vector<std::vector<uint64_t>> keys_;
  Buffers buffers_[2];   // [1] only with overlap
  BackendBuffer x_, y_;  // the batch's features and labels (staging)
  int64_t steps_ = 0;    // steps since Start()
  int latest_ = 0;       // the set holding the newest parameters once nothing is in flight
  std::optional<RpcHandle> pending_;  // overlap: the last step's push/pull
};

}  // namespace

bool OverlapsCommunication(OverlapMode mode, const DeviceSpec& device,
                           const v1::ConsistencySpec& consistency) {
  const bool allowed =
      consistency.mode() == v1::ConsistencySpec::ASYNC ||
      (consistency.mode() == v1::ConsistencySpec::SSP && consistency.staleness() >= 1);
  switch (mode) {
    case OverlapMode::kOff:
      return false;
    case OverlapMode::kOn:
      return allowed;
    case OverlapMode::kAuto:
      break;
  }
  return allowed && device.kind == DeviceSpec::Kind::kCuda;
}

absl::StatusOr<std::unique_ptr<Model>> MakeMlpModel(Dataset train, Dataset test,
                                                    const std::vector<int>& layers,
                                                    const v1::OptimizerSpec& optimizer,
                                                    uint64_t seed, const MlpRunOptions& options) {
  PS_RETURN_IF_ERROR(MlpModel::ValidateLayers(layers));
  for (const Dataset* d : {&train, &test}) {
    if (d->num_features != layers.front() || d->num_classes != layers.back()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model layers ", layers.front(), "..", layers.back(), " do not fit the data set (",
          d->num_features, " features, ", d->num_classes, " classes)"));
    }
  }
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ComputeBackend> backend, MakeBackend(options.compute));
  const bool overlap =
      OverlapsCommunication(options.compute.overlap, options.compute.device, options.consistency);
  return std::unique_ptr<Model>(new FashionMlp(std::move(train), std::move(test), layers, optimizer,
                                               seed, std::move(backend), overlap,
                                               options.batch_size));
}

absl::StatusOr<std::unique_ptr<Model>> MakeFashionMlp(const std::string& data_dir,
                                                      const std::vector<int>& layers,
                                                      const v1::OptimizerSpec& optimizer,
                                                      uint64_t seed, const MlpRunOptions& options) {
  PS_RETURN_IF_ERROR(MlpModel::ValidateLayers(layers));
  PS_ASSIGN_OR_RETURN(Dataset train, LoadFashionMnist(data_dir, "train", 0, 1));
  PS_ASSIGN_OR_RETURN(Dataset test, LoadFashionMnist(data_dir, "t10k", 0, 1));
  return MakeMlpModel(std::move(train), std::move(test), layers, optimizer, seed, options);
}

}  // namespace ps
