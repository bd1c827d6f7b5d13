// SpamBackendStep on the CPU backend against the step's definition (worker/testing/
// spam_reference.h, which states the tolerances); the CUDA backend's run of the same is in
// worker/cuda/cuda_backend_test.cc.
#include "worker/models/spam_step.h"

#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/compute/cpu_backend.h"
#include "worker/testing/spam_reference.h"

namespace ps {
namespace {

std::vector<float> RandomWeights(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> w(n);
  for (float& x : w) x = dist(rng);
  return w;
}

void ExpectMatchesDefinition(SpamBackendStep& step, const SpamBatch& batch,
                             const std::vector<float>& weights, float bias, float scale) {
  std::vector<float> grads;
  float bias_grad = 0;
  auto stats = step.Run(batch, weights, bias, scale, &grads, &bias_grad);
  ASSERT_TRUE(stats.ok()) << stats.status();
  const reference::SpamStepResult want = reference::SpamStep(batch, weights, bias, scale);
  EXPECT_EQ(stats->examples, batch.batch());
  EXPECT_NEAR(stats->loss_sum, want.loss_sum, 1e-5 * want.loss_sum + 1e-9);
  EXPECT_LE(std::abs(stats->correct - want.correct), want.near_zero);
  ASSERT_EQ(grads.size(), weights.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    ASSERT_NEAR(grads[i], want.grads[i], 1e-5 * want.magnitudes[i] + 1e-7) << "weight " << i;
  }
  EXPECT_NEAR(bias_grad, want.bias_grad, 1e-5 * batch.batch() * std::fabs(scale) + 1e-7);
}

TEST(SpamBackendStepTest, MatchesTheDefinitionOnRandomBatches) {
  std::unique_ptr<ComputeBackend> cpu = MakeCpuBackend();
  SpamBackendStep step(cpu.get());
  // Growing and shrinking batches through the same buffers.
  for (const auto& [batch, weights, features] :
       {std::tuple{1, 1, 1}, std::tuple{8, 50, 10}, std::tuple{64, 3000, 40}, std::tuple{5, 20, 20},
        std::tuple{300, 10000, 60}}) {
    SCOPED_TRACE(
        absl::StrCat(batch, " examples, ", weights, " weights, <= ", features, " features each"));
    const SpamBatch b = reference::RandomSpamBatch(batch, weights, features, batch + weights);
    ExpectMatchesDefinition(step, b, RandomWeights(weights, weights), 0.3f, 1.0f / batch);
  }
}

TEST(SpamBackendStepTest, EmptyBatchesAndExamplesWithoutFeatures) {
  std::unique_ptr<ComputeBackend> cpu = MakeCpuBackend();
  SpamBackendStep step(cpu.get());
  std::vector<float> grads = {7};
  float bias_grad = 7;
  auto stats = step.Run(SpamBatch(), {}, 0.5f, 1.0f, &grads, &bias_grad);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->examples, 0);
  EXPECT_TRUE(grads.empty());
  EXPECT_EQ(bias_grad, 0);
  // Two examples with no features: only the bias speaks. z = -2 for both.
  SpamBatch b;
  b.offsets = {0, 0, 0};
  b.labels = {1, 0};
  stats = step.Run(b, {}, -2.0f, 0.5f, &grads, &bias_grad);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->examples, 2);
  EXPECT_EQ(stats->correct, 1);  // predicts ham
  EXPECT_NEAR(stats->loss_sum, std::log1p(std::exp(2.0)) + std::log1p(std::exp(-2.0)), 1e-6);
  const double p = 1.0 / (1.0 + std::exp(2.0));
  EXPECT_NEAR(bias_grad, ((p - 1) + p) * 0.5, 1e-7);
}

TEST(SpamBackendStepTest, RejectsMalformedBatchesAndWorksAfterwards) {
  std::unique_ptr<ComputeBackend> cpu = MakeCpuBackend();
  SpamBackendStep step(cpu.get());
  const std::vector<float> weights = {0.5f, -0.5f};
  std::vector<float> grads;
  float bias_grad = 0;
  SpamBatch good;
  good.offsets = {0, 2};
  good.positions = {0, 1};
  good.labels = {1};
  SpamBatch out_of_range = good, bad_label = good, bad_offsets = good, decreasing = good,
            no_offsets = good;
  no_offsets.offsets.clear();
  out_of_range.positions[1] = 2;
  bad_label.labels[0] = 2;
  bad_offsets.offsets = {0, 1};
  decreasing.offsets = {0, 2, 1, 2};
  decreasing.labels = {1, 0, 1};
  for (const SpamBatch* b : {&out_of_range, &bad_label, &bad_offsets, &decreasing, &no_offsets}) {
    const absl::Status s = step.Run(*b, weights, 0, 1, &grads, &bias_grad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("spam batch"), std::string::npos) << s;
  }
  ExpectMatchesDefinition(step, good, weights, 0.25f, 1.0f);
}

}  // namespace
}  // namespace ps
