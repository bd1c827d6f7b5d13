#include "server/optimizer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/optimizer_spec.h"
#include "common/packed_bytes.h"

// The update loops are element-wise, so the compiler vectorizes them (server/CMakeLists.txt
// builds this file with -O3 -fno-math-errno; __restrict: a row's values, its state and the
// gradient never overlap). Each element is computed as the scalar loop would: no reassociation,
// no fast-math, so results are bit-identical to the scalar code.
namespace ps {
namespace {

using v1::OptimizerSpec;

// Adds the L2 weight-decay term to the gradient of one value.
inline float Decayed(float g, float w, float weight_decay) { return g + weight_decay * w; }

class Sgd : public RowOptimizer {
 public:
  Sgd(float lr, float wd) : lr_(lr), wd_(wd) {}
  int state_per_value() const override { return 0; }
  void InitState(const float*, float*, int) const override {}
  void ApplyScaled(const void* grad_bytes, int dim, int64_t, float lr_scale, float* __restrict w,
                   float*) const override {
    const char* __restrict grad = static_cast<const char*>(grad_bytes);
    const float lr = lr_ * lr_scale;
    for (int i = 0; i < dim; ++i) w[i] -= lr * Decayed(FloatAt(grad, i), w[i], wd_);
  }

 private:
  const float lr_, wd_;
};

// v = momentum * v + g; w -= lr * v (the heavy-ball form PyTorch uses).
class Momentum : public RowOptimizer {
 public:
  Momentum(float lr, float mu, float wd) : lr_(lr), mu_(mu), wd_(wd) {}
  int state_per_value() const override { return 1; }
  void InitState(const float*, float* state, int dim) const override {
    for (int i = 0; i < dim; ++i) state[i] = 0.0f;
  }
  void ApplyScaled(const void* grad_bytes, int dim, int64_t, float lr_scale, float* __restrict w,
                   float* __restrict v) const override {
    const char* __restrict grad = static_cast<const char*>(grad_bytes);
    const float lr = lr_ * lr_scale;
    for (int i = 0; i < dim; ++i) {
      v[i] = mu_ * v[i] + Decayed(FloatAt(grad, i), w[i], wd_);
      w[i] -= lr * v[i];
    }
  }

 private:
  const float lr_, mu_, wd_;
};

// acc += g^2; w -= lr * g / (sqrt(acc) + eps).
class Adagrad : public RowOptimizer {
 public:
  Adagrad(float lr, float eps, float init_acc, float wd)
      : lr_(lr), eps_(eps), init_acc_(init_acc), wd_(wd) {}
  int state_per_value() const override { return 1; }
  void InitState(const float*, float* state, int dim) const override {
    for (int i = 0; i < dim; ++i) state[i] = init_acc_;
  }
  void ApplyScaled(const void* grad_bytes, int dim, int64_t, float lr_scale, float* __restrict w,
                   float* __restrict acc) const override {
    const char* __restrict grad = static_cast<const char*>(grad_bytes);
    const float lr = lr_ * lr_scale;
    for (int i = 0; i < dim; ++i) {
      const float g = Decayed(FloatAt(grad, i), w[i], wd_);
      acc[i] += g * g;
      w[i] -= lr * g / (std::sqrt(acc[i]) + eps_);
    }
  }

 private:
  const float lr_, eps_, init_acc_, wd_;
};

// Kingma & Ba (2015), with bias correction by the row's own update count.
class Adam : public RowOptimizer {
 public:
  Adam(float lr, float b1, float b2, float eps, float wd)
      : lr_(lr), b1_(b1), b2_(b2), eps_(eps), wd_(wd) {}
  int state_per_value() const override { return 2; }
  void InitState(const float*, float* state, int dim) const override {
    for (int i = 0; i < 2 * dim; ++i) state[i] = 0.0f;
  }
  void ApplyScaled(const void* grad_bytes, int dim, int64_t step, float lr_scale,
                   float* __restrict w, float* state) const override {
    const char* __restrict grad = static_cast<const char*>(grad_bytes);
    const float lr = lr_ * lr_scale;
    float* __restrict m = state;
    float* __restrict v = state + dim;
    const double t = static_cast<double>(step);
    const float c1 = static_cast<float>(1.0 - std::pow(static_cast<double>(b1_), t));
    const float c2 = static_cast<float>(1.0 - std::pow(static_cast<double>(b2_), t));
    const float b1 = b1_, b2 = b2_, eps = eps_, wd = wd_;
    for (int i = 0; i < dim; ++i) {
      const float g = Decayed(FloatAt(grad, i), w[i], wd);
      const float mi = b1 * m[i] + (1.0f - b1) * g;
      const float vi = b2 * v[i] + (1.0f - b2) * g * g;
      m[i] = mi;
      v[i] = vi;
      w[i] -= lr * (mi / c1) / (std::sqrt(vi / c2) + eps);
    }
  }

 private:
  const float lr_, b1_, b2_, eps_, wd_;
};

// FTRL-Proximal (McMahan et al. 2013, "Ad Click Prediction", algorithm 1), per coordinate.
// State: z then n. The weight is a closed form of (z, n); InitState chooses z so that the closed
// form reproduces the initialized value while n = 0.
class Ftrl : public RowOptimizer {
 public:
  Ftrl(float alpha, float beta, float l1, float l2)
      : alpha_(alpha), beta_(beta), l1_(l1), l2_(l2) {}
  int state_per_value() const override { return 2; }
  void InitState(const float* w, float* state, int dim) const override {
    float* z = state;
    float* n = state + dim;
    const float denom = beta_ / alpha_ + l2_;
    for (int i = 0; i < dim; ++i) {
      n[i] = 0.0f;
      z[i] = w[i] == 0.0f ? 0.0f : -w[i] * denom - (w[i] > 0 ? l1_ : -l1_);
    }
  }
  void ApplyScaled(const void* grad_bytes, int dim, int64_t, float lr_scale, float* __restrict w,
                   float* state) const override {
    const char* __restrict grad = static_cast<const char*>(grad_bytes);
    const float alpha = alpha_ * lr_scale;
    float* __restrict z = state;
    float* __restrict n = state + dim;
    const float beta = beta_, l1 = l1_, l2 = l2_;
    for (int i = 0; i < dim; ++i) {
      const float g = FloatAt(grad, i);
      const float n_new = n[i] + g * g;
      const float sigma = (std::sqrt(n_new) - std::sqrt(n[i])) / alpha;
      const float zi = z[i] + (g - sigma * w[i]);
      z[i] = zi;
      n[i] = n_new;
      // Both sides computed, one selected: a branch-free loop the compiler vectorizes.
      const float sign = zi < 0 ? -1.0f : 1.0f;
      const float shrunk = -(zi - sign * l1) / ((beta + std::sqrt(n_new)) / alpha + l2);
      w[i] = std::fabs(zi) <= l1 ? 0.0f : shrunk;
    }
  }

 private:
  const float alpha_, beta_, l1_, l2_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RowOptimizer>> RowOptimizer::Create(const OptimizerSpec& spec) {
  // Every value is checked once, in common/ (the scheduler refuses the same ones at submit).
  if (absl::Status s = ValidateOptimizerSpec(spec); !s.ok()) return s;
  const float lr = spec.has_learning_rate() ? spec.learning_rate() : 0.01f;
  const float wd = spec.has_weight_decay() ? spec.weight_decay() : 0.0f;
  switch (spec.kind()) {
    case OptimizerSpec::SGD:
      return std::unique_ptr<RowOptimizer>(new Sgd(lr, wd));
    case OptimizerSpec::MOMENTUM:
      return std::unique_ptr<RowOptimizer>(
          new Momentum(lr, spec.has_momentum() ? spec.momentum() : 0.9f, wd));
    case OptimizerSpec::ADAGRAD:
      return std::unique_ptr<RowOptimizer>(
          new Adagrad(lr, spec.has_epsilon() ? spec.epsilon() : 1e-10f,
                      spec.has_initial_accumulator() ? spec.initial_accumulator() : 0.1f, wd));
    case OptimizerSpec::ADAM:
      return std::unique_ptr<RowOptimizer>(new Adam(
          lr, spec.has_beta1() ? spec.beta1() : 0.9f, spec.has_beta2() ? spec.beta2() : 0.999f,
          spec.has_epsilon() ? spec.epsilon() : 1e-8f, wd));
    case OptimizerSpec::FTRL:
      return std::unique_ptr<RowOptimizer>(
          new Ftrl(lr, spec.has_ftrl_beta() ? spec.ftrl_beta() : 1.0f,
                   spec.has_l1() ? spec.l1() : 0.0f, spec.has_l2() ? spec.l2() : 0.0f));
    default:  // refused by ValidateOptimizerSpec
      return absl::InvalidArgumentError("optimizer.kind is unknown");
  }
}

}  // namespace ps
