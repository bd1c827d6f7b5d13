#include "worker/trainer.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "worker/cpu_backend.h"
#include "worker/fashion_mnist.h"
#include "worker/mlp_model.h"

namespace ps {

absl::Status TrainerOptions::Validate() const {
  PS_RETURN_IF_ERROR(MlpModel::ValidateLayers(layers));
  if (epochs < 1) return absl::InvalidArgumentError(absl::StrCat("epochs is ", epochs, "; >= 1"));
  if (batch_size < 1 || batch_size > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size is ", batch_size, "; must be in 1..65536"));
  }
  if (num_workers < 1 || worker_id >= static_cast<uint32_t>(num_workers)) {
    return absl::InvalidArgumentError(absl::StrCat("worker_id ", worker_id, " must be in 0..",
                                                   "num_workers-1 (num_workers ", num_workers,
                                                   ")"));
  }
  if (consistency.mode() == v1::ConsistencySpec::SSP && consistency.staleness() < 0) {
    return absl::InvalidArgumentError("ssp staleness must be >= 0");
  }
  if (log_every_steps < 0) return absl::InvalidArgumentError("log_every_steps must be >= 0");
  return absl::OkStatus();
}

Trainer::Trainer(TrainerOptions options, Client* client)
    : options_(std::move(options)), client_(client) {}

namespace {

// Glorot-uniform weights and zero biases, created by the servers (deterministic per key).
v1::TableSpec TensorTable(const TrainerOptions& o, const MlpModel& model, int t,
                          const std::string& job_id) {
  v1::TableSpec spec;
  spec.set_table_id(o.first_table_id + t);
  spec.set_name(absl::StrCat(t % 2 == 0 ? "weights" : "bias", t / 2));
  spec.set_job_id(job_id);
  spec.set_kind(v1::DENSE);
  spec.set_dim(model.tensor_dim(t));
  spec.set_num_rows(model.tensor_rows(t));
  if (t % 2 == 0) {
    const float limit =
        std::sqrt(6.0f / static_cast<float>(model.tensor_rows(t) + model.tensor_dim(t)));
    spec.mutable_initializer()->set_kind(v1::InitializerSpec::UNIFORM);
    spec.mutable_initializer()->set_low(-limit);
    spec.mutable_initializer()->set_high(limit);
    spec.mutable_initializer()->set_seed(o.seed);
  }
  *spec.mutable_optimizer() = o.optimizer;
  return spec;
}

// Mean loss and accuracy of the model over a whole data set, in batches.
void Evaluate(MlpModel& model, const Dataset& data, EpochReport* report) {
  constexpr int kBatch = 1000;
  double loss = 0;
  int64_t correct = 0;
  for (int i = 0; i < data.num_examples; i += kBatch) {
    const int n = std::min(kBatch, data.num_examples - i);
    LossStats s = model.Step(data.features.data() + static_cast<size_t>(i) * data.num_features,
                             data.labels.data() + i, n, /*backward=*/false, 0.0f);
    loss += s.loss_sum;
    correct += s.correct;
  }
  report->test_loss = loss / std::max(1, data.num_examples);
  report->test_accuracy = static_cast<double>(correct) / std::max(1, data.num_examples);
}

}  // namespace

absl::StatusOr<EpochReport> Trainer::Run(
    const std::function<void(const EpochReport&)>& on_epoch,
    const std::function<void(int, int64_t, int64_t, double)>& on_progress) {
  PS_RETURN_IF_ERROR(options_.Validate());
  const TrainerOptions& o = options_;
  std::unique_ptr<ComputeBackend> backend = MakeCpuBackend();
  MlpModel model(o.layers, backend.get());

  PS_ASSIGN_OR_RETURN(Dataset train,
                      LoadFashionMnist(o.data_dir, "train", o.worker_id, o.num_workers));
  if (train.num_features != o.layers.front() || train.num_classes != o.layers.back()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model layers ", o.layers.front(), "..", o.layers.back(), " do not fit the data set (",
        train.num_features, " features, ", train.num_classes, " classes)"));
  }
  Dataset test;
  if (o.evaluate) {
    PS_ASSIGN_OR_RETURN(test, LoadFashionMnist(o.data_dir, "t10k", 0, 1));
  }

  // Every worker takes the same number of steps (sync mode needs it): the smallest shard's.
  const int64_t steps_per_epoch = (train.total_examples / o.num_workers) / o.batch_size;
  if (steps_per_epoch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size ", o.batch_size,
                                                   " is larger than a worker's data shard (",
                                                   train.total_examples / o.num_workers, ")"));
  }

  std::vector<uint32_t> workers(o.num_workers);
  std::iota(workers.begin(), workers.end(), 0);
  PS_RETURN_IF_ERROR(client_->ConfigureJob(o.consistency, workers));
  std::vector<std::vector<uint64_t>> keys(model.num_tensors());
  std::vector<TableOp> pull_ops, push_ops;
  for (int t = 0; t < model.num_tensors(); ++t) {
    PS_RETURN_IF_ERROR(client_->CreateTable(TensorTable(o, model, t, client_->job_id())));
    keys[t] = DenseKeys(model.tensor_rows(t));
    pull_ops.push_back(TableOp{o.first_table_id + t, keys[t], nullptr, model.param(t).data()});
    push_ops.push_back(TableOp{o.first_table_id + t, keys[t], model.grad(t).data(), nullptr});
  }
  PS_RETURN_IF_ERROR(client_->Pull(pull_ops));

  // Sync: the servers sum every worker's gradient, so each contributes its share of the mean.
  const bool sync = o.consistency.mode() == v1::ConsistencySpec::SYNC;
  const float grad_scale = 1.0f / (static_cast<float>(o.batch_size) * (sync ? o.num_workers : 1));
  std::vector<int> order(train.num_examples);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(o.seed * 1000003 + o.worker_id);
  std::vector<float> x(static_cast<size_t>(o.batch_size) * train.num_features);
  std::vector<int32_t> y(o.batch_size);

  EpochReport report;
  int64_t steps = 0;
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    const absl::Time start = absl::Now();
    std::shuffle(order.begin(), order.end(), rng);
    double loss = 0;
    int64_t correct = 0;
    for (int64_t step = 0; step < steps_per_epoch; ++step) {
      for (int b = 0; b < o.batch_size; ++b) {
        const int i = order[step * o.batch_size + b];
        std::copy_n(train.features.data() + static_cast<size_t>(i) * train.num_features,
                    train.num_features, x.data() + static_cast<size_t>(b) * train.num_features);
        y[b] = train.labels[i];
      }
      LossStats s = model.Step(x.data(), y.data(), o.batch_size, /*backward=*/true, grad_scale);
      loss += s.loss_sum;
      correct += s.correct;
      absl::Status pushed = client_->PushPull(push_ops, pull_ops);
      if (!pushed.ok()) {
        return absl::Status(pushed.code(), absl::StrCat("epoch ", epoch, " step ", step + 1, ": ",
                                                        pushed.message()));
      }
      ++steps;
      if (on_progress && o.log_every_steps > 0 && (step + 1) % o.log_every_steps == 0) {
        on_progress(epoch, step + 1, steps_per_epoch, loss / ((step + 1) * o.batch_size));
      }
    }
    const double seen = static_cast<double>(steps_per_epoch) * o.batch_size;
    report = EpochReport();
    report.epoch = epoch;
    report.steps = steps;
    report.train_loss = loss / seen;
    report.train_accuracy = correct / seen;
    report.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    report.samples_per_second = seen / std::max(report.seconds, 1e-9);
    if (o.evaluate) Evaluate(model, test, &report);
    if (on_epoch) on_epoch(report);
  }
  return report;
}

}  // namespace ps
