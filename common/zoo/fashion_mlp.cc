// fashion_mlp: a dense MLP (or softmax regression) on Fashion-MNIST, its layer sizes from the
// spec's `layers` (inputs first: 784 pixels, ..., 10 classes). Built by the worker daemon with
// worker/models/fashion_model.h.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/zoo_models.h"

namespace ps {
// Named: the zoo's files share a batch in unity builds, and each has these three.
namespace fashion_mlp {

constexpr int kMnistInputs = 784;
constexpr int kMnistClasses = 10;
constexpr int kDefaultHidden = 128;
constexpr int kMaxLayers = 16;  // entries of `layers`, inputs and classes included
constexpr int kMaxLayerSize = 65536;

v1::OptimizerSpec DefaultOptimizer() {
  v1::OptimizerSpec o;
  o.set_kind(v1::OptimizerSpec::ADAM);
  o.set_learning_rate(0.001f);
  return o;
}

absl::Status Normalize(v1::JobSpec* spec) {
  if (spec->layers().empty()) {
    for (int size : {kMnistInputs, kDefaultHidden, kMnistClasses}) spec->add_layers(size);
    return absl::OkStatus();
  }
  if (spec->layers_size() < 2 || spec->layers_size() > kMaxLayers) {
    return absl::InvalidArgumentError(absl::StrCat("spec.layers must have 2..", kMaxLayers,
                                                   " entries (inputs, hidden sizes, classes), not ",
                                                   spec->layers_size()));
  }
  for (int i = 0; i < spec->layers_size(); ++i) {
    if (spec->layers(i) < 1 || spec->layers(i) > kMaxLayerSize) {
      return absl::InvalidArgumentError(absl::StrCat("spec.layers[", i, "] = ", spec->layers(i),
                                                     " must be in 1..", kMaxLayerSize));
    }
  }
  if (spec->layers(0) != kMnistInputs || spec->layers(spec->layers_size() - 1) != kMnistClasses) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.layers must start with ", kMnistInputs, " (pixels) and end with ", kMnistClasses,
        " (classes) for fashion_mlp, not [", absl::StrJoin(spec->layers(), ","), "]"));
  }
  return absl::OkStatus();
}

uint64_t Parameters(const v1::JobSpec& spec) {
  uint64_t parameters = 0;
  for (int i = 0; i + 1 < spec.layers_size(); ++i) {
    const uint64_t in = spec.layers(i), out = spec.layers(i + 1);
    parameters += in * out + out;  // weights and biases
  }
  return parameters;
}

}  // namespace fashion_mlp

const ZooModel& FashionMlpZooModel() {
  static const ZooModel kModel = {
      "fashion_mlp",                                                                  // name
      "a dense MLP on Fashion-MNIST (layers: 784,hidden...,10; default 784,128,10)",  // summary
      "/usr/share/datasets/fashion-mnist",  // default_data_dir
      "smaller layers",                     // smaller
      &fashion_mlp::DefaultOptimizer,       // default_optimizer
      &fashion_mlp::Normalize,              // normalize
      &fashion_mlp::Parameters,             // parameters
  };
  return kModel;
}

}  // namespace ps
