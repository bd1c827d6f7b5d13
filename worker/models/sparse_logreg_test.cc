// SparseLogReg against a real parameter server in-process (127.0.0.1, free port).
#include "worker/models/sparse_logreg.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "client/job_admin.h"
#include "client/rpc_client.h"
#include "worker/compute/cpu_backend.h"
#include "worker/data/spam_dataset.h"
#include "worker/testing/server_fixture.h"

namespace ps {
namespace {

constexpr char kJob[] = "spam";

// One parameter server and a worker-0 client configured for one job.
class SparseLogRegTest : public testing::InProcessServerTest {
 protected:
  void TearDown() override {
    client_.reset();
    InProcessServerTest::TearDown();
  }

  // Connects, configures the job with `mode` and worker 0, and creates the model's tables.
  void Connect(v1::ConsistencySpec::Mode mode, SparseLogReg& model, uint32_t first_table_id = 1) {
    client_ = InProcessServerTest::Connect(kJob);
    ASSERT_NE(client_, nullptr);
    v1::ConsistencySpec consistency;
    consistency.set_mode(mode);
    ASSERT_TRUE(JobAdmin(*client_).ConfigureJob(consistency, {0}).ok());
    for (const v1::TableSpec& spec : model.Tables(kJob, first_table_id)) {
      ASSERT_TRUE(client_->CreateTable(spec).ok()) << spec.ShortDebugString();
    }
    ASSERT_TRUE(model.Start(client_.get()).ok());
  }

  // Current values of the weights of `keys` and of the bias.
  std::pair<std::vector<float>, float> Weights(const SparseLogReg& model,
                                               const std::vector<uint64_t>& keys) {
    std::vector<float> w(keys.size());
    float b = 0;
    const uint64_t bias_key = 0;
    const absl::Status status =
        client_->Pull({{model.weights_table_id(), keys, nullptr, w.data()},
                       {model.bias_table_id(), absl::MakeConstSpan(&bias_key, 1), nullptr, &b}});
    EXPECT_TRUE(status.ok()) << status;
    return {w, b};
  }

  // `epochs` passes over the training set in batches, in a seeded order; the last epoch's stats.
  StepStats Train(SparseLogReg& model, int epochs, int batch_size, uint64_t seed) {
    std::vector<int64_t> order(model.num_train_examples());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    std::mt19937_64 rng(seed);
    StepStats epoch_stats;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
      epoch_stats = StepStats();
      for (size_t start = 0; start < order.size(); start += batch_size) {
        const size_t n = std::min<size_t>(batch_size, order.size() - start);
        auto stats = model.TrainStep(client_.get(), absl::MakeConstSpan(&order[start], n),
                                     1.0f / static_cast<float>(n));
        EXPECT_TRUE(stats.ok()) << stats.status();
        if (!stats.ok()) return epoch_stats;
        epoch_stats.loss_sum += stats->loss_sum;
        epoch_stats.correct += stats->correct;
        epoch_stats.examples += stats->examples;
      }
    }
    return epoch_stats;
  }

  std::unique_ptr<RpcClient> client_;
};

v1::OptimizerSpec Sgd(float learning_rate) {
  v1::OptimizerSpec spec;
  spec.set_kind(v1::OptimizerSpec::SGD);
  spec.set_learning_rate(learning_rate);
  return spec;
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST_F(SparseLogRegTest, TablesAreSparseWeightsAndDenseBias) {
  SparseLogReg model(SpamDataset({{{1}, 1}}, {}), DefaultSpamLogRegOptimizer(), 7);
  const std::vector<v1::TableSpec> tables = model.Tables("job", 5);
  ASSERT_EQ(tables.size(), 2u);
  EXPECT_EQ(tables[0].table_id(), 5u);
  EXPECT_EQ(tables[0].kind(), v1::SPARSE);
  EXPECT_EQ(tables[0].dim(), 1u);
  EXPECT_EQ(tables[1].table_id(), 6u);
  EXPECT_EQ(tables[1].kind(), v1::DENSE);
  EXPECT_EQ(tables[1].dim(), 1u);
  EXPECT_EQ(tables[1].num_rows(), 1u);
  for (const v1::TableSpec& t : tables) {
    EXPECT_EQ(t.job_id(), "job");
    EXPECT_EQ(t.initializer().kind(), v1::InitializerSpec::ZEROS);
    EXPECT_EQ(t.initializer().seed(), 7u);
    EXPECT_EQ(t.optimizer().kind(), v1::OptimizerSpec::FTRL);
  }
  EXPECT_EQ(model.weights_table_id(), 5u);
  EXPECT_EQ(model.bias_table_id(), 6u);
  EXPECT_EQ(model.num_train_examples(), 1);
}

// With SGD at learning rate 1 from zero weights, every pushed gradient shows up negated. On the
// host (double precision) and on the CPU backend (the GPU's code path, in FP32).
class SparseLogRegStepTest : public SparseLogRegTest, public ::testing::WithParamInterface<bool> {
 protected:
  std::unique_ptr<ComputeBackend> Backend() { return GetParam() ? MakeCpuBackend() : nullptr; }
};

TEST_P(SparseLogRegStepTest, PushesHandComputedGradients) {
  // e0 = {1, 2} spam, e1 = {2, 3, 4} ham.
  SparseLogReg model(SpamDataset({{{1, 2}, 1}, {{2, 3, 4}, 0}}, {}), Sgd(1.0f), 1, Backend());
  EXPECT_EQ(model.backend() != nullptr, GetParam());
  ASSERT_NO_FATAL_FAILURE(Connect(v1::ConsistencySpec::SYNC, model));
  const std::vector<uint64_t> keys = {1, 2, 3, 4};

  // Step 1, both examples, scale 1/2. At zero weights p = 1/2: dL/dw = (p - y) / 2 summed.
  const std::vector<int64_t> both = {0, 1};
  auto stats = model.TrainStep(client_.get(), both, 0.5f);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->examples, 2);
  EXPECT_NEAR(stats->loss_sum, 2 * std::log(2.0), 1e-6);
  EXPECT_EQ(stats->correct, 1);  // margin 0 predicts ham
  EXPECT_EQ(client_->clock(), 1);
  auto [w, b] = Weights(model, keys);
  EXPECT_FLOAT_EQ(w[0], 0.25f);   // -(1/2 - 1) / 2
  EXPECT_FLOAT_EQ(w[1], 0.0f);    // -((1/2 - 1) + 1/2) / 2
  EXPECT_FLOAT_EQ(w[2], -0.25f);  // -(1/2) / 2
  EXPECT_FLOAT_EQ(w[3], -0.25f);
  EXPECT_FLOAT_EQ(b, 0.0f);

  // Step 2, e1 alone, scale 1: margin w2 + w3 + w4 + b = -0.5, gradient sigmoid(-0.5) on each of
  // its features and the bias.
  const std::vector<int64_t> second = {1};
  stats = model.TrainStep(client_.get(), second, 1.0f);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_NEAR(stats->loss_sum, std::log1p(std::exp(-0.5)), 1e-6);
  EXPECT_EQ(stats->correct, 1);
  EXPECT_EQ(client_->clock(), 2);
  const double p = Sigmoid(-0.5);
  std::tie(w, b) = Weights(model, keys);
  EXPECT_FLOAT_EQ(w[0], 0.25f);
  EXPECT_NEAR(w[1], -p, 1e-6);
  EXPECT_NEAR(w[2], -0.25 - p, 1e-6);
  EXPECT_NEAR(w[3], -0.25 - p, 1e-6);
  EXPECT_NEAR(b, -p, 1e-6);

  // An empty batch still advances the clock once, and changes nothing.
  stats = model.TrainStep(client_.get(), {}, 1.0f);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->examples, 0);
  EXPECT_EQ(client_->clock(), 3);
  auto [w3, b3] = Weights(model, keys);
  EXPECT_EQ(w3, w);
  EXPECT_EQ(b3, b);
}

TEST_F(SparseLogRegTest, RejectsExamplesOutOfRange) {
  SparseLogReg model(SpamDataset({{{1}, 1}, {{2}, 0}}, {}), Sgd(1.0f), 1);
  ASSERT_NO_FATAL_FAILURE(Connect(v1::ConsistencySpec::ASYNC, model));
  for (int64_t bad : {int64_t{-1}, int64_t{2}}) {
    const std::vector<int64_t> batch = {0, bad};
    EXPECT_EQ(model.TrainStep(client_.get(), batch, 1.0f).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_EQ(client_->clock(), 0);
}

TEST_F(SparseLogRegTest, StartFailsWithoutTables) {
  SparseLogReg model(SpamDataset({{{1}, 1}}, {}), Sgd(1.0f), 1);
  ASSERT_NO_FATAL_FAILURE(Connect(v1::ConsistencySpec::ASYNC, model, /*first_table_id=*/1));
  model.Tables(kJob, 40);  // ids 40 and 41 were never created
  EXPECT_FALSE(model.Start(client_.get()).ok());
}

// Messages built from disjoint spam and ham vocabularies plus shared filler words.
SpamDataset SyntheticCorpus(int num_train, int num_test) {
  const std::vector<std::string> spam_words = {"free", "money", "winner", "click", "offer"};
  const std::vector<std::string> ham_words = {"meeting", "patch", "lunch", "report", "kernel"};
  const std::vector<std::string> filler = {"the", "and", "you", "this", "today", "please"};
  std::mt19937_64 rng(11);
  auto message = [&](int label) {
    const auto& words = label == 1 ? spam_words : ham_words;
    std::string text = absl::StrCat("Subject: ", words[rng() % words.size()], "\n\n");
    for (int i = 0; i < 6; ++i) absl::StrAppend(&text, filler[rng() % filler.size()], " ");
    absl::StrAppend(&text, words[rng() % words.size()], " ", words[rng() % words.size()]);
    return SpamExample{MessageFeatures(text, 16), label};
  };
  std::vector<SpamExample> train, test;
  for (int i = 0; i < num_train; ++i) train.push_back(message(i % 3 == 0 ? 1 : 0));
  for (int i = 0; i < num_test; ++i) test.push_back(message(i % 3 == 0 ? 1 : 0));
  return SpamDataset(std::move(train), std::move(test));
}

TEST_P(SparseLogRegStepTest, LearnsSyntheticCorpusPerfectly) {
  SparseLogReg model(SyntheticCorpus(300, 90), DefaultSpamLogRegOptimizer(), 1, Backend());
  ASSERT_NO_FATAL_FAILURE(Connect(v1::ConsistencySpec::SYNC, model));
  auto before = model.EvaluateWithAuc(client_.get());
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_NEAR(before->stats.loss_sum / before->stats.examples, std::log(2.0), 1e-6);
  EXPECT_EQ(before->auc, 0.5);  // all margins tie at zero

  const StepStats last_epoch = Train(model, /*epochs=*/3, /*batch_size=*/8, /*seed=*/1);
  EXPECT_EQ(last_epoch.correct, last_epoch.examples);
  auto after = model.EvaluateWithAuc(client_.get());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->stats.examples, 90);
  EXPECT_EQ(after->stats.correct, 90);
  EXPECT_EQ(after->auc, 1.0);
  EXPECT_LT(after->stats.loss_sum / after->stats.examples, 0.1);
  auto plain = model.Evaluate(client_.get());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->correct, 90);
}

INSTANTIATE_TEST_SUITE_P(Compute, SparseLogRegStepTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "CpuBackend" : "Host";
                         });

// A label other than 0 or 1 (no data set loader makes one) is refused on the backend path.
TEST_F(SparseLogRegTest, BackendStepRefusesLabelsOtherThanZeroOrOne) {
  SparseLogReg model(SpamDataset({{{1}, 1}, {{2}, 3}}, {}), Sgd(1.0f), 1, MakeCpuBackend());
  ASSERT_NO_FATAL_FAILURE(Connect(v1::ConsistencySpec::ASYNC, model));
  const std::vector<int64_t> batch = {0, 1};
  const absl::Status s = model.TrainStep(client_.get(), batch, 1.0f).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(client_->clock(), 0);  // nothing pushed
}

TEST(MakeSpamLogRegTest, ReportsLoadErrors) {
  EXPECT_EQ(
      MakeSpamLogReg("/nonexistent-spam-dir", 20, DefaultSpamLogRegOptimizer(), 1).status().code(),
      absl::StatusCode::kNotFound);
  EXPECT_EQ(
      MakeSpamLogReg("/nonexistent-spam-dir", 0, DefaultSpamLogRegOptimizer(), 1).status().code(),
      absl::StatusCode::kInvalidArgument);
}

// The real corpus: a few epochs of batches of 32 must generalize to the held-out 20%.
TEST_P(SparseLogRegStepTest, LearnsSpamAssassin) {
  if (!std::ifstream(absl::StrCat(kDefaultSpamAssassinDir, "/", kSpamMessagesFile)).good()) {
    GTEST_SKIP() << "no SpamAssassin corpus in " << kDefaultSpamAssassinDir
                 << "; run deploy/fetch-spam-assassin.sh to install it";
  }
  SpamDatasetOptions options;
  options.hash_bits = 20;
  auto data = SpamDataset::Load(kDefaultSpamAssassinDir, options);
  ASSERT_TRUE(data.ok()) << data.status();
  auto model =
      std::make_unique<SparseLogReg>(std::move(*data), DefaultSpamLogRegOptimizer(), 1, Backend());
  ASSERT_NO_FATAL_FAILURE(Connect(v1::ConsistencySpec::ASYNC, *model));
  const absl::Time start = absl::Now();
  const StepStats train = Train(*model, /*epochs=*/3, /*batch_size=*/32, /*seed=*/1);
  const absl::Duration train_time = absl::Now() - start;
  auto eval = model->EvaluateWithAuc(client_.get());
  ASSERT_TRUE(eval.ok()) << eval.status();
  const double accuracy = static_cast<double>(eval->stats.correct) / eval->stats.examples;
  std::cout << "spam_logreg (" << (GetParam() ? "cpu backend, fp32" : "host, double")
            << "): " << model->num_train_examples() << " train, " << eval->stats.examples
            << " test; last epoch train accuracy "
            << static_cast<double>(train.correct) / train.examples << "; held-out accuracy "
            << accuracy << ", AUC " << eval->auc << ", log loss "
            << eval->stats.loss_sum / eval->stats.examples << "; trained in " << train_time
            << std::endl;
  // Measured (deterministic: one worker, fixed order): accuracy 0.9854, AUC 0.9971.
  EXPECT_GE(accuracy, 0.975);
  EXPECT_GE(eval->auc, 0.99);
}

}  // namespace
}  // namespace ps
