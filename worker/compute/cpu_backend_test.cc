#include "worker/compute/cpu_backend.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/compute/compute_backend.h"
#include "worker/testing/reference_gemm.h"

namespace ps {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> RandomMatrix(size_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(size);
  for (float& x : v) x = dist(rng);
  return v;
}

using reference::GemmShape;
using reference::NaiveGemm;

struct AlphaBeta {
  float alpha, beta;
};

// Every test runs on both kernel sets: OpenBLAS (the default) and the reference.
CpuBackendOptions WithKernels(CpuKernels kernels) {
  CpuBackendOptions options;
  options.kernels = kernels;
  return options;
}

std::string KernelsName(CpuKernels kernels) { return std::string(CpuKernelsName(kernels)); }

// (trans_a, trans_b, shape, kernels).
class GemmTest : public testing::TestWithParam<std::tuple<bool, bool, GemmShape, CpuKernels>> {
 protected:
  std::unique_ptr<ComputeBackend> Backend() const {
    return MakeCpuBackend(WithKernels(std::get<3>(GetParam())));
  }
};

TEST_P(GemmTest, MatchesNaiveTripleLoop) {
  const auto [trans_a, trans_b, shape, kernels] = GetParam();
  const auto [m, n, k] = shape;
  const std::vector<float> a = RandomMatrix(static_cast<size_t>(m) * k, 1);
  const std::vector<float> b = RandomMatrix(static_cast<size_t>(k) * n, 2);
  const std::vector<float> c0 = RandomMatrix(static_cast<size_t>(m) * n, 3);
  const AlphaBeta cases[] = {{1.0f, 0.0f},   {1.0f, 1.0f}, {0.5f, -2.0f},
                             {-1.5f, 0.25f}, {0.0f, 0.5f}, {0.0f, 0.0f}};
  std::unique_ptr<ComputeBackend> backend = Backend();
  for (const AlphaBeta& ab : cases) {
    SCOPED_TRACE(absl::StrCat("alpha=", ab.alpha, " beta=", ab.beta));
    // With beta == 0, C must not be read: fill it with NaN garbage.
    std::vector<float> c = ab.beta == 0.0f ? std::vector<float>(c0.size(), kNaN) : c0;
    std::vector<double> want(c0.begin(), c0.end());
    std::vector<double> magnitude;
    NaiveGemm(trans_a, trans_b, m, n, k, ab.alpha, a, b, ab.beta, want, magnitude);
    backend->Gemm(trans_a, trans_b, m, n, k, ab.alpha, a.data(), b.data(), ab.beta, c.data());
    int failures = 0;
    for (size_t i = 0; i < c.size() && failures < 5; ++i) {
      // Float summation error grows at most linearly in k.
      const double tolerance = 4.0 * (k + 2) * std::numeric_limits<float>::epsilon() * magnitude[i];
      if (!(std::fabs(c[i] - want[i]) <= tolerance)) {
        ++failures;
        ADD_FAILURE() << "C[" << i / n << ", " << i % n << "] = " << c[i] << ", want " << want[i]
                      << " (tolerance " << tolerance << ")";
      }
    }
  }
}

TEST_P(GemmTest, BetaOneAccumulatesTwoProducts) {
  const auto [trans_a, trans_b, shape, kernels] = GetParam();
  const auto [m, n, k] = shape;
  const std::vector<float> a = RandomMatrix(static_cast<size_t>(m) * k, 4);
  const std::vector<float> b = RandomMatrix(static_cast<size_t>(k) * n, 5);
  std::unique_ptr<ComputeBackend> backend = Backend();
  std::vector<float> once(static_cast<size_t>(m) * n, kNaN);
  backend->Gemm(trans_a, trans_b, m, n, k, 1.0f, a.data(), b.data(), 0.0f, once.data());
  std::vector<float> twice = once;
  backend->Gemm(trans_a, trans_b, m, n, k, 1.0f, a.data(), b.data(), 1.0f, twice.data());
  std::vector<double> product(once.size()), magnitude;
  NaiveGemm(trans_a, trans_b, m, n, k, 1.0, a, b, 0.0, product, magnitude);
  // Blocks along k add partial sums onto C, so the rounding differs from 2 * once.
  for (size_t i = 0; i < once.size(); ++i) {
    ASSERT_NEAR(twice[i], 2.0 * once[i],
                16.0 * (k + 2) * std::numeric_limits<float>::epsilon() * magnitude[i])
        << "at " << i;
  }
}

std::string GemmTestName(const testing::TestParamInfo<GemmTest::ParamType>& info) {
  const auto [trans_a, trans_b, shape, kernels] = info.param;
  return absl::StrCat(KernelsName(kernels), "_", trans_a ? "At" : "A", trans_b ? "Bt" : "B", "_",
                      shape.m, "x", shape.n, "x", shape.k);
}

// Sizes around the tiles (4 x 8) and blocks (128 x 512, depth 256) of the reference GEMM.
INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmTest,
    testing::Combine(testing::Bool(), testing::Bool(),
                     testing::Values(GemmShape{1, 1, 1}, GemmShape{5, 7, 3}, GemmShape{4, 8, 16},
                                     GemmShape{3, 9, 600}, GemmShape{130, 513, 257},
                                     GemmShape{17, 1, 33}, GemmShape{1, 19, 258}),
                     testing::Values(CpuKernels::kOpenBlas, CpuKernels::kReference)),
    GemmTestName);

class CpuBackendTest : public testing::TestWithParam<CpuKernels> {
 protected:
  std::unique_ptr<ComputeBackend> Backend() const {
    return MakeCpuBackend(WithKernels(GetParam()));
  }
};

TEST_P(CpuBackendTest, NameIsCpu) { EXPECT_EQ(Backend()->name(), "cpu"); }

TEST_P(CpuBackendTest, GemmReusesScratchAcrossShrinkingAndGrowingShapes) {
  std::unique_ptr<ComputeBackend> backend = Backend();
  const GemmShape shapes[] = {{130, 513, 257}, {2, 3, 4}, {64, 70, 300}, {1, 1, 1}};
  for (const GemmShape& s : shapes) {
    SCOPED_TRACE(absl::StrCat(s.m, "x", s.n, "x", s.k));
    const std::vector<float> a = RandomMatrix(static_cast<size_t>(s.m) * s.k, 6);
    const std::vector<float> b = RandomMatrix(static_cast<size_t>(s.k) * s.n, 7);
    std::vector<float> c(static_cast<size_t>(s.m) * s.n, kNaN);
    backend->Gemm(false, true, s.m, s.n, s.k, 1.0f, a.data(), b.data(), 0.0f, c.data());
    std::vector<double> want(c.size(), 0.0), magnitude;
    NaiveGemm(false, true, s.m, s.n, s.k, 1.0, a, b, 0.0, want, magnitude);
    for (size_t i = 0; i < c.size(); ++i) {
      ASSERT_NEAR(c[i], want[i], 4.0 * (s.k + 2) * 1.2e-7 * magnitude[i]) << "at " << i;
    }
  }
}

TEST_P(CpuBackendTest, GemmWithZeroSizesReadsNothing) {
  std::unique_ptr<ComputeBackend> backend = Backend();
  // m or n zero: nothing is read or written, so null pointers are fine.
  backend->Gemm(false, false, 0, 5, 3, 1.0f, nullptr, nullptr, 0.0f, nullptr);
  backend->Gemm(true, true, 5, 0, 3, 1.0f, nullptr, nullptr, 1.0f, nullptr);
  // k zero: C = beta * C without touching A or B.
  std::vector<float> c = {kNaN, kNaN, kNaN, kNaN};
  backend->Gemm(false, false, 2, 2, 0, 1.0f, nullptr, nullptr, 0.0f, c.data());
  EXPECT_EQ(c, std::vector<float>({0, 0, 0, 0}));
  c = {1, 2, 3, 4};
  backend->Gemm(true, false, 2, 2, 0, 1.0f, nullptr, nullptr, 0.5f, c.data());
  EXPECT_EQ(c, std::vector<float>({0.5f, 1, 1.5f, 2}));
}

TEST_P(CpuBackendTest, GemmSmallHandComputed) {
  std::unique_ptr<ComputeBackend> backend = Backend();
  // A = [1 2 3; 4 5 6] (2 x 3), B = [1 0; 0 1; 1 1] (3 x 2): A * B = [4 5; 10 11].
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<float> b = {1, 0, 0, 1, 1, 1};
  std::vector<float> c = {kNaN, kNaN, kNaN, kNaN};
  backend->Gemm(false, false, 2, 2, 3, 1.0f, a.data(), b.data(), 0.0f, c.data());
  EXPECT_EQ(c, std::vector<float>({4, 5, 10, 11}));
  // A^T * A with A stored 2 x 3: 3 x 3 result.
  std::vector<float> ata(9, kNaN);
  backend->Gemm(true, false, 3, 3, 2, 1.0f, a.data(), a.data(), 0.0f, ata.data());
  EXPECT_EQ(ata, std::vector<float>({17, 22, 27, 22, 29, 36, 27, 36, 45}));
  // A * A^T: 2 x 2, scaled and accumulated onto [1 1; 1 1].
  std::vector<float> aat = {1, 1, 1, 1};
  backend->Gemm(false, true, 2, 2, 3, 2.0f, a.data(), a.data(), 1.0f, aat.data());
  EXPECT_EQ(aat, std::vector<float>({29, 65, 65, 155}));
}

TEST_P(CpuBackendTest, AddBias) {
  std::unique_ptr<ComputeBackend> backend = Backend();
  std::vector<float> y = {1, 2, 3, -1, -2, -3};
  const std::vector<float> bias = {10, 20, 30};
  backend->AddBias(2, 3, bias.data(), y.data());
  EXPECT_EQ(y, std::vector<float>({11, 22, 33, 9, 18, 27}));
  backend->AddBias(0, 3, bias.data(), y.data());  // no rows: unchanged
  EXPECT_EQ(y, std::vector<float>({11, 22, 33, 9, 18, 27}));
}

TEST_P(CpuBackendTest, AddBiasRelu) {
  std::unique_ptr<ComputeBackend> backend = Backend();
  std::vector<float> y = {1, -2, 3, -1, 0.5f, -3, 0, 0, 0};
  const std::vector<float> bias = {0.5f, 1, -3};
  backend->AddBiasRelu(3, 3, bias.data(), y.data());
  EXPECT_EQ(y, std::vector<float>({1.5f, 0, 0, 0, 1.5f, 0, 0.5f, 1, 0}));
}

TEST_P(CpuBackendTest, ReluBackwardZeroesWhereActivationIsNotPositive) {
  std::unique_ptr<ComputeBackend> backend = Backend();
  const std::vector<float> activation = {0, 1, 0, 2.5f, 1e-30f, 0};
  std::vector<float> grad = {5, -6, 7, -8, 9, -10};
  backend->ReluBackward(6, activation.data(), grad.data());
  EXPECT_EQ(grad, std::vector<float>({0, -6, 0, -8, 9, 0}));
}

TEST_P(CpuBackendTest, BiasGradientSumsColumnsAndOverwrites) {
  std::unique_ptr<ComputeBackend> backend = Backend();
  const std::vector<float> grad = {1, 2, 3, 4, 5, 6, -1, -1, 0.5f};
  std::vector<float> bias_grad = {kNaN, kNaN, kNaN};
  backend->BiasGradient(3, 3, grad.data(), bias_grad.data());
  EXPECT_EQ(bias_grad, std::vector<float>({4, 6, 9.5f}));
  backend->BiasGradient(0, 3, nullptr, bias_grad.data());  // no rows: zeros
  EXPECT_EQ(bias_grad, std::vector<float>({0, 0, 0}));
}

TEST_P(CpuBackendTest, SoftmaxCrossEntropyOfUniformLogitsIsLogClasses) {
  std::unique_ptr<ComputeBackend> backend = Backend();
  constexpr int kBatch = 4, kClasses = 10;
  const std::vector<float> logits(kBatch * kClasses, 3.5f);
  const std::vector<int32_t> labels = {0, 3, 9, 3};
  std::vector<float> grad(logits.size(), kNaN);
  const LossStats stats = backend->SoftmaxCrossEntropy(kBatch, kClasses, logits.data(),
                                                       labels.data(), 0.5f, grad.data());
  EXPECT_NEAR(stats.loss_sum, kBatch * std::log(10.0), 1e-6);
  for (int r = 0; r < kBatch; ++r) {
    for (int j = 0; j < kClasses; ++j) {
      const float want = 0.5f * (0.1f - (j == labels[r] ? 1.0f : 0.0f));
      EXPECT_NEAR(grad[r * kClasses + j], want, 1e-6) << r << ", " << j;
    }
  }
}

TEST_P(CpuBackendTest, SoftmaxCrossEntropyHandComputed) {
  std::unique_ptr<ComputeBackend> backend = Backend();
  // softmax(1, 2, 3) = (0.0900306, 0.2447285, 0.6652410).
  const std::vector<float> logits = {1, 2, 3, 3, 2, 1, 1, 2, 3};
  const std::vector<int32_t> labels = {2, 2, 0};
  std::vector<float> grad(logits.size(), kNaN);
  const LossStats stats =
      backend->SoftmaxCrossEntropy(3, 3, logits.data(), labels.data(), 1.0f, grad.data());
  // -log(0.6652410) + -log(0.0900306) + -log(0.0900306).
  EXPECT_NEAR(stats.loss_sum, 0.4076059 + 2 * 2.4076059, 1e-6);
  EXPECT_EQ(stats.correct, 1);  // only row 0's arg-max is its label
  const std::vector<float> want = {0.0900306f,     0.2447285f, 0.6652410f - 1,
                                   0.6652410f,     0.2447285f, 0.0900306f - 1,
                                   0.0900306f - 1, 0.2447285f, 0.6652410f};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(grad[i], want[i], 1e-6) << "at " << i;
}

TEST_P(CpuBackendTest, SoftmaxCrossEntropyWithoutGradientGivesSameStats) {
  std::unique_ptr<ComputeBackend> backend = Backend();
  const std::vector<float> logits = RandomMatrix(7 * 5, 8);
  const std::vector<int32_t> labels = {0, 1, 2, 3, 4, 0, 1};
  std::vector<float> grad(logits.size());
  const LossStats with_grad =
      backend->SoftmaxCrossEntropy(7, 5, logits.data(), labels.data(), 1.0f, grad.data());
  const LossStats without =
      backend->SoftmaxCrossEntropy(7, 5, logits.data(), labels.data(), 0.0f, nullptr);
  EXPECT_EQ(with_grad.loss_sum, without.loss_sum);
  EXPECT_EQ(with_grad.correct, without.correct);
}

TEST_P(CpuBackendTest, SoftmaxCrossEntropyGradientRowsSumToZeroAndScale) {
  std::unique_ptr<ComputeBackend> backend = Backend();
  constexpr int kBatch = 6, kClasses = 7;
  const std::vector<float> logits = RandomMatrix(kBatch * kClasses, 9);
  const std::vector<int32_t> labels = {6, 0, 3, 3, 1, 5};
  std::vector<float> unit(logits.size()), scaled(logits.size());
  backend->SoftmaxCrossEntropy(kBatch, kClasses, logits.data(), labels.data(), 1.0f, unit.data());
  backend->SoftmaxCrossEntropy(kBatch, kClasses, logits.data(), labels.data(), 0.125f,
                               scaled.data());
  for (int r = 0; r < kBatch; ++r) {
    double row_sum = 0;
    for (int j = 0; j < kClasses; ++j) {
      const float g = unit[r * kClasses + j];
      row_sum += g;
      if (j == labels[r]) {
        EXPECT_LT(g, 0.0f);
      } else {
        EXPECT_GT(g, 0.0f);
      }
      EXPECT_NEAR(scaled[r * kClasses + j], 0.125f * g, 1e-7);
    }
    EXPECT_NEAR(row_sum, 0.0, 1e-6) << "row " << r;
  }
}

TEST_P(CpuBackendTest, SoftmaxCrossEntropyIsStableForHugeLogits) {
  std::unique_ptr<ComputeBackend> backend = Backend();
  const std::vector<float> logits = {1e4f,  0,     -1e4f,   // confident and right
                                     1e4f,  0,     -1e4f,   // confident and wrong by 1e4
                                     1e4f,  1e4f,  1e4f,    // a three-way tie far from zero
                                     -1e4f, -1e4f, -1e4f};  // the same, far below zero
  const std::vector<int32_t> labels = {0, 1, 1, 2};
  std::vector<float> grad(logits.size(), kNaN);
  const LossStats stats =
      backend->SoftmaxCrossEntropy(4, 3, logits.data(), labels.data(), 1.0f, grad.data());
  ASSERT_TRUE(std::isfinite(stats.loss_sum));
  EXPECT_NEAR(stats.loss_sum, 0 + 1e4 + 2 * std::log(3.0), 1e-3);
  const std::vector<float> want = {0,        0,         0,  //
                                   1,        -1,        0,  //
                                   1.0f / 3, -2.0f / 3, 1.0f / 3, 1.0f / 3, 1.0f / 3, -2.0f / 3};
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(grad[i])) << "at " << i;
    EXPECT_NEAR(grad[i], want[i], 1e-6) << "at " << i;
  }
  // Row 0 is right; row 1 is wrong. Rows 2 and 3 are ties, which the interface leaves open.
  EXPECT_GE(stats.correct, 1);
  EXPECT_LE(stats.correct, 3);
}

TEST_P(CpuBackendTest, SoftmaxCrossEntropyGradientMayAliasLogits) {
  std::unique_ptr<ComputeBackend> backend = Backend();
  constexpr int kBatch = 5, kClasses = 4;
  const std::vector<float> logits = RandomMatrix(kBatch * kClasses, 10);
  const std::vector<int32_t> labels = {3, 2, 1, 0, 3};
  std::vector<float> separate(logits.size(), kNaN);
  const LossStats want = backend->SoftmaxCrossEntropy(kBatch, kClasses, logits.data(),
                                                      labels.data(), 0.2f, separate.data());
  std::vector<float> in_place = logits;
  const LossStats got = backend->SoftmaxCrossEntropy(kBatch, kClasses, in_place.data(),
                                                     labels.data(), 0.2f, in_place.data());
  EXPECT_EQ(got.loss_sum, want.loss_sum);
  EXPECT_EQ(got.correct, want.correct);
  EXPECT_EQ(in_place, separate);
}

TEST_P(CpuBackendTest, SoftmaxCrossEntropyCountsCorrectPredictions) {
  std::unique_ptr<ComputeBackend> backend = Backend();
  const std::vector<float> logits = {0.1f,  0.9f,  0.0f,   //
                                     2.0f,  -1.0f, 1.0f,   //
                                     -5.0f, -4.0f, -3.0f,  //
                                     0.3f,  0.2f,  0.1f};
  const std::vector<int32_t> labels = {1, 0, 1, 0};
  EXPECT_EQ(backend->SoftmaxCrossEntropy(4, 3, logits.data(), labels.data(), 1.0f, nullptr).correct,
            3);
  // An empty batch has no loss and no correct rows.
  const LossStats empty = backend->SoftmaxCrossEntropy(0, 3, nullptr, nullptr, 1.0f, nullptr);
  EXPECT_EQ(empty.loss_sum, 0.0);
  EXPECT_EQ(empty.correct, 0);
}

TEST_P(CpuBackendTest, SoftmaxCrossEntropyReportsLabelsOutOfRange) {
  std::unique_ptr<ComputeBackend> backend = Backend();
  const std::vector<float> logits = {1, 2, 3, 3, 2, 1};
  const std::vector<int32_t> labels = {2, 3};  // 3 is not a class of 3
  std::vector<float> grad(logits.size(), kNaN);
  const LossStats stats =
      backend->SoftmaxCrossEntropy(2, 3, logits.data(), labels.data(), 1.0f, grad.data());
  EXPECT_NEAR(stats.loss_sum, 0.4076059, 1e-6);  // row 0 only
  EXPECT_EQ(stats.correct, 1);
  for (float g : grad) EXPECT_TRUE(std::isfinite(g));
  const absl::Status s = backend->Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("label 3"), std::string::npos) << s;
  EXPECT_TRUE(backend->Synchronize().ok()) << "the error is reported once";
}

TEST_P(CpuBackendTest, GatherAndScatterAdd) {
  std::unique_ptr<ComputeBackend> backend = Backend();
  std::vector<float> table = {0, 1, 10, 11, 20, 21};  // 3 rows of dim 2
  const std::vector<int32_t> rows = {2, 0, 2};
  std::vector<float> out(6, kNaN);
  backend->Gather(3, 2, 3, table.data(), rows.data(), out.data());
  EXPECT_EQ(out, std::vector<float>({20, 21, 0, 1, 20, 21}));
  const std::vector<float> grad = {1, 2, 3, 4, 5, 6};
  backend->ScatterAdd(3, 2, 3, grad.data(), rows.data(), table.data());
  EXPECT_EQ(table, std::vector<float>({3, 5, 10, 11, 26, 29}));  // row 2 got 1+5, 2+6
  EXPECT_TRUE(backend->Synchronize().ok());
}

TEST_P(CpuBackendTest, GatherAndScatterAddReportRowsOutOfRange) {
  std::unique_ptr<ComputeBackend> backend = Backend();
  std::vector<float> table = {0, 1, 10, 11};
  const std::vector<int32_t> rows = {1, -1, 2};
  std::vector<float> out(6, kNaN);
  backend->Gather(3, 2, 2, table.data(), rows.data(), out.data());
  EXPECT_EQ(out, std::vector<float>({10, 11, 0, 0, 0, 0}));
  EXPECT_EQ(backend->Synchronize().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<float> grad(6, 1.0f);
  backend->ScatterAdd(3, 2, 2, grad.data(), rows.data(), table.data());
  EXPECT_EQ(table, std::vector<float>({0, 1, 11, 12}));
  EXPECT_EQ(backend->Synchronize().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(CpuBackendTest, MemoryIsHostMemoryAndCopiesAreMemcpy) {
  std::unique_ptr<ComputeBackend> backend = Backend();
  EXPECT_TRUE(backend->host_memory());
  auto device = backend->Allocate(MemoryKind::kDevice, 5 * sizeof(float));
  auto staging = backend->Allocate(MemoryKind::kStaging, 5 * sizeof(float));
  ASSERT_TRUE(device.ok() && staging.ok());
  const std::vector<float> src = {1, 2, 3, 4, 5};
  backend->CopyToDevice(device->data(), src.data(), 5 * sizeof(float));
  backend->ComputeAfterCopies();
  backend->CopiesAfterCompute();
  backend->CopyToHost(staging->data(), device->data(), 5 * sizeof(float));
  ASSERT_TRUE(backend->Synchronize().ok());
  EXPECT_EQ(std::vector<float>(staging->floats(), staging->floats() + 5), src);
  auto empty = backend->Allocate(MemoryKind::kDevice, 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->data(), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Kernels, CpuBackendTest,
                         testing::Values(CpuKernels::kOpenBlas, CpuKernels::kReference),
                         [](const testing::TestParamInfo<CpuKernels>& info) {
                           return KernelsName(info.param);
                         });

TEST(CpuKernelsTest, ParseAndNameRoundTrip) {
  for (CpuKernels k : {CpuKernels::kOpenBlas, CpuKernels::kReference}) {
    EXPECT_EQ(*ParseCpuKernels(CpuKernelsName(k)), k);
  }
  EXPECT_FALSE(ParseCpuKernels("mkl").ok());
}

TEST(CpuThreadsTest, DefaultSharesTheHostAmongItsWorkers) {
  EXPECT_EQ(DefaultCpuThreads(16, 1), 16);
  EXPECT_EQ(DefaultCpuThreads(16, 4), 4);
  EXPECT_EQ(DefaultCpuThreads(2, 2), 1);
  EXPECT_EQ(DefaultCpuThreads(2, 3), 1);  // never 0
  EXPECT_EQ(DefaultCpuThreads(0, 0), 1);  // an unknown core count
}

TEST(CpuThreadsTest, SetCpuThreadsRejectsZeroAndSetsOpenBlas) {
  const int before = CpuThreads();
  EXPECT_FALSE(SetCpuThreads(0).ok());
  ASSERT_TRUE(SetCpuThreads(1).ok());
  EXPECT_EQ(CpuThreads(), 1);
  ASSERT_TRUE(SetCpuThreads(before).ok());
}

TEST(CpuThreadsTest, OpenBlasGemmOnTwoThreadsMatchesNaive) {
  const int before = CpuThreads();
  ASSERT_TRUE(SetCpuThreads(2).ok());
  const int m = 256, n = 300, k = 500;
  const std::vector<float> a = RandomMatrix(static_cast<size_t>(m) * k, 8);
  const std::vector<float> b = RandomMatrix(static_cast<size_t>(n) * k, 9);
  std::vector<float> c(static_cast<size_t>(m) * n, kNaN);
  MakeCpuBackend()->Gemm(false, true, m, n, k, 1.0f, a.data(), b.data(), 0.0f, c.data());
  std::vector<double> want(c.size(), 0.0), magnitude;
  NaiveGemm(false, true, m, n, k, 1.0, a, b, 0.0, want, magnitude);
  for (size_t i = 0; i < c.size(); ++i) {
    ASSERT_NEAR(c[i], want[i], 4.0 * (k + 2) * 1.2e-7 * magnitude[i]) << "at " << i;
  }
  ASSERT_TRUE(SetCpuThreads(before).ok());
}

TEST(CpuThreadsTest, MeasureCpuSgemmTflopsIsPositive) {
  absl::StatusOr<double> tflops = MeasureCpuSgemmTflops(32, 0.0);
  ASSERT_TRUE(tflops.ok()) << tflops.status();
  EXPECT_GT(*tflops, 0.0);
  EXPECT_FALSE(MeasureCpuSgemmTflops(0, 0.0).ok());
}

}  // namespace
}  // namespace ps
