// The MLP model of the zoo through a JobRunner against an in-process parameter server, on
// synthetic data: with and without overlapping communication and compute (CPU backend).
#include "worker/models/fashion_model.h"

#include <prometheus/registry.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/daemon_probes.h"
#include "gtest/gtest.h"
#include "client/job_admin.h"
#include "client/rpc_client.h"
#include "worker/daemon/job_runner.h"
#include "worker/daemon/worker_metrics.h"
#include "worker/testing/server_fixture.h"

namespace ps {
namespace {

constexpr int kFeatures = 8, kClasses = 3;

// Three well-separated clusters: feature c is about 1 for class c, the rest noise.
Dataset Clusters(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> noise(-0.3f, 0.3f);
  Dataset d;
  d.num_examples = d.total_examples = n;
  d.num_features = kFeatures;
  d.num_classes = kClasses;
  for (int i = 0; i < n; ++i) {
    const int label = i % kClasses;
    for (int f = 0; f < kFeatures; ++f)
      d.features.push_back((f == label ? 1.0f : 0.0f) + noise(rng));
    d.labels.push_back(label);
  }
  return d;
}

v1::ConsistencySpec Mode(v1::ConsistencySpec::Mode mode, int staleness = 0) {
  v1::ConsistencySpec c;
  c.set_mode(mode);
  c.set_staleness(staleness);
  return c;
}

TEST(OverlapsCommunicationTest, OnlyWhereTheModeAllowsAndAutoOnlyOnTheGpu) {
  const DeviceSpec cpu, gpu{DeviceSpec::Kind::kCuda, 0};
  const v1::ConsistencySpec sync = Mode(v1::ConsistencySpec::SYNC),
                            ssp0 = Mode(v1::ConsistencySpec::SSP, 0),
                            ssp2 = Mode(v1::ConsistencySpec::SSP, 2),
                            async = Mode(v1::ConsistencySpec::ASYNC);
  for (OverlapMode m : {OverlapMode::kAuto, OverlapMode::kOn, OverlapMode::kOff}) {
    EXPECT_FALSE(OverlapsCommunication(m, gpu, sync));
    EXPECT_FALSE(OverlapsCommunication(m, gpu, ssp0));
  }
  EXPECT_TRUE(OverlapsCommunication(OverlapMode::kAuto, gpu, async));
  EXPECT_TRUE(OverlapsCommunication(OverlapMode::kAuto, gpu, ssp2));
  EXPECT_FALSE(OverlapsCommunication(OverlapMode::kAuto, cpu, async));
  EXPECT_TRUE(OverlapsCommunication(OverlapMode::kOn, cpu, async));
  EXPECT_TRUE(OverlapsCommunication(OverlapMode::kOn, cpu, ssp2));
  EXPECT_FALSE(OverlapsCommunication(OverlapMode::kOff, gpu, async));
}

TEST(MakeMlpModelTest, RejectsDataOfTheWrongShape) {
  MlpRunOptions options;
  auto model = MakeMlpModel(Clusters(30, 1), Clusters(30, 2), {kFeatures + 1, 4, kClasses},
                            v1::OptimizerSpec(), 1, options);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
}

// (consistency, overlap mode) against one in-process server.
class MlpTrainingTest
    : public testing::InProcessServerTest,
      public ::testing::WithParamInterface<std::tuple<v1::ConsistencySpec::Mode, OverlapMode>> {};

TEST_P(MlpTrainingTest, LearnsPushesEveryStepAndAccountsTime) {
  const auto [mode, overlap] = GetParam();
  const std::string job = "mlp-job";
  const v1::ConsistencySpec consistency = Mode(mode, mode == v1::ConsistencySpec::SSP ? 1 : 0);
  std::unique_ptr<RpcClient> client = Connect(job);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(JobAdmin(*client).ConfigureJob(consistency, {0}).ok());

  MlpRunOptions options;
  options.compute.overlap = overlap;
  options.consistency = consistency;
  options.batch_size = 20;
  v1::OptimizerSpec sgd;
  sgd.set_kind(v1::OptimizerSpec::SGD);
  sgd.set_learning_rate(0.5f);
  const std::vector<int> layers = {kFeatures, 16, kClasses};
  auto model = MakeMlpModel(Clusters(600, 3), Clusters(300, 4), layers, sgd, 7, options);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<v1::TableSpec> tables = (*model)->Tables(job, 1);
  for (const v1::TableSpec& t : tables) ASSERT_TRUE(client->CreateTable(t).ok());

  prometheus::Registry registry;
  WorkerMetrics metrics(registry);
  JobRunnerOptions ro;
  ro.epochs = 3;  // 30 clocks per epoch
  ro.batch_size = 20;
  ro.consistency = consistency;
  ro.evaluate = true;
  JobRunner runner(model->get(), client.get(), ro, &metrics);
  std::vector<JobProgress> epochs;
  ASSERT_TRUE(runner.Run([&](const JobProgress& p) { epochs.push_back(p); }, nullptr, 0).ok());

  ASSERT_EQ(epochs.size(), 3u);
  EXPECT_EQ(client->clock(), 90);
  EXPECT_GT(epochs.back().test_accuracy, 0.95);
  EXPECT_LT(epochs.back().loss, epochs.front().loss);
  // Every step's push was answered before Run() returned (the last one by Flush()).
  int64_t keys = 0;
  for (const v1::TableSpec& t : tables) keys += t.num_rows();
  EXPECT_EQ(testing::MetricValue(registry, "ps_worker_pushed_keys_total", {{"job", job}}),
            90 * keys);
  const bool overlapping = OverlapsCommunication(overlap, options.compute.device, consistency);
  for (const JobProgress& p : epochs) {
    EXPECT_GT(p.compute_seconds, 0);
    EXPECT_GT(p.communication_seconds, 0);
    EXPECT_GE(p.hidden_communication_seconds, 0);
    EXPECT_LE(p.hidden_communication_seconds, p.communication_seconds);
    if (!overlapping) {
      EXPECT_EQ(p.hidden_communication_seconds, 0);
    }
  }
  const double hidden = testing::MetricValue(
      registry, "ps_worker_communication_hidden_seconds_total", {{"job", job}});
  EXPECT_GE(hidden, 0);
  if (!overlapping) {
    EXPECT_EQ(hidden, 0);
  }
  std::cout << "overlap " << (overlapping ? "on" : "off") << ": last epoch "
            << FormatTimeSplit(epochs.back()) << "\n";
}

INSTANTIATE_TEST_SUITE_P(Modes, MlpTrainingTest,
                         ::testing::Combine(::testing::Values(v1::ConsistencySpec::SYNC,
                                                              v1::ConsistencySpec::SSP,
                                                              v1::ConsistencySpec::ASYNC),
                                            ::testing::Values(OverlapMode::kOff, OverlapMode::kOn)),
                         [](const ::testing::TestParamInfo<MlpTrainingTest::ParamType>& info) {
                           return absl::StrCat(
                               v1::ConsistencySpec::Mode_Name(std::get<0>(info.param)), "_overlap_",
                               OverlapName(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace ps
