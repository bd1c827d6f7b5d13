#include "worker/daemon/model_zoo.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "worker/models/fashion_model.h"
#include "worker/models/sparse_logreg.h"

namespace ps {

absl::StatusOr<std::unique_ptr<Model>> MakeModel(const v1::JobSpec& spec,
                                                 const ComputeOptions& compute) {
  if (spec.model() == "fashion_mlp") {
    std::vector<int> layers(spec.layers().begin(), spec.layers().end());
    if (layers.empty()) layers = {784, 128, 10};
    v1::OptimizerSpec optimizer = spec.optimizer();
    if (!spec.has_optimizer()) {
      optimizer.set_kind(v1::OptimizerSpec::ADAM);
      optimizer.set_learning_rate(0.001f);
    }
    MlpRunOptions options;
    options.compute = compute;
    options.consistency = spec.consistency();
    options.batch_size = RunnerOptionsOf(spec).batch_size;
    return MakeFashionMlp(
        spec.data_dir().empty() ? "/usr/share/datasets/fashion-mnist" : spec.data_dir(), layers,
        optimizer, spec.seed(), options);
  }
  if (spec.model() == "spam_logreg") {
    return MakeSpamLogReg(
        spec.data_dir().empty() ? "/usr/share/datasets/spam-assassin" : spec.data_dir(),
        spec.hash_bits() > 0 ? spec.hash_bits() : 20,
        spec.has_optimizer() ? spec.optimizer() : DefaultSpamLogRegOptimizer(), spec.seed(),
        compute);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "model '", spec.model(), "' is unknown; the zoo has fashion_mlp and spam_logreg"));
}

JobRunnerOptions RunnerOptionsOf(const v1::JobSpec& spec) {
  JobRunnerOptions o;
  o.epochs = spec.epochs() > 0 ? spec.epochs() : 1;
  o.batch_size = spec.batch_size() > 0 ? spec.batch_size() : 64;
  o.num_workers = spec.num_workers() > 0 ? spec.num_workers() : 1;
  o.consistency = spec.consistency();
  o.seed = spec.seed();
  o.evaluate = !spec.has_evaluate() || spec.evaluate();
  o.lr_schedule = spec.lr_schedule();
  o.dynamic_data = spec.data_assignment() == v1::DYNAMIC;
  return o;
}

}  // namespace ps
