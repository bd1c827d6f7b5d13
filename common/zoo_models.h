// The zoo's models as the scheduler, psctl and the worker daemon know them: each model's name,
// defaults, validation and size, described once (common/zoo/<model>.cc) and listed once
// (ZooModels() in zoo_models.cc). The worker daemon builds a model by the same name
// (worker/daemon/model_zoo.cc); docs/operations.md, "Adding a model to the zoo", says how.
#ifndef PS_COMMON_ZOO_MODELS_H_
#define PS_COMMON_ZOO_MODELS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ps/v1/job.pb.h"

namespace ps {

// One model of the zoo. Plain data and functions without state: thread-safe.
struct ZooModel {
  const char* name;              // the job file's `model`, e.g. "fashion_mlp"
  const char* summary;           // one line for --help and errors: what it trains on what
  const char* default_data_dir;  // data_dir when the spec leaves it empty
  const char* smaller;           // how to make it smaller ("smaller layers"), for size errors
  // The server-side optimizer when the spec names none.
  v1::OptimizerSpec (*default_optimizer)();
  // Fills the model's own settings that the spec leaves unset (e.g. layers, hash_bits) and
  // checks them: INVALID_ARGUMENT "spec.<field> ..." naming the field and the allowed range.
  // Touches nothing else of the spec.
  absl::Status (*normalize)(v1::JobSpec* spec);
  // The float32 parameters the servers hold for a normalized spec, at most (optimizer state
  // not included).
  uint64_t (*parameters)(const v1::JobSpec& spec);
};

// Every model of the zoo, in the order --help lists them.
absl::Span<const ZooModel* const> ZooModels();
// The model named `name`, or nullptr.
const ZooModel* FindZooModel(absl::string_view name);
// The models' names, e.g. "fashion_mlp, spam_logreg" (separator between them).
std::string ZooModelNames(absl::string_view separator = ", ");

// Each model's description (common/zoo/<model>.cc); ZooModels() lists them.
const ZooModel& FashionMlpZooModel();
const ZooModel& SpamLogregZooModel();

}  // namespace ps

#endif  // PS_COMMON_ZOO_MODELS_H_
