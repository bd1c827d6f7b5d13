// GPU-vs-CPU parity: every ComputeBackend method of the CUDA backend against the CPU reference
// (or a double-precision definition), and a whole MLP training step. Every test that needs a
// device skips, saying why, where the binary was built without CUDA or no device is present.
//
// Tolerances (stated once here, used below):
//  - Elementwise kernels (AddBias, AddBiasRelu, ReluBackward, Gather): exact; the same single
//    IEEE operation per element.
//  - Sums (BiasGradient, ScatterAdd, FP32 GEMM): the order of additions differs, so
//    |gpu - want| <= 4 (k + 2) eps_fp32 * sum_i |terms_i|, the textbook bound for a sum of k
//    products, with eps_fp32 = 2^-23.
//  - Tensor-core GEMMs round each input before multiplying: TF32 and FP16 keep 10 mantissa bits
//    (relative error of a product <= 2 * 2^-10 even when truncating), BF16 keeps 7 (2 * 2^-7).
//    Tolerance: that relative error times sum_i |terms_i|, plus the FP32 bound.
//  - SoftmaxCrossEntropy: loss within 1e-9 relative (both in double), gradients within 1e-6.
//  - spam_logreg's step (SpamBackendStep): as stated in worker/testing/spam_reference.h.
//  - Whole MLP step in FP32: loss within 1e-5 relative, every gradient within
//    1e-4 * (largest gradient of its tensor) + 1e-7. TF32: loss within 1e-2 relative; a few
//    hidden units whose pre-activation is within TF32's rounding of 0 flip their ReLU, adding or
//    dropping whole terms of their gradient columns, so each tensor is compared in L2 norm
//    (within 5e-2 relative) with a loose per-element cap (0.15 of the largest). A simulation
//    of this test's data with TF32 rounding gave at most 0.019 in norm.
#include "worker/compute/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
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
#include "worker/compute/cpu_backend.h"
#include "worker/models/mlp_model.h"
#include "worker/models/spam_step.h"
#include "worker/testing/reference_gemm.h"
#include "worker/testing/spam_reference.h"

namespace ps {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kEpsFp32 = 1.0 / (1 << 23);

std::vector<float> RandomVector(size_t size, uint32_t seed, float low = -1.0f, float high = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> v(size);
  for (float& x : v) x = dist(rng);
  return v;
}

// Why the CUDA tests cannot run here, or "" if they can.
std::string SkipReason() {
  const CudaAvailability cuda = ProbeCuda();
  if (!cuda.compiled) return "built without CUDA support (no CUDA toolkit, or -DPS_WITH_CUDA=OFF)";
  if (cuda.devices == 0) return absl::StrCat("no CUDA device: ", cuda.reason);
  return "";
}

// A CUDA backend (device 0) and a CPU backend, with helpers to move vectors to and from the
// device.
class CudaParityTest : public testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = SkipReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    auto gpu = MakeCudaBackend(0, GemmPrecision::kFp32);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
    cpu_ = MakeCpuBackend({CpuKernels::kReference});  // the exact CPU reference
  }

  template <typename T>
  BackendBuffer Upload(const std::vector<T>& host) {
    auto buffer = gpu_->Allocate(MemoryKind::kDevice, sizeof(T) * std::max<size_t>(host.size(), 1));
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    if (!buffer.ok()) return BackendBuffer();
    gpu_->CopyToDevice(buffer->data(), host.data(), sizeof(T) * host.size());
    gpu_->ComputeAfterCopies();
    // `host` may be a temporary: the copy must be done before it goes (the backend's contract).
    EXPECT_TRUE(gpu_->Synchronize().ok());
    return std::move(*buffer);
  }

  // Waits for the GPU and copies `n` elements back; the backend must report no error.
  template <typename T>
  std::vector<T> Download(const BackendBuffer& buffer, size_t n) {
    std::vector<T> host(n);
    gpu_->CopiesAfterCompute();
    gpu_->CopyToHost(host.data(), buffer.data(), sizeof(T) * n);
    const absl::Status s = gpu_->Synchronize();
    EXPECT_TRUE(s.ok()) << s;
    return host;
  }

  std::unique_ptr<ComputeBackend> gpu_;
  std::unique_ptr<ComputeBackend> cpu_;
};

// ---- GEMM

using reference::GemmShape;
using reference::NaiveGemm;

// Relative rounding of one product's inputs in each precision (see the file comment).
double InputRounding(GemmPrecision p) {
  switch (p) {
    case GemmPrecision::kFp32:
      return 0.0;
    case GemmPrecision::kTf32:
    case GemmPrecision::kFp16:
      return 2.0 / (1 << 10);
    case GemmPrecision::kBf16:
      return 2.0 / (1 << 7);
  }
  return 1.0;
}

// (trans_a, trans_b, shape, precision).
class CudaGemmTest
    : public testing::TestWithParam<std::tuple<bool, bool, GemmShape, GemmPrecision>> {};

TEST_P(CudaGemmTest, MatchesDoubleDefinition) {
  const std::string reason = SkipReason();
  if (!reason.empty()) GTEST_SKIP() << reason;
  const auto [trans_a, trans_b, shape, precision] = GetParam();
  const auto [m, n, k] = shape;
  auto made = MakeCudaBackend(0, precision);
  ASSERT_TRUE(made.ok()) << made.status();
  ComputeBackend& gpu = **made;
  const std::vector<float> a = RandomVector(static_cast<size_t>(m) * k, 1);
  const std::vector<float> b = RandomVector(static_cast<size_t>(k) * n, 2);
  const std::vector<float> c0 = RandomVector(static_cast<size_t>(m) * n, 3);
  auto da = gpu.Allocate(MemoryKind::kDevice, sizeof(float) * a.size());
  auto db = gpu.Allocate(MemoryKind::kDevice, sizeof(float) * b.size());
  auto dc = gpu.Allocate(MemoryKind::kDevice, sizeof(float) * c0.size());
  ASSERT_TRUE(da.ok() && db.ok() && dc.ok());
  gpu.CopyToDevice(da->data(), a.data(), sizeof(float) * a.size());
  gpu.CopyToDevice(db->data(), b.data(), sizeof(float) * b.size());
  struct AlphaBeta {
    float alpha, beta;
  };
  const AlphaBeta cases[] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.5f, -2.0f}, {0.0f, 0.5f}, {0.0f, 0.0f}};
  const double rounding = InputRounding(precision);
  for (const AlphaBeta& ab : cases) {
    SCOPED_TRACE(absl::StrCat("alpha=", ab.alpha, " beta=", ab.beta));
    // With beta == 0, C must not be read: NaN garbage in it must not show.
    std::vector<float> c = ab.beta == 0.0f ? std::vector<float>(c0.size(), kNaN) : c0;
    gpu.CopyToDevice(dc->data(), c.data(), sizeof(float) * c.size());
    gpu.ComputeAfterCopies();
    gpu.Gemm(trans_a, trans_b, m, n, k, ab.alpha, da->floats(), db->floats(), ab.beta,
             dc->floats());
    gpu.CopiesAfterCompute();
    gpu.CopyToHost(c.data(), dc->data(), sizeof(float) * c.size());
    ASSERT_TRUE(gpu.Synchronize().ok());
    std::vector<double> want(c0.begin(), c0.end()), magnitude;
    NaiveGemm(trans_a, trans_b, m, n, k, ab.alpha, a, b, ab.beta, want, magnitude);
    int failures = 0;
    for (size_t i = 0; i < c.size() && failures < 5; ++i) {
      const double tolerance = (4.0 * (k + 2) * kEpsFp32 + rounding) * magnitude[i];
      if (!(std::fabs(c[i] - want[i]) <= tolerance)) {
        ++failures;
        ADD_FAILURE() << "C[" << i / n << ", " << i % n << "] = " << c[i] << ", want " << want[i]
                      << " (tolerance " << tolerance << ")";
      }
    }
  }
}

std::string CudaGemmTestName(const testing::TestParamInfo<CudaGemmTest::ParamType>& info) {
  const auto [trans_a, trans_b, shape, precision] = info.param;
  return absl::StrCat(trans_a ? "At" : "A", trans_b ? "Bt" : "B", "_", shape.m, "x", shape.n, "x",
                      shape.k, "_", GemmPrecisionName(precision));
}

// Odd sizes, the fashion MLP's shapes (batch 64, 784 -> 128 -> 10) and one with a long k.
INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaGemmTest,
    testing::Combine(testing::Bool(), testing::Bool(),
                     testing::Values(GemmShape{1, 1, 1}, GemmShape{5, 7, 3}, GemmShape{17, 1, 33},
                                     GemmShape{64, 128, 784}, GemmShape{784, 128, 64},
                                     GemmShape{64, 10, 128}, GemmShape{130, 513, 1500}),
                     testing::Values(GemmPrecision::kFp32, GemmPrecision::kTf32,
                                     GemmPrecision::kBf16, GemmPrecision::kFp16)),
    CudaGemmTestName);

TEST_F(CudaParityTest, GemmWithZeroSizes) {
  // m or n zero: nothing happens (null pointers are fine); k zero: C = beta * C.
  gpu_->Gemm(false, false, 0, 5, 3, 1.0f, nullptr, nullptr, 0.0f, nullptr);
  gpu_->Gemm(true, true, 5, 0, 3, 1.0f, nullptr, nullptr, 1.0f, nullptr);
  BackendBuffer c = Upload(std::vector<float>{kNaN, kNaN, kNaN, kNaN});
  gpu_->Gemm(false, false, 2, 2, 0, 1.0f, nullptr, nullptr, 0.0f, c.floats());
  EXPECT_EQ(Download<float>(c, 4), std::vector<float>({0, 0, 0, 0}));
  BackendBuffer d = Upload(std::vector<float>{1, 2, 3, 4});
  gpu_->Gemm(true, false, 2, 2, 0, 1.0f, nullptr, nullptr, 0.5f, d.floats());
  EXPECT_EQ(Download<float>(d, 4), std::vector<float>({0.5f, 1, 1.5f, 2}));
}

// ---- Elementwise kernels and reductions, against the CPU backend.

TEST_F(CudaParityTest, AddBiasAndAddBiasReluAreExact) {
  for (const auto& [rows, cols] : {std::pair{1, 1}, std::pair{3, 7}, std::pair{64, 4096},
                                   std::pair{1000, 10}, std::pair{0, 5}}) {
    SCOPED_TRACE(absl::StrCat(rows, "x", cols));
    const std::vector<float> y = RandomVector(static_cast<size_t>(rows) * cols, 4);
    const std::vector<float> bias = RandomVector(cols, 5);
    for (bool relu : {false, true}) {
      std::vector<float> want = y;
      BackendBuffer dy = Upload(y), dbias = Upload(bias);
      if (relu) {
        cpu_->AddBiasRelu(rows, cols, bias.data(), want.data());
        gpu_->AddBiasRelu(rows, cols, dbias.floats(), dy.floats());
      } else {
        cpu_->AddBias(rows, cols, bias.data(), want.data());
        gpu_->AddBias(rows, cols, dbias.floats(), dy.floats());
      }
      EXPECT_EQ(Download<float>(dy, y.size()), want) << (relu ? "relu" : "bias");
    }
  }
}

TEST_F(CudaParityTest, ReluBackwardIsExact) {
  std::vector<float> activation = RandomVector(10000, 6);
  for (size_t i = 0; i < activation.size(); i += 7) activation[i] = 0.0f;  // exact zeros too
  const std::vector<float> grad = RandomVector(activation.size(), 7);
  std::vector<float> want = grad;
  cpu_->ReluBackward(static_cast<int>(want.size()), activation.data(), want.data());
  BackendBuffer da = Upload(activation), dg = Upload(grad);
  gpu_->ReluBackward(static_cast<int>(grad.size()), da.floats(), dg.floats());
  EXPECT_EQ(Download<float>(dg, grad.size()), want);
}

TEST_F(CudaParityTest, BiasGradientMatchesCpu) {
  for (const auto& [rows, cols] : {std::pair{1, 1}, std::pair{7, 3}, std::pair{512, 4096},
                                   std::pair{1000, 10}, std::pair{0, 33}}) {
    SCOPED_TRACE(absl::StrCat(rows, "x", cols));
    const std::vector<float> grad = RandomVector(static_cast<size_t>(rows) * cols, 8);
    std::vector<float> want(cols, kNaN);
    cpu_->BiasGradient(rows, cols, grad.data(), want.data());
    BackendBuffer dg = Upload(grad), db = Upload(std::vector<float>(cols, kNaN));
    gpu_->BiasGradient(rows, cols, dg.floats(), db.floats());
    const std::vector<float> got = Download<float>(db, cols);
    for (int c = 0; c < cols; ++c) {
      double magnitude = 0;
      for (int r = 0; r < rows; ++r)
        magnitude += std::fabs(grad[static_cast<size_t>(r) * cols + c]);
      EXPECT_NEAR(got[c], want[c], 4.0 * (rows + 2) * kEpsFp32 * magnitude) << "column " << c;
    }
  }
}

TEST_F(CudaParityTest, SoftmaxCrossEntropyMatchesCpu) {
  for (const auto& [batch, classes] : {std::pair{1, 2}, std::pair{64, 10}, std::pair{33, 37},
                                       std::pair{5, 1000}, std::pair{0, 10}}) {
    SCOPED_TRACE(absl::StrCat(batch, "x", classes));
    const std::vector<float> logits =
        RandomVector(static_cast<size_t>(batch) * classes, 9, -8.0f, 8.0f);
    std::vector<int32_t> labels(batch);
    std::mt19937 rng(10);
    for (int32_t& l : labels) l = std::uniform_int_distribution<int32_t>(0, classes - 1)(rng);
    std::vector<float> want(logits.size(), kNaN);
    const LossStats cpu =
        cpu_->SoftmaxCrossEntropy(batch, classes, logits.data(), labels.data(), 0.25f, want.data());
    BackendBuffer dl = Upload(logits), dy = Upload(labels),
                  dg = Upload(std::vector<float>(logits.size(), kNaN));
    // Separate gradient, in-place gradient (grad aliases logits), no gradient.
    const LossStats separate =
        gpu_->SoftmaxCrossEntropy(batch, classes, dl.floats(), dy.ints(), 0.25f, dg.floats());
    const std::vector<float> got = Download<float>(dg, logits.size());
    const LossStats none =
        gpu_->SoftmaxCrossEntropy(batch, classes, dl.floats(), dy.ints(), 0.0f, nullptr);
    const LossStats in_place =
        gpu_->SoftmaxCrossEntropy(batch, classes, dl.floats(), dy.ints(), 0.25f, dl.floats());
    const std::vector<float> got_in_place = Download<float>(dl, logits.size());
    for (const LossStats& s : {separate, none, in_place}) {
      EXPECT_NEAR(s.loss_sum, cpu.loss_sum, 1e-9 * std::max(1.0, std::fabs(cpu.loss_sum)));
      EXPECT_EQ(s.correct, cpu.correct);
    }
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-6) << "at " << i;
      ASSERT_NEAR(got_in_place[i], want[i], 1e-6) << "in place, at " << i;
    }
  }
}

TEST_F(CudaParityTest, SoftmaxCrossEntropyTiesPickTheFirstMaximumAsTheCpu) {
  // Every row all-equal: the CPU's arg-max is column 0, so only labels 0 count as correct.
  const int batch = 40, classes = 70;  // more classes than a warp's lanes
  const std::vector<float> logits(static_cast<size_t>(batch) * classes, 1.5f);
  std::vector<int32_t> labels(batch);
  for (int r = 0; r < batch; ++r) labels[r] = r % 3 == 0 ? 0 : r % classes;
  const LossStats cpu =
      cpu_->SoftmaxCrossEntropy(batch, classes, logits.data(), labels.data(), 1.0f, nullptr);
  BackendBuffer dl = Upload(logits), dy = Upload(labels);
  const LossStats gpu =
      gpu_->SoftmaxCrossEntropy(batch, classes, dl.floats(), dy.ints(), 1.0f, nullptr);
  ASSERT_TRUE(gpu_->Synchronize().ok());
  EXPECT_EQ(gpu.correct, cpu.correct);
  EXPECT_NEAR(gpu.loss_sum, cpu.loss_sum, 1e-9 * cpu.loss_sum);
}

TEST_F(CudaParityTest, SoftmaxCrossEntropyAsyncFillsStatsAtSynchronize) {
  const std::vector<float> logits = {1, 2, 3, 3, 2, 1, 1, 2, 3};
  const std::vector<int32_t> labels = {2, 2, 0};
  BackendBuffer dl = Upload(logits), dy = Upload(labels);
  LossStats first, second;
  gpu_->SoftmaxCrossEntropyAsync(3, 3, dl.floats(), dy.ints(), 0.0f, nullptr, &first);
  gpu_->SoftmaxCrossEntropyAsync(2, 3, dl.floats(), dy.ints(), 0.0f, nullptr, &second);
  ASSERT_TRUE(gpu_->Synchronize().ok());
  EXPECT_NEAR(first.loss_sum, 0.4076059 + 2 * 2.4076059, 1e-6);
  EXPECT_EQ(first.correct, 1);
  EXPECT_NEAR(second.loss_sum, 0.4076059 + 2.4076059, 1e-6);
  EXPECT_EQ(second.correct, 1);
}

TEST_F(CudaParityTest, SoftmaxCrossEntropyReportsLabelsOutOfRange) {
  BackendBuffer dl = Upload(std::vector<float>{1, 2, 3, 3, 2, 1});
  BackendBuffer dy = Upload(std::vector<int32_t>{2, 3});
  gpu_->SoftmaxCrossEntropy(2, 3, dl.floats(), dy.ints(), 1.0f, nullptr);
  const absl::Status s = gpu_->Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(gpu_->Synchronize().ok()) << "reported once; the backend works on";
  BackendBuffer ok_labels = Upload(std::vector<int32_t>{2, 0});
  const LossStats stats =
      gpu_->SoftmaxCrossEntropy(2, 3, dl.floats(), ok_labels.ints(), 1.0f, nullptr);
  EXPECT_TRUE(gpu_->Synchronize().ok());
  EXPECT_EQ(stats.correct, 2);
}

TEST_F(CudaParityTest, GatherIsExactAndScatterAddMatchesCpu) {
  constexpr int kRows = 1000, kDim = 33, kN = 5000;  // many repeats of every row
  const std::vector<float> table = RandomVector(kRows * kDim, 11);
  std::vector<int32_t> rows(kN);
  std::mt19937 rng(12);
  for (int32_t& r : rows) r = std::uniform_int_distribution<int32_t>(0, kRows - 1)(rng);
  const std::vector<float> grad = RandomVector(static_cast<size_t>(kN) * kDim, 13);

  std::vector<float> want_out(static_cast<size_t>(kN) * kDim);
  cpu_->Gather(kN, kDim, kRows, table.data(), rows.data(), want_out.data());
  std::vector<float> want_table = table;
  cpu_->ScatterAdd(kN, kDim, kRows, grad.data(), rows.data(), want_table.data());

  BackendBuffer dt = Upload(table), dr = Upload(rows), dg = Upload(grad),
                dout = Upload(std::vector<float>(want_out.size(), kNaN));
  gpu_->Gather(kN, kDim, kRows, dt.floats(), dr.ints(), dout.floats());
  EXPECT_EQ(Download<float>(dout, want_out.size()), want_out);
  gpu_->ScatterAdd(kN, kDim, kRows, dg.floats(), dr.ints(), dt.floats());
  const std::vector<float> got = Download<float>(dt, table.size());
  // Atomic adds in any order: the FP32 bound for a sum of (repeats + 1) terms.
  std::vector<double> magnitude(table.size());
  std::vector<int> terms(kRows, 1);
  for (size_t i = 0; i < table.size(); ++i) magnitude[i] = std::fabs(table[i]);
  for (int i = 0; i < kN; ++i) {
    ++terms[rows[i]];
    for (int j = 0; j < kDim; ++j) {
      magnitude[static_cast<size_t>(rows[i]) * kDim + j] += std::fabs(grad[i * kDim + j]);
    }
  }
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want_table[i], 4.0 * (terms[i / kDim] + 2) * kEpsFp32 * magnitude[i])
        << "at " << i;
  }
}

// spam_logreg's step on the GPU (gathers, scatter-adds with atomics, 2-class softmax) against its
// definition, for batches that grow and shrink through the same buffers.
TEST_F(CudaParityTest, SpamStepMatchesTheDefinition) {
  SpamBackendStep step(gpu_.get());
  for (const auto& [batch, num_weights, features] :
       {std::tuple{1, 1, 1}, std::tuple{64, 3000, 40}, std::tuple{5, 20, 20},
        std::tuple{300, 10000, 60}, std::tuple{0, 10, 5}}) {
    SCOPED_TRACE(absl::StrCat(batch, " examples, ", num_weights, " weights"));
    const SpamBatch b = reference::RandomSpamBatch(batch, num_weights, features, batch + 1);
    const std::vector<float> weights = RandomVector(num_weights, num_weights);
    const float scale = batch > 0 ? 1.0f / batch : 1.0f;
    std::vector<float> grads;
    float bias_grad = 0;
    auto stats = step.Run(b, weights, 0.3f, scale, &grads, &bias_grad);
    ASSERT_TRUE(stats.ok()) << stats.status();
    const reference::SpamStepResult want = reference::SpamStep(b, weights, 0.3f, scale);
    EXPECT_EQ(stats->examples, batch);
    EXPECT_NEAR(stats->loss_sum, want.loss_sum, 1e-5 * want.loss_sum + 1e-9);
    EXPECT_LE(std::abs(stats->correct - want.correct), want.near_zero);
    ASSERT_EQ(grads.size(), weights.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      ASSERT_NEAR(grads[i], want.grads[i], 1e-5 * want.magnitudes[i] + 1e-7) << "weight " << i;
    }
    EXPECT_NEAR(bias_grad, want.bias_grad, 1e-5 * batch * scale + 1e-7);
  }
}

TEST_F(CudaParityTest, GatherAndScatterAddReportRowsOutOfRange) {
  BackendBuffer dt = Upload(std::vector<float>{0, 1, 10, 11});
  BackendBuffer dr = Upload(std::vector<int32_t>{1, -1, 2});
  BackendBuffer dout = Upload(std::vector<float>(6, kNaN));
  gpu_->Gather(3, 2, 2, dt.floats(), dr.ints(), dout.floats());
  EXPECT_EQ(gpu_->Synchronize().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Download<float>(dout, 6), std::vector<float>({10, 11, 0, 0, 0, 0}));
  BackendBuffer dg = Upload(std::vector<float>(6, 1.0f));
  gpu_->ScatterAdd(3, 2, 2, dg.floats(), dr.ints(), dt.floats());
  EXPECT_EQ(gpu_->Synchronize().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Download<float>(dt, 4), std::vector<float>({0, 1, 11, 12}));
}

TEST_F(CudaParityTest, CopiesRoundTripThroughStagingAndPageableMemory) {
  const size_t n = (size_t{16} << 20) / sizeof(float) + 3;  // 16 MiB and a ragged end
  const std::vector<float> src = RandomVector(n, 14);
  auto staging_in = gpu_->Allocate(MemoryKind::kStaging, sizeof(float) * n);
  auto staging_out = gpu_->Allocate(MemoryKind::kStaging, sizeof(float) * n);
  auto device = gpu_->Allocate(MemoryKind::kDevice, sizeof(float) * n);
  ASSERT_TRUE(staging_in.ok() && staging_out.ok() && device.ok());
  std::memcpy(staging_in->data(), src.data(), sizeof(float) * n);
  gpu_->CopyToDevice(device->data(), staging_in->data(), sizeof(float) * n);
  gpu_->CopyToHost(staging_out->data(), device->data(), sizeof(float) * n);  // same queue: after
  ASSERT_TRUE(gpu_->Synchronize().ok());
  EXPECT_EQ(std::memcmp(staging_out->data(), src.data(), sizeof(float) * n), 0);
  std::vector<float> pageable(n, kNaN);
  gpu_->CopyToHost(pageable.data(), device->data(), sizeof(float) * n);
  ASSERT_TRUE(gpu_->Synchronize().ok());
  EXPECT_EQ(pageable, src);
}

// ---- A whole MLP training step: the same model, inputs and parameters on both backends.

struct StepResult {
  LossStats stats;
  std::vector<std::vector<float>> grads;
};

// Runs one forward+backward step of `layers` through StartStep/FinishStep with flat host arrays
// (as the worker does: staging memory on the GPU).
StepResult RunMlpStep(ComputeBackend* backend, const std::vector<int>& layers,
                      const std::vector<float>& flat_params, const std::vector<float>& features,
                      const std::vector<int32_t>& labels, int batch) {
  MlpModel model(layers, backend);
  StepResult result;
  auto params = backend->Allocate(MemoryKind::kStaging, sizeof(float) * flat_params.size());
  auto grads = backend->Allocate(MemoryKind::kStaging, sizeof(float) * flat_params.size());
  EXPECT_TRUE(params.ok() && grads.ok());
  if (!params.ok() || !grads.ok()) return result;
  std::memcpy(params->data(), flat_params.data(), sizeof(float) * flat_params.size());
  std::vector<const float*> p;
  std::vector<float*> g;
  for (int t = 0; t < model.num_tensors(); ++t) {
    p.push_back(params->floats() + model.tensor_offset(t));
    g.push_back(grads->floats() + model.tensor_offset(t));
  }
  EXPECT_TRUE(model.Reserve(batch).ok());
  const absl::Status started =
      model.StartStep(p, features.data(), labels.data(), batch, 1.0f / batch, g);
  EXPECT_TRUE(started.ok()) << started;
  auto stats = model.FinishStep();
  EXPECT_TRUE(stats.ok()) << stats.status();
  if (stats.ok()) result.stats = *stats;
  for (int t = 0; t < model.num_tensors(); ++t) {
    result.grads.emplace_back(g[t], g[t] + model.tensor_size(t));
  }
  return result;
}

class CudaMlpStepTest : public testing::TestWithParam<GemmPrecision> {};

TEST_P(CudaMlpStepTest, MatchesCpuStep) {
  const std::string reason = SkipReason();
  if (!reason.empty()) GTEST_SKIP() << reason;
  const GemmPrecision precision = GetParam();
  const double grad_tolerance = precision == GemmPrecision::kFp32 ? 1e-4 : 5e-2;
  const double loss_tolerance = precision == GemmPrecision::kFp32 ? 1e-5 : 1e-2;
  auto gpu = MakeCudaBackend(0, precision);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::unique_ptr<ComputeBackend> cpu = MakeCpuBackend({CpuKernels::kReference});
  for (const std::vector<int>& layers :
       {std::vector<int>{784, 256, 10}, std::vector<int>{50, 64, 48, 10}}) {
    SCOPED_TRACE(absl::StrCat("layers ", layers.size(), " deep, ", layers[1], " wide"));
    const int batch = 96;
    MlpModel shape(layers, cpu.get());
    std::vector<float> flat = RandomVector(shape.num_parameters(), 15, -0.1f, 0.1f);
    const std::vector<float> features =
        RandomVector(static_cast<size_t>(batch) * layers[0], 16, 0.0f, 1.0f);
    std::vector<int32_t> labels(batch);
    for (int i = 0; i < batch; ++i) labels[i] = (i * 7) % layers.back();

    const StepResult want = RunMlpStep(cpu.get(), layers, flat, features, labels, batch);
    const StepResult got = RunMlpStep(gpu->get(), layers, flat, features, labels, batch);
    EXPECT_NEAR(got.stats.loss_sum, want.stats.loss_sum, loss_tolerance * want.stats.loss_sum);
    // Near-ties of the arg-max may flip under a different summation order: allow one.
    EXPECT_NEAR(got.stats.correct, want.stats.correct, 1);
    ASSERT_EQ(got.grads.size(), want.grads.size());
    for (size_t t = 0; t < want.grads.size(); ++t) {
      float largest = 0;
      for (float v : want.grads[t]) largest = std::max(largest, std::fabs(v));
      if (precision == GemmPrecision::kFp32) {
        for (size_t i = 0; i < want.grads[t].size(); ++i) {
          ASSERT_NEAR(got.grads[t][i], want.grads[t][i], grad_tolerance * largest + 1e-7)
              << "tensor " << t << " element " << i;
        }
        continue;
      }
      double diff2 = 0, norm2 = 0, worst = 0;
      for (size_t i = 0; i < want.grads[t].size(); ++i) {
        const double d = static_cast<double>(got.grads[t][i]) - want.grads[t][i];
        diff2 += d * d;
        norm2 += static_cast<double>(want.grads[t][i]) * want.grads[t][i];
        worst = std::max(worst, std::fabs(d));
      }
      EXPECT_LE(std::sqrt(diff2), grad_tolerance * std::sqrt(norm2) + 1e-7) << "tensor " << t;
      EXPECT_LE(worst, 0.15 * largest + 1e-7) << "tensor " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaMlpStepTest,
                         testing::Values(GemmPrecision::kFp32, GemmPrecision::kTf32),
                         [](const testing::TestParamInfo<GemmPrecision>& info) {
                           return std::string(GemmPrecisionName(info.param));
                         });

TEST_F(CudaParityTest, MlpHostTensorStepMatchesCpuAndEmptyBatchGivesZeros) {
  const std::vector<int> layers = {20, 30, 5};
  MlpModel on_gpu(layers, gpu_.get());
  MlpModel on_cpu(layers, cpu_.get());
  for (int t = 0; t < on_cpu.num_tensors(); ++t) {
    on_cpu.param(t) = RandomVector(on_cpu.param(t).size(), 17 + t, -0.5f, 0.5f);
    on_gpu.param(t) = on_cpu.param(t);
  }
  const std::vector<float> features = RandomVector(8 * 20, 30);
  const std::vector<int32_t> labels = {0, 1, 2, 3, 4, 0, 1, 2};
  auto want = on_cpu.RunStep(features.data(), labels.data(), 8, true, 0.125f);
  auto got = on_gpu.RunStep(features.data(), labels.data(), 8, true, 0.125f);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status();
  EXPECT_NEAR(got->loss_sum, want->loss_sum, 1e-5 * want->loss_sum);
  for (int t = 0; t < on_cpu.num_tensors(); ++t) {
    for (size_t i = 0; i < on_cpu.grad(t).size(); ++i) {
      EXPECT_NEAR(on_gpu.grad(t)[i], on_cpu.grad(t)[i], 1e-5) << t << ", " << i;
    }
  }
  auto empty = on_gpu.RunStep(features.data(), labels.data(), 0, true, 1.0f);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->loss_sum, 0.0);
  for (int t = 0; t < on_gpu.num_tensors(); ++t) {
    EXPECT_EQ(on_gpu.grad(t), std::vector<float>(on_gpu.grad(t).size(), 0.0f)) << t;
  }
}

// ---- Without a device: clear errors, never a crash. These run everywhere.

TEST(CudaBackendTest, MissingDeviceIsFailedPrecondition) {
  // No machine has 1000 CUDA devices; with or without CUDA support this is a clean error.
  auto backend = MakeCudaBackend(1000, GemmPrecision::kFp32);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition) << backend.status();
  EXPECT_NE(backend.status().message().find("cuda:1000"), std::string::npos) << backend.status();
  auto peak = MeasureCublasGemmTflops(1000, GemmPrecision::kFp32, 8, 8, 8, 1);
  EXPECT_EQ(peak.status().code(), absl::StatusCode::kFailedPrecondition) << peak.status();
}

TEST(CudaBackendTest, DeviceZeroWithoutGpuIsFailedPrecondition) {
  const CudaAvailability cuda = ProbeCuda();
  if (cuda.devices > 0) GTEST_SKIP() << "a CUDA device is present: cuda:0 works here";
  auto backend = MakeCudaBackend(0, GemmPrecision::kTf32);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition) << backend.status();
  std::cout << "cuda:0 here: " << backend.status() << "\n";
}

// cuBLAS is loaded with dlopen, not linked: a CUDA build must find it and every function the
// backend calls (this needs the toolkit's libraries, not a GPU).
TEST(CudaBackendTest, CublasLoadsWhereBuiltWithCuda) {
  if (!ProbeCuda().compiled) GTEST_SKIP() << "built without CUDA support";
  const absl::Status s = LoadCublas();
  EXPECT_TRUE(s.ok()) << s;
}

TEST(CudaBackendTest, GemmPrecisionNamesRoundTrip) {
  for (GemmPrecision p :
       {GemmPrecision::kFp32, GemmPrecision::kTf32, GemmPrecision::kBf16, GemmPrecision::kFp16}) {
    auto parsed = ParseGemmPrecision(GemmPrecisionName(p));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_EQ(ParseGemmPrecision("fp64").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
