#include "worker/daemon/model_zoo.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "common/zoo_models.h"
#include "worker/models/fashion_model.h"
#include "worker/models/sparse_logreg.h"

namespace ps {

namespace {

// Builds one model of the zoo from a spec whose defaults are filled (ZooModel::normalize,
// data_dir, optimizer).
using Builder = absl::StatusOr<std::unique_ptr<Model>> (*)(const v1::JobSpec& spec,
                                                           const ComputeOptions& compute);

absl::StatusOr<std::unique_ptr<Model>> BuildFashionMlp(const v1::JobSpec& spec,
                                                       const ComputeOptions& compute) {
  MlpRunOptions options;
  options.compute = compute;
  options.consistency = spec.consistency();
  options.batch_size = RunnerOptionsOf(spec).batch_size;
  return MakeFashionMlp(spec.data_dir(),
                        std::vector<int>(spec.layers().begin(), spec.layers().end()),
                        spec.optimizer(), spec.seed(), options);
}

absl::StatusOr<std::unique_ptr<Model>> BuildSpamLogreg(const v1::JobSpec& spec,
                                                       const ComputeOptions& compute) {
  return MakeSpamLogReg(spec.data_dir(), spec.hash_bits(), spec.optimizer(), spec.seed(), compute);
}

// The builder of each model the registry (common/zoo_models.h) describes.
struct ModelBuilder {
  const ZooModel& (*model)();
  Builder build;
};
constexpr ModelBuilder kBuilders[] = {
    {&FashionMlpZooModel, &BuildFashionMlp},
    {&SpamLogregZooModel, &BuildSpamLogreg},
};

Builder BuilderOf(absl::string_view model) {
  for (const ModelBuilder& b : kBuilders) {
    if (model == b.model().name) return b.build;
  }
  return nullptr;
}

}  // namespace

bool HasBuilder(const std::string& model) { return BuilderOf(model) != nullptr; }

absl::StatusOr<std::unique_ptr<Model>> MakeModel(const v1::JobSpec& spec,
                                                 const ComputeOptions& compute) {
  const ZooModel* model = FindZooModel(spec.model());
  if (model == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", spec.model(), "' is unknown; the zoo has ", ZooModelNames()));
  }
  v1::JobSpec filled = spec;  // the model's defaults where the spec leaves them (standalone)
  PS_RETURN_IF_ERROR(model->normalize(&filled));
  if (filled.data_dir().empty()) filled.set_data_dir(model->default_data_dir);
  if (!filled.has_optimizer()) *filled.mutable_optimizer() = model->default_optimizer();
  if (Builder build = BuilderOf(spec.model()); build != nullptr) return build(filled, compute);
  return absl::UnimplementedError(
      absl::StrCat("model '", spec.model(), "' has no builder in this ps_worker"));
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
