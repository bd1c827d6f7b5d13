#include "common/optimizer_spec.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

using v1::OptimizerSpec;

constexpr float kInf = INFINITY;

// OK where v is finite and within the bounds (open or closed at each end).
absl::Status CheckRange(const char* field, float v, float lo, bool lo_open, float hi,
                        bool hi_open) {
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("optimizer.", field, " is ", v, "; must be in ",
                                                 lo_open ? "(" : "[", lo, ", ", hi,
                                                 hi_open ? ")" : "]"));
}

absl::Status CheckAdagrad(const OptimizerSpec& spec) {
  const float eps = spec.has_epsilon() ? spec.epsilon() : 1e-10f;
  const float acc = spec.has_initial_accumulator() ? spec.initial_accumulator() : 0.1f;
  absl::Status s = CheckRange("epsilon", eps, 0, false, kInf, true);
  if (s.ok()) s = CheckRange("initial_accumulator", acc, 0, false, kInf, true);
  if (s.ok() && eps == 0 && acc == 0) {
    s = absl::InvalidArgumentError(
        "optimizer: adagrad needs epsilon > 0 or initial_accumulator > 0 (division by zero)");
  }
  return s;
}

absl::Status CheckAdam(const OptimizerSpec& spec) {
  absl::Status s = CheckRange("beta1", spec.has_beta1() ? spec.beta1() : 0.9f, 0, false, 1, true);
  if (s.ok()) {
    s = CheckRange("beta2", spec.has_beta2() ? spec.beta2() : 0.999f, 0, false, 1, true);
  }
  if (s.ok()) {
    s = CheckRange("epsilon", spec.has_epsilon() ? spec.epsilon() : 1e-8f, 0, true, kInf, true);
  }
  return s;
}

absl::Status CheckFtrl(const OptimizerSpec& spec) {
  const float l1 = spec.has_l1() ? spec.l1() : 0.0f;
  const float l2 = spec.has_l2() ? spec.l2() : 0.0f;
  const float beta = spec.has_ftrl_beta() ? spec.ftrl_beta() : 1.0f;
  absl::Status s = CheckRange("l1", l1, 0, false, kInf, true);
  if (s.ok()) s = CheckRange("l2", l2, 0, false, kInf, true);
  if (s.ok()) s = CheckRange("ftrl_beta", beta, 0, false, kInf, true);
  if (s.ok() && beta == 0 && l2 == 0) {
    s = absl::InvalidArgumentError(
        "optimizer: ftrl needs ftrl_beta > 0 or l2 > 0 (division by zero on the first step)");
  }
  return s;
}

}  // namespace

absl::Status ValidateOptimizerSpec(const OptimizerSpec& spec) {
  const float lr = spec.has_learning_rate() ? spec.learning_rate() : 0.01f;
  const float wd = spec.has_weight_decay() ? spec.weight_decay() : 0.0f;
  absl::Status s = CheckRange("learning_rate", lr, 0, true, kInf, true);
  if (s.ok()) s = CheckRange("weight_decay", wd, 0, false, kInf, true);
  if (!s.ok()) return s;
  switch (spec.kind()) {
    case OptimizerSpec::SGD:
      return absl::OkStatus();
    case OptimizerSpec::MOMENTUM:
      return CheckRange("momentum", spec.has_momentum() ? spec.momentum() : 0.9f, 0, false, 1,
                        true);
    case OptimizerSpec::ADAGRAD:
      return CheckAdagrad(spec);
    case OptimizerSpec::ADAM:
      return CheckAdam(spec);
    case OptimizerSpec::FTRL:
      return CheckFtrl(spec);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer.kind ", static_cast<int>(spec.kind()), " is unknown"));
  }
}

}  // namespace ps
