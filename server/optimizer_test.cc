#include "server/optimizer.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

using v1::OptimizerSpec;

// The row every reference run starts from, and the three gradients applied to it.
const std::vector<float> kW0 = {0.5f, -1.0f, 2.0f};
const std::vector<std::vector<float>> kGrads = {
    {0.1f, -0.2f, 0.3f}, {-0.4f, 0.5f, 0.6f}, {0.7f, 0.8f, -0.9f}};

std::unique_ptr<RowOptimizer> MustCreate(const OptimizerSpec& spec) {
  auto opt = RowOptimizer::Create(spec);
  EXPECT_TRUE(opt.ok()) << opt.status();
  return opt.ok() ? std::move(*opt) : nullptr;
}

// Runs InitState on `w0`, then one Apply per gradient (steps 1, 2, ...); returns the values.
std::vector<float> ApplySteps(const RowOptimizer& opt, const std::vector<float>& w0,
                              const std::vector<std::vector<float>>& grads,
                              int64_t first_step = 1) {
  const int dim = static_cast<int>(w0.size());
  std::vector<float> w = w0;
  std::vector<float> state(dim * opt.state_per_value() + 1, -12345.0f);
  opt.InitState(w.data(), state.data(), dim);
  int64_t step = first_step;
  for (const auto& g : grads) opt.Apply(g.data(), dim, step++, w.data(), state.data());
  // The optimizer never writes past its declared state.
  EXPECT_EQ(state.back(), -12345.0f);
  return w;
}

void ExpectRowNear(const std::vector<float>& actual, const std::vector<double>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], 1e-6 * std::abs(expected[i]) + 1e-9) << "value " << i;
  }
}

// The reference values below were computed independently with python3 in plain double-precision
// math (hyperparameters and inputs first rounded to float32, as the C++ code stores them),
// implementing each rule from its paper / the PyTorch docs; a variant rounding every intermediate
// to float32 agreed to < 1.1e-7 relative. w0 = {0.5, -1, 2}; gradients {0.1, -0.2, 0.3},
// {-0.4, 0.5, 0.6}, {0.7, 0.8, -0.9} at steps t = 1, 2, 3. Per coordinate, the script did:
//   f32 = lambda x: struct.unpack('f', struct.pack('f', x))[0]  # applied to w0, g, lr, ...
//   sgd:      w -= lr * (g + wd * w)
//   momentum: v = mu * v + g + wd * w;  w -= lr * v                          (v0 = 0)
//   adagrad:  g += wd * w;  acc += g * g;  w -= lr * g / (sqrt(acc) + eps)  (acc0 = 0.1)
//   adam:     g += wd * w;  m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g * g
//             w -= lr * (m / (1 - b1**t)) / (sqrt(v / (1 - b2**t)) + eps)  (m0 = v0 = 0)
//   ftrl:     z0 = -w0 * (beta / lr + l2) - copysign(l1, w0) if w0 else 0;  n0 = 0
//             sigma = (sqrt(n + g * g) - sqrt(n)) / lr;  z += g - sigma * w;  n += g * g
//             w = 0 if abs(z) <= l1 else -(z - copysign(l1, z)) / ((beta + sqrt(n)) / lr + l2)

TEST(OptimizerTest, SgdWithWeightDecayMatchesReference) {
  OptimizerSpec spec;
  spec.set_kind(OptimizerSpec::SGD);
  spec.set_learning_rate(0.1f);
  spec.set_weight_decay(0.01f);
  auto opt = MustCreate(spec);
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(opt->state_per_value(), 0);
  // w -= lr * (g + wd * w)
  ExpectRowNear(ApplySteps(*opt, kW0, kGrads), {0.458481491, -1.10699298, 1.99412596});
}

TEST(OptimizerTest, MomentumWithWeightDecayMatchesReference) {
  OptimizerSpec spec;
  spec.set_kind(OptimizerSpec::MOMENTUM);
  spec.set_learning_rate(0.1f);
  spec.set_momentum(0.9f);
  spec.set_weight_decay(0.01f);
  auto opt = MustCreate(spec);
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(opt->state_per_value(), 1);
  // v = mu * v + (g + wd * w); w -= lr * v
  ExpectRowNear(ApplySteps(*opt, kW0, kGrads), {0.476095391, -1.11522078, 1.88366356});
}

TEST(OptimizerTest, AdagradWithWeightDecayMatchesReference) {
  OptimizerSpec spec;
  spec.set_kind(OptimizerSpec::ADAGRAD);
  spec.set_learning_rate(0.1f);
  spec.set_epsilon(1e-10f);
  spec.set_initial_accumulator(0.1f);
  spec.set_weight_decay(0.01f);
  auto opt = MustCreate(spec);
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(opt->state_per_value(), 1);
  // g' = g + wd * w; acc += g'^2; w -= lr * g' / (sqrt(acc) + eps), acc starting at 0.1
  ExpectRowNear(ApplySteps(*opt, kW0, kGrads), {0.464291684, -1.10240961, 1.92347308});
}

TEST(OptimizerTest, AdamWithWeightDecayMatchesReference) {
  OptimizerSpec spec;
  spec.set_kind(OptimizerSpec::ADAM);
  spec.set_learning_rate(0.01f);
  spec.set_beta1(0.9f);
  spec.set_beta2(0.999f);
  spec.set_epsilon(1e-8f);
  spec.set_weight_decay(0.01f);
  auto opt = MustCreate(spec);
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(opt->state_per_value(), 2);
  // Kingma & Ba, algorithm 1, with g' = g + wd * w.
  ExpectRowNear(ApplySteps(*opt, kW0, kGrads), {0.492065967, -1.00131511, 1.98067353});
}

TEST(OptimizerTest, AdamBiasCorrectionMakesTheFirstStepAboutLearningRate) {
  OptimizerSpec spec;
  spec.set_kind(OptimizerSpec::ADAM);
  spec.set_learning_rate(0.01f);
  auto opt = MustCreate(spec);  // default betas 0.9 / 0.999, eps 1e-8
  ASSERT_NE(opt, nullptr);
  // With bias correction m_hat = g and v_hat = g^2 at step 1: w moves by lr * sign(g).
  ExpectRowNear(ApplySteps(*opt, kW0, {kGrads[0]}), {0.490000001, -0.990000001, 1.99});
  // The same fresh state updated as if at a late step (no correction left) moves by
  // lr * 0.1 / sqrt(0.001) = 3.162 lr instead: the step count really drives the correction.
  const std::vector<float> late = ApplySteps(*opt, kW0, {kGrads[0]}, /*first_step=*/1000000);
  EXPECT_NEAR(late[0], 0.5 - 0.01 * 0.1 / std::sqrt(0.001), 1e-4);
  EXPECT_NEAR(late[1], -1.0 + 0.01 * 0.1 / std::sqrt(0.001), 1e-4);
}

TEST(OptimizerTest, FtrlFromNonZeroInitialValuesMatchesReference) {
  OptimizerSpec spec;
  spec.set_kind(OptimizerSpec::FTRL);
  spec.set_learning_rate(0.1f);  // alpha
  spec.set_ftrl_beta(1.0f);
  spec.set_l1(0.1f);
  spec.set_l2(0.01f);
  auto opt = MustCreate(spec);
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(opt->state_per_value(), 2);
  // McMahan et al. 2013, algorithm 1, with z chosen so that (z, n = 0) gives w0.
  ExpectRowNear(ApplySteps(*opt, kW0, kGrads), {0.480618251, -1.05652985, 1.9834347});
  // From an all-zero row.
  ExpectRowNear(ApplySteps(*opt, {0, 0, 0}, kGrads),
                {-0.0134212853, -0.0518651496, -0.00887890149});
}

TEST(OptimizerTest, FtrlL1KeepsWeightsAtExactlyZero) {
  OptimizerSpec spec;
  spec.set_kind(OptimizerSpec::FTRL);
  spec.set_learning_rate(0.1f);
  spec.set_l1(1.0f);
  auto opt = MustCreate(spec);
  ASSERT_NE(opt, nullptr);
  // Summed gradients per coordinate: 0.4, 1.1, 0.0. Only |z| = 1.1 > l1 leaves zero (reference
  // from the script above: -0.00509070392); the others stay exactly 0.
  const std::vector<float> w = ApplySteps(*opt, {0, 0, 0}, kGrads);
  EXPECT_EQ(w[0], 0.0f);
  EXPECT_NEAR(w[1], -0.00509070392, 1e-6 * 0.00509070392);
  EXPECT_EQ(w[2], 0.0f);
  // After the first two steps every |z| <= 1: the whole row is still zero.
  EXPECT_EQ(ApplySteps(*opt, {0, 0, 0}, {kGrads[0], kGrads[1]}), std::vector<float>({0, 0, 0}));
}

TEST(OptimizerTest, FtrlInitStateReproducesTheInitialValues) {
  OptimizerSpec spec;
  spec.set_kind(OptimizerSpec::FTRL);
  spec.set_learning_rate(0.05f);
  spec.set_ftrl_beta(0.5f);
  spec.set_l1(0.3f);
  spec.set_l2(0.2f);
  auto opt = MustCreate(spec);
  ASSERT_NE(opt, nullptr);
  const std::vector<float> w0 = {0.5f, -1.0f, 2.0f, 0.0f, -0.001f, 123.0f};
  // A zero gradient leaves the weights where the initializer put them, step after step.
  const std::vector<float> w =
      ApplySteps(*opt, w0, {std::vector<float>(6, 0.0f), std::vector<float>(6)});
  for (size_t i = 0; i < w0.size(); ++i) {
    EXPECT_NEAR(w[i], w0[i], 1e-6 * std::abs(w0[i])) << "value " << i;
  }
}

TEST(OptimizerTest, ZeroGradientWithoutDecayLeavesEveryOptimizerStill) {
  for (auto kind :
       {OptimizerSpec::SGD, OptimizerSpec::MOMENTUM, OptimizerSpec::ADAGRAD, OptimizerSpec::ADAM}) {
    OptimizerSpec spec;
    spec.set_kind(kind);
    auto opt = MustCreate(spec);
    ASSERT_NE(opt, nullptr);
    EXPECT_EQ(ApplySteps(*opt, kW0, {{0, 0, 0}, {0, 0, 0}}), kW0) << OptimizerSpec::Kind_Name(kind);
  }
}

TEST(OptimizerTest, WeightDecayShrinksWeightsUnderAZeroGradient) {
  OptimizerSpec spec;
  spec.set_kind(OptimizerSpec::SGD);
  spec.set_learning_rate(0.5f);
  spec.set_weight_decay(0.25f);
  auto opt = MustCreate(spec);
  ASSERT_NE(opt, nullptr);
  // w *= (1 - lr * wd) = 0.875 per step; exact in float.
  EXPECT_EQ(ApplySteps(*opt, {8.0f, -4.0f}, {{0, 0}, {0, 0}}),
            std::vector<float>({6.125f, -3.0625f}));
}

TEST(OptimizerTest, UnsetFieldsTakeTheDocumentedDefaults) {
  // SGD, lr 0.01.
  auto sgd = MustCreate(OptimizerSpec());
  ASSERT_NE(sgd, nullptr);
  ExpectRowNear(ApplySteps(*sgd, {0.0f}, {{1.0f}}), {-0.01});
  // MOMENTUM, lr 0.01, momentum 0.9: v = 1, then 1.9; w = -0.01, then -0.029.
  OptimizerSpec spec;
  spec.set_kind(OptimizerSpec::MOMENTUM);
  auto momentum = MustCreate(spec);
  ASSERT_NE(momentum, nullptr);
  ExpectRowNear(ApplySteps(*momentum, {0.0f}, {{1.0f}, {1.0f}}), {-0.029});
  // ADAGRAD, lr 0.01, initial accumulator 0.1: acc = 1.1, w = -0.01 / sqrt(1.1).
  spec.set_kind(OptimizerSpec::ADAGRAD);
  auto adagrad = MustCreate(spec);
  ASSERT_NE(adagrad, nullptr);
  ExpectRowNear(ApplySteps(*adagrad, {0.0f}, {{1.0f}}), {-0.01 / std::sqrt(1.1)});
}

struct BadSpec {
  std::string name;
  OptimizerSpec spec;
  std::string field;  // the message must name it
};

std::vector<BadSpec> BadSpecs() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<BadSpec> bad;
  auto add = [&bad](std::string name, OptimizerSpec::Kind kind, std::string field, auto&& set) {
    OptimizerSpec spec;
    spec.set_kind(kind);
    set(spec);
    bad.push_back({std::move(name), std::move(spec), std::move(field)});
  };
  add("negative lr", OptimizerSpec::SGD, "learning_rate",
      [](OptimizerSpec& s) { s.set_learning_rate(-0.1f); });
  add("zero lr", OptimizerSpec::ADAM, "learning_rate",
      [](OptimizerSpec& s) { s.set_learning_rate(0.0f); });
  add("NaN lr", OptimizerSpec::MOMENTUM, "learning_rate",
      [nan](OptimizerSpec& s) { s.set_learning_rate(nan); });
  add("infinite lr", OptimizerSpec::SGD, "learning_rate",
      [](OptimizerSpec& s) { s.set_learning_rate(INFINITY); });
  add("negative weight decay", OptimizerSpec::SGD, "weight_decay",
      [](OptimizerSpec& s) { s.set_weight_decay(-1.0f); });
  add("momentum 1", OptimizerSpec::MOMENTUM, "momentum",
      [](OptimizerSpec& s) { s.set_momentum(1.0f); });
  add("negative momentum", OptimizerSpec::MOMENTUM, "momentum",
      [](OptimizerSpec& s) { s.set_momentum(-0.5f); });
  add("beta1 1", OptimizerSpec::ADAM, "beta1", [](OptimizerSpec& s) { s.set_beta1(1.0f); });
  add("beta1 2", OptimizerSpec::ADAM, "beta1", [](OptimizerSpec& s) { s.set_beta1(2.0f); });
  add("beta2 NaN", OptimizerSpec::ADAM, "beta2", [nan](OptimizerSpec& s) { s.set_beta2(nan); });
  add("adam epsilon 0", OptimizerSpec::ADAM, "epsilon",
      [](OptimizerSpec& s) { s.set_epsilon(0.0f); });
  add("adagrad negative accumulator", OptimizerSpec::ADAGRAD, "initial_accumulator",
      [](OptimizerSpec& s) { s.set_initial_accumulator(-1.0f); });
  add("adagrad division by zero", OptimizerSpec::ADAGRAD, "epsilon", [](OptimizerSpec& s) {
    s.set_epsilon(0.0f);
    s.set_initial_accumulator(0.0f);
  });
  add("ftrl negative l1", OptimizerSpec::FTRL, "l1", [](OptimizerSpec& s) { s.set_l1(-1.0f); });
  add("ftrl negative l2", OptimizerSpec::FTRL, "l2", [](OptimizerSpec& s) { s.set_l2(-1.0f); });
  add("ftrl division by zero", OptimizerSpec::FTRL, "ftrl_beta", [](OptimizerSpec& s) {
    s.set_ftrl_beta(0.0f);
    s.set_l2(0.0f);
  });
  add("unknown kind", static_cast<OptimizerSpec::Kind>(17), "kind", [](OptimizerSpec&) {});
  return bad;
}

TEST(OptimizerTest, CreateRejectsBadSpecsNamingTheField) {
  for (const BadSpec& b : BadSpecs()) {
    SCOPED_TRACE(b.name);
    auto opt = RowOptimizer::Create(b.spec);
    ASSERT_FALSE(opt.ok());
    EXPECT_EQ(opt.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(opt.status().message().find(b.field), std::string::npos) << opt.status();
  }
}

TEST(OptimizerTest, CreateAcceptsBoundaryValues) {
  OptimizerSpec spec;
  spec.set_kind(OptimizerSpec::ADAM);
  spec.set_beta1(0.0f);
  spec.set_beta2(0.0f);
  spec.set_weight_decay(0.0f);
  EXPECT_TRUE(RowOptimizer::Create(spec).ok());
  spec.Clear();
  spec.set_kind(OptimizerSpec::MOMENTUM);
  spec.set_momentum(0.0f);
  EXPECT_TRUE(RowOptimizer::Create(spec).ok());
  spec.Clear();
  spec.set_kind(OptimizerSpec::FTRL);
  spec.set_ftrl_beta(0.0f);
  spec.set_l2(0.5f);  // l2 alone keeps the first denominator positive
  EXPECT_TRUE(RowOptimizer::Create(spec).ok());
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// The bit-for-bit tests below: a row of 37 values (the vector body and a scalar tail) and its
// gradients for three steps, and a spec of each kind with its regularization on.
constexpr int kBitDim = 37;
struct ThreeSteps {
  std::vector<float> w0 = std::vector<float>(kBitDim);
  std::vector<std::vector<float>> grads =
      std::vector<std::vector<float>>(3, std::vector<float>(kBitDim));
  ThreeSteps() {
    for (int i = 0; i < kBitDim; ++i) {
      w0[i] = (i % 3 == 0) ? 0.0f : 0.37f * static_cast<float>(i - 18);
      for (int s = 0; s < 3; ++s) grads[s][i] = std::sin(1.7f * i + s) * (s + 1);
    }
  }
};
constexpr OptimizerSpec::Kind kEveryKind[] = {OptimizerSpec::SGD, OptimizerSpec::MOMENTUM,
                                              OptimizerSpec::ADAGRAD, OptimizerSpec::ADAM,
                                              OptimizerSpec::FTRL};
OptimizerSpec BitTestSpec(OptimizerSpec::Kind kind) {
  OptimizerSpec spec;
  spec.set_kind(kind);
  spec.set_learning_rate(0.05f);
  if (kind == OptimizerSpec::FTRL) {
    spec.set_l1(0.2f);
    spec.set_l2(0.1f);
  } else {
    spec.set_weight_decay(0.01f);
  }
  return spec;
}

// The update loops are vectorized (optimizer.cc): a row of 37 values runs the vector body and a
// scalar tail. Each value must come out bit for bit as when its coordinate is updated alone
// (a row of 1: the scalar code), for every optimizer, over three steps.
TEST(OptimizerTest, VectorizedRowsMatchTheScalarCodeBitForBit) {
  constexpr int kDim = kBitDim;
  const ThreeSteps in;
  const std::vector<float>& w0 = in.w0;
  const std::vector<std::vector<float>>& grads = in.grads;
  for (auto kind : kEveryKind) {
    auto opt = MustCreate(BitTestSpec(kind));
    ASSERT_NE(opt, nullptr);
    const std::vector<float> wide = ApplySteps(*opt, w0, grads);
    for (int i = 0; i < kDim; ++i) {
      std::vector<std::vector<float>> one(3);
      for (int s = 0; s < 3; ++s) one[s] = {grads[s][i]};
      const std::vector<float> alone = ApplySteps(*opt, {w0[i]}, one);
      uint32_t a, b;
      std::memcpy(&a, &wide[i], 4);
      std::memcpy(&b, &alone[0], 4);
      EXPECT_EQ(a, b) << OptimizerSpec::Kind_Name(kind) << " value " << i << ": " << wide[i]
                      << " vs " << alone[0];
    }
  }
}

// A pushed row is applied where gRPC received it, at any address (server/table_store.h,
// BlockView::Grad): each optimizer must read a gradient that starts 1, 2 or 3 bytes past an
// aligned address exactly as the aligned one, bit for bit, over three steps.
TEST(OptimizerTest, MisalignedGradientsGiveTheAlignedResultBitForBit) {
  constexpr int kDim = kBitDim;
  const ThreeSteps in;
  const std::vector<float>& w0 = in.w0;
  const std::vector<std::vector<float>>& grads = in.grads;
  for (auto kind : kEveryKind) {
    auto opt = MustCreate(BitTestSpec(kind));
    ASSERT_NE(opt, nullptr);
    const std::vector<float> aligned = ApplySteps(*opt, w0, grads);
    for (size_t shift : {1, 2, 3}) {
      // Each gradient copied `shift` bytes into a buffer that starts aligned.
      std::vector<std::vector<float>> buffers(3, std::vector<float>(kDim + 1));
      std::vector<float> w = w0;
      std::vector<float> state(kDim * opt->state_per_value() + 1);
      opt->InitState(w.data(), state.data(), kDim);
      for (int s = 0; s < 3; ++s) {
        char* at = reinterpret_cast<char*>(buffers[s].data()) + shift;
        std::memcpy(at, grads[s].data(), kDim * sizeof(float));
        opt->Apply(at, kDim, s + 1, w.data(), state.data());
      }
      EXPECT_EQ(std::memcmp(w.data(), aligned.data(), kDim * sizeof(float)), 0)
          << OptimizerSpec::Kind_Name(kind) << " shifted by " << shift;
    }
  }
}

}  // namespace
}  // namespace ps
