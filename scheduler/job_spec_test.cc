#include "scheduler/job_spec.h"

#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/zoo_models.h"
#include "gtest/gtest.h"
#include "scheduler/internal/test_util.h"

namespace ps {
namespace {

class JobSpecTest : public ::testing::Test {
 protected:
  v1::JobSpec Mlp() const {
    v1::JobSpec spec;
    spec.set_model("fashion_mlp");
    spec.set_num_workers(2);
    spec.set_data_dir(dir_.path());
    return spec;
  }
  v1::JobSpec Logreg() const {
    v1::JobSpec spec = Mlp();
    spec.set_model("spam_logreg");
    return spec;
  }
  // Expects INVALID_ARGUMENT whose message contains `field`.
  void ExpectRejected(const std::function<void(v1::JobSpec*)>& mutate, const std::string& field,
                      v1::JobSpec spec) {
    mutate(&spec);
    absl::Status s = NormalizeJobSpec(&spec, limits_);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field << ": " << s;
    EXPECT_NE(s.message().find(field), std::string::npos) << s;
  }

  ScopedTempDir dir_;
  JobLimits limits_{{"/var/lib/ps/checkpoints", "/mnt/ckpt"}};
};

TEST_F(JobSpecTest, FillsDefaults) {
  v1::JobSpec spec = Mlp();
  ASSERT_TRUE(NormalizeJobSpec(&spec, limits_).ok());
  EXPECT_EQ(spec.batch_size(), 64);
  EXPECT_EQ(spec.epochs(), 1);
  ASSERT_EQ(spec.layers_size(), 3);
  EXPECT_EQ(spec.layers(0), 784);
  EXPECT_EQ(spec.layers(1), 128);
  EXPECT_EQ(spec.layers(2), 10);
  EXPECT_TRUE(spec.has_evaluate());
  EXPECT_TRUE(spec.evaluate());
  EXPECT_EQ(spec.hash_bits(), 0);

  v1::JobSpec logreg = Logreg();
  logreg.set_evaluate(false);
  logreg.set_batch_size(32);
  ASSERT_TRUE(NormalizeJobSpec(&logreg, limits_).ok());
  EXPECT_EQ(logreg.hash_bits(), 20);
  EXPECT_EQ(logreg.batch_size(), 32);
  EXPECT_FALSE(logreg.evaluate());
  EXPECT_TRUE(logreg.layers().empty());
}

TEST_F(JobSpecTest, DefaultDataDirPerModel) {
  for (const ZooModel* model : ZooModels()) {
    v1::JobSpec spec = Mlp();
    spec.set_model(model->name);
    spec.clear_data_dir();
    const std::string expected = model->default_data_dir;
    absl::Status s = NormalizeJobSpec(&spec, limits_);
    // Whether the data set is installed here does not matter: the workers read it.
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(spec.data_dir(), expected);
  }
}

// The zoo as the registry lists it: an unknown model is refused naming every model of it.
TEST_F(JobSpecTest, UnknownModelNamesTheZoo) {
  EXPECT_EQ(std::string(FindZooModel("fashion_mlp")->default_data_dir),
            "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(std::string(FindZooModel("spam_logreg")->default_data_dir),
            "/usr/share/datasets/spam-assassin");
  EXPECT_EQ(FindZooModel("resnet"), nullptr);
  EXPECT_EQ(ZooModelNames(), "fashion_mlp, spam_logreg");
  ExpectRejected([](v1::JobSpec* s) { s->set_model("resnet"); }, "fashion_mlp, spam_logreg", Mlp());
}

// A spec may write checkpoints only under a root the operator allowed, '..' included.
TEST_F(JobSpecTest, CheckpointRootMustLieUnderAnAllowedRoot) {
  for (const char* root : {"/etc", "/tmp/../etc/cron.d", "/mnt/ckpt/../../etc", "/mnt/ckptx",
                           "/mnt", "/", "relative/dir"}) {
    v1::JobSpec spec = Mlp();
    spec.mutable_checkpoint()->set_root(root);
    absl::Status s = NormalizeJobSpec(&spec, limits_);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << root << ": " << s;
    EXPECT_NE(s.message().find("checkpoint.root"), std::string::npos) << s;
    EXPECT_NE(s.message().find(root), std::string::npos) << s;
    if (std::string(root) != "relative/dir") {
      EXPECT_NE(s.message().find("/var/lib/ps/checkpoints, /mnt/ckpt"), std::string::npos) << s;
    }
  }
  for (const auto& [root, normal] : std::vector<std::pair<std::string, std::string>>{
           {"/mnt/ckpt", "/mnt/ckpt"},
           {"/mnt/ckpt/", "/mnt/ckpt"},
           {"/mnt/ckpt/team-a/./x/../y", "/mnt/ckpt/team-a/y"},
           {"/var/lib/ps/checkpoints/a", "/var/lib/ps/checkpoints/a"}}) {
    v1::JobSpec spec = Mlp();
    spec.mutable_checkpoint()->set_root(root);
    absl::Status s = NormalizeJobSpec(&spec, limits_);
    EXPECT_TRUE(s.ok()) << root << ": " << s;
    EXPECT_EQ(spec.checkpoint().root(), normal);
  }
  v1::JobSpec spec = Mlp();
  spec.mutable_checkpoint()->set_root("/mnt/ckpt");
  EXPECT_EQ(NormalizeJobSpec(&spec, JobLimits()).code(), absl::StatusCode::kInvalidArgument);
}

// The scheduler is no oracle of its own disk: a data_dir is judged by its form alone, and the
// same for a path that exists on this host and one that does not.
TEST_F(JobSpecTest, DataDirIsCheckedForItsFormOnly) {
  for (const std::string& dir :
       {std::string("/nonexistent/ps/data"), std::string("/etc"), dir_.path()}) {
    v1::JobSpec spec = Mlp();
    spec.set_data_dir(dir);
    absl::Status s = NormalizeJobSpec(&spec, limits_);
    EXPECT_TRUE(s.ok()) << dir << ": " << s;
  }
  v1::JobSpec spec = Mlp();
  spec.set_data_dir("/data//sets/./fashion/../fashion-mnist/");
  ASSERT_TRUE(NormalizeJobSpec(&spec, limits_).ok());
  EXPECT_EQ(spec.data_dir(), "/data/sets/fashion-mnist");
}

TEST_F(JobSpecTest, AcceptsValidVariants) {
  v1::JobSpec spec = Mlp();
  spec.add_layers(784);
  spec.add_layers(10);
  spec.set_num_servers(3);
  spec.mutable_consistency()->set_mode(v1::ConsistencySpec::SSP);
  spec.mutable_consistency()->set_staleness(0);
  EXPECT_TRUE(NormalizeJobSpec(&spec, limits_).ok());
  v1::JobSpec logreg = Logreg();
  logreg.set_hash_bits(28);  // 2^28 weights x 3 (ftrl) x 4 bytes = 3 GiB
  logreg.set_num_workers(1024);
  logreg.set_num_servers(1024);
  logreg.set_epochs(10000);
  logreg.set_batch_size(65536);
  EXPECT_TRUE(NormalizeJobSpec(&logreg, limits_).ok());
}

TEST_F(JobSpecTest, ModelBytesCountParametersAndOptimizerState) {
  v1::JobSpec mlp = Mlp();
  ASSERT_TRUE(NormalizeJobSpec(&mlp, limits_).ok());
  const uint64_t parameters = 784 * 128 + 128 + 128 * 10 + 10;
  EXPECT_EQ(ModelBytes(mlp), parameters * 4 * 3);  // adam by default
  mlp.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  EXPECT_EQ(ModelBytes(mlp), parameters * 4);
  mlp.mutable_optimizer()->set_kind(v1::OptimizerSpec::MOMENTUM);
  EXPECT_EQ(ModelBytes(mlp), parameters * 4 * 2);
  v1::JobSpec logreg = Logreg();
  ASSERT_TRUE(NormalizeJobSpec(&logreg, limits_).ok());
  EXPECT_EQ(ModelBytes(logreg), ((uint64_t{1} << 20) + 1) * 4 * 3);  // ftrl by default
}

// Memory bombs: a model of 16 GiB or more is refused by the cap, naming both sizes.
TEST_F(JobSpecTest, ModelOverTheCapIsResourceExhausted) {
  v1::JobSpec wide = Mlp();
  for (int size : {784, 65536, 65536, 10}) wide.add_layers(size);  // ~48 GiB with adam
  absl::Status s = NormalizeJobSpec(&wide, limits_);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("max_model_bytes"), std::string::npos) << s;
  EXPECT_NE(s.message().find("4294967296 bytes"), std::string::npos) << s;
  v1::JobSpec logreg = Logreg();
  logreg.set_hash_bits(30);  // 12 GiB with ftrl
  s = NormalizeJobSpec(&logreg, limits_);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("12.0 GiB"), std::string::npos) << s;
  JobLimits bigger = limits_;
  bigger.max_model_bytes = uint64_t{16} << 30;
  logreg.set_hash_bits(30);
  EXPECT_TRUE(NormalizeJobSpec(&logreg, bigger).ok());
  v1::JobSpec small = Mlp();
  bigger.max_model_bytes = 1000;
  EXPECT_EQ(NormalizeJobSpec(&small, bigger).code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(JobSpecTest, RejectsEachBadFieldByName) {
  const v1::JobSpec mlp = Mlp();
  const v1::JobSpec logreg = Logreg();
  ExpectRejected([](v1::JobSpec* s) { s->set_model("resnet"); }, "model", mlp);
  ExpectRejected([](v1::JobSpec* s) { s->clear_model(); }, "model", mlp);
  ExpectRejected([](v1::JobSpec* s) { s->set_num_workers(0); }, "num_workers", mlp);
  ExpectRejected([](v1::JobSpec* s) { s->set_num_workers(1025); }, "num_workers", mlp);
  ExpectRejected([](v1::JobSpec* s) { s->set_num_servers(-1); }, "num_servers", mlp);
  ExpectRejected([](v1::JobSpec* s) { s->set_num_servers(1025); }, "num_servers", mlp);
  ExpectRejected([](v1::JobSpec* s) { s->set_batch_size(-1); }, "batch_size", mlp);
  ExpectRejected([](v1::JobSpec* s) { s->set_batch_size(65537); }, "batch_size", mlp);
  ExpectRejected([](v1::JobSpec* s) { s->set_epochs(-2); }, "epochs", mlp);
  ExpectRejected([](v1::JobSpec* s) { s->set_epochs(10001); }, "epochs", mlp);
  ExpectRejected([](v1::JobSpec* s) { s->mutable_checkpoint()->set_keep_last(1001); },
                 "checkpoint.keep_last", mlp);
  ExpectRejected([](v1::JobSpec* s) { s->mutable_lr_schedule()->set_step_epochs(10001); },
                 "lr_schedule.step_epochs", mlp);
  ExpectRejected(
      [](v1::JobSpec* s) {
        s->mutable_optimizer()->set_kind(static_cast<v1::OptimizerSpec::Kind>(99));
      },
      "optimizer.kind", mlp);
  ExpectRejected(
      [](v1::JobSpec* s) {
        s->add_layers(784);
        for (int i = 0; i < 15; ++i) s->add_layers(16);
        s->add_layers(10);
      },
      "layers must have 2..16 entries", mlp);
  ExpectRejected(
      [](v1::JobSpec* s) {
        s->mutable_consistency()->set_mode(v1::ConsistencySpec::SSP);
        s->mutable_consistency()->set_staleness(-1);
      },
      "consistency.staleness", mlp);
  ExpectRejected([](v1::JobSpec* s) { s->add_layers(784); }, "layers", mlp);
  ExpectRejected(
      [](v1::JobSpec* s) {
        for (int size : {784, 0, 10}) s->add_layers(size);
      },
      "layers[1]", mlp);
  ExpectRejected(
      [](v1::JobSpec* s) {
        for (int size : {784, 70000, 10}) s->add_layers(size);
      },
      "layers[1]", mlp);
  ExpectRejected(
      [](v1::JobSpec* s) {
        for (int size : {100, 10}) s->add_layers(size);
      },
      "layers", mlp);
  ExpectRejected(
      [](v1::JobSpec* s) {
        for (int size : {784, 128, 5}) s->add_layers(size);
      },
      "layers", mlp);
  ExpectRejected([](v1::JobSpec* s) { s->set_hash_bits(31); }, "hash_bits", logreg);
  ExpectRejected([](v1::JobSpec* s) { s->set_hash_bits(-1); }, "hash_bits", logreg);
  ExpectRejected([](v1::JobSpec* s) { s->set_data_dir("data/fashion"); }, "data_dir", mlp);
  ExpectRejected([](v1::JobSpec* s) { s->set_data_dir("/data\n/x"); }, "data_dir", mlp);
  ExpectRejected([](v1::JobSpec* s) { s->set_data_dir("/" + std::string(300, 'd')); }, "data_dir",
                 mlp);
}

v1::JobSpec Program() {
  v1::JobSpec spec;
  spec.set_num_workers(2);
  spec.mutable_program()->add_argv("/usr/bin/python3");
  spec.mutable_program()->add_argv("train.py");
  v1::TableSpec* emb = spec.add_tables();
  emb->set_name("emb");
  emb->set_kind(v1::SPARSE);
  emb->set_dim(16);
  v1::TableSpec* w = spec.add_tables();
  w->set_name("w");
  w->set_kind(v1::DENSE);
  w->set_dim(10);
  w->set_num_rows(100);
  w->mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  return spec;
}

TEST_F(JobSpecTest, ProgramJobGetsDefaultsAndTableIds) {
  v1::JobSpec spec = Program();
  ASSERT_TRUE(NormalizeJobSpec(&spec, limits_).ok());
  EXPECT_EQ(spec.program().progress_timeout_seconds(), kDefaultProgressTimeoutSeconds);
  EXPECT_EQ(spec.program().stop_grace_seconds(), kDefaultStopGraceSeconds);
  EXPECT_TRUE(spec.data_dir().empty());  // a program's data are its own business
  // 100 x 10 floats, Adam (two more per parameter); the sparse table is not counted.
  EXPECT_EQ(ModelBytes(spec), 100u * 10 * 4 * 3);
  AssignTableIds("job-7", 7001, &spec);
  EXPECT_EQ(spec.tables(0).table_id(), 7001u);
  EXPECT_EQ(spec.tables(1).table_id(), 7002u);
  EXPECT_EQ(spec.tables(1).job_id(), "job-7");
  // A bare name is looked up in the worker's PATH.
  spec = Program();
  spec.mutable_program()->set_argv(0, "python3");
  EXPECT_TRUE(NormalizeJobSpec(&spec, limits_).ok());
}

TEST_F(JobSpecTest, RejectsBadProgramJobsByName) {
  ExpectRejected(
      [](v1::JobSpec* s) {
        s->clear_program();
        s->clear_tables();
      },
      "neither model nor program", Program());
  ExpectRejected([](v1::JobSpec* s) { s->set_model("fashion_mlp"); }, "not both", Program());
  ExpectRejected([](v1::JobSpec* s) { s->clear_tables(); }, "declares its tables", Program());
  ExpectRejected([](v1::JobSpec* s) { s->mutable_program()->clear_argv(); },
                 "program.argv is empty", Program());
  ExpectRejected([](v1::JobSpec* s) { s->mutable_program()->set_argv(0, "bin/train"); },
                 "must be an absolute path or a name", Program());
  ExpectRejected([](v1::JobSpec* s) { s->mutable_tables(1)->set_name("emb"); },
                 "another table has the name", Program());
  ExpectRejected([](v1::JobSpec* s) { s->mutable_tables(0)->set_dim(0); }, "dim = 0", Program());
  ExpectRejected([](v1::JobSpec* s) { s->mutable_tables(1)->set_num_rows(0); }, "needs num_rows",
                 Program());
  ExpectRejected([](v1::JobSpec* s) { s->mutable_tables(0)->set_num_rows(5); },
                 "num_rows is for DENSE", Program());
  ExpectRejected([](v1::JobSpec* s) { s->mutable_tables(0)->set_kind(v1::TABLE_KIND_UNSPECIFIED); },
                 "kind must be DENSE or SPARSE", Program());
  ExpectRejected([](v1::JobSpec* s) { s->mutable_tables(0)->set_table_id(5); },
                 "assigned by the scheduler", Program());
  ExpectRejected([](v1::JobSpec* s) { s->mutable_tables(0)->set_name("a b"); }, "tables[0].name",
                 Program());
  ExpectRejected([](v1::JobSpec* s) { (*s->mutable_program()->mutable_env())["PS_AGENT"] = "x"; },
                 "starts with PS_", Program());
  ExpectRejected([](v1::JobSpec* s) { (*s->mutable_program()->mutable_env())["1X"] = "x"; },
                 "program.env name", Program());
  ExpectRejected([](v1::JobSpec* s) { s->mutable_program()->set_working_dir("rel"); },
                 "working_dir", Program());
  ExpectRejected([](v1::JobSpec* s) { s->mutable_program()->set_max_restarts(-1); }, "max_restarts",
                 Program());
  ExpectRejected([](v1::JobSpec* s) { s->add_layers(784); }, "zoo models' settings", Program());
  ExpectRejected([](v1::JobSpec* s) { *s->add_tables() = s->tables(0); }, "another table",
                 Program());
}

// Storage, admission and eviction are checked at submit as the servers check them.
TEST_F(JobSpecTest, RejectsBadTableFeaturesByName) {
  ExpectRejected([](v1::JobSpec* s) { s->mutable_tables(0)->mutable_eviction()->set_max_rows(0); },
                 "tables[0] (\"emb\"): eviction.max_rows = 0", Program());
  ExpectRejected(
      [](v1::JobSpec* s) { s->mutable_tables(0)->mutable_eviction()->set_ttl_seconds(-5); },
      "eviction.ttl_seconds = -5 must be >= 1", Program());
  ExpectRejected(
      [](v1::JobSpec* s) { s->mutable_tables(0)->mutable_admission()->set_min_count(300); },
      "admission.min_count = 300 is not in 0..255", Program());
  ExpectRejected(
      [](v1::JobSpec* s) { s->mutable_tables(0)->mutable_admission()->set_probability(1.5f); },
      "admission.probability = 1.5 is not in (0, 1]", Program());
  ExpectRejected([](v1::JobSpec* s) { s->mutable_tables(1)->mutable_eviction()->set_max_rows(10); },
                 "eviction is for SPARSE tables", Program());
  ExpectRejected(
      [](v1::JobSpec* s) {
        s->mutable_tables(0)->set_storage(static_cast<v1::TableSpec::Storage>(7));
      },
      "storage = 7 is not FP32, FP16 or BF16", Program());
  v1::JobSpec spec = Program();
  spec.mutable_tables(0)->set_storage(v1::TableSpec::FP16);
  spec.mutable_tables(0)->mutable_admission()->set_min_count(2);
  spec.mutable_tables(0)->mutable_eviction()->set_max_rows(1000);
  spec.mutable_tables(0)->mutable_eviction()->set_ttl_seconds(60);
  EXPECT_TRUE(NormalizeJobSpec(&spec, limits_).ok());
}

// Codecs on the wire (issue 33) are checked at submit as the servers check them.
TEST_F(JobSpecTest, RejectsBadCodecsByName) {
  ExpectRejected(
      [](v1::JobSpec* s) { s->mutable_tables(1)->mutable_push_codec()->set_codec(v1::CODEC_TOPK); },
      "push_codec.ratio = 0 is not in (0, 1]", Program());
  ExpectRejected(
      [](v1::JobSpec* s) { s->mutable_tables(0)->mutable_push_codec()->set_codec(v1::CODEC_SIGN); },
      "push_codec = sign is for DENSE tables", Program());
  ExpectRejected(
      [](v1::JobSpec* s) { s->mutable_tables(1)->mutable_pull_codec()->set_codec(v1::CODEC_SIGN); },
      "pull_codec = sign: topk and sign are for gradients", Program());
  ExpectRejected(
      [](v1::JobSpec* s) {
        s->mutable_tables(1)->mutable_pull_codec()->set_codec(static_cast<v1::ValueCodec>(9));
      },
      "pull_codec.codec = 9 is not a known codec", Program());
  v1::JobSpec spec = Program();
  spec.mutable_tables(1)->mutable_push_codec()->set_codec(v1::CODEC_TOPK);
  spec.mutable_tables(1)->mutable_push_codec()->set_ratio(0.01f);
  spec.mutable_tables(1)->mutable_pull_codec()->set_codec(v1::CODEC_FP16);
  spec.mutable_tables(0)->mutable_push_codec()->set_codec(v1::CODEC_BF16);
  EXPECT_TRUE(NormalizeJobSpec(&spec, limits_).ok());
}

// topk's momentum correction moves the momentum to the workers: the table's optimizer is SGD.
TEST_F(JobSpecTest, TopkMomentumNeedsAnSgdTable) {
  auto dgc = [](v1::JobSpec* s, v1::OptimizerSpec::Kind kind) {
    v1::CodecSpec* c = s->mutable_tables(1)->mutable_push_codec();
    c->set_codec(v1::CODEC_TOPK);
    c->set_ratio(0.01f);
    c->set_momentum(0.9f);
    c->set_warmup_steps(100);
    s->mutable_tables(1)->mutable_optimizer()->set_kind(kind);
  };
  ExpectRejected([&](v1::JobSpec* s) { dgc(s, v1::OptimizerSpec::MOMENTUM); },
                 "push_codec.momentum = 0.9 applies the momentum on the workers: the table's "
                 "optimizer must be SGD, not MOMENTUM",
                 Program());
  ExpectRejected(
      [&](v1::JobSpec* s) {
        dgc(s, v1::OptimizerSpec::SGD);
        s->mutable_tables(1)->mutable_push_codec()->set_momentum(1.0f);
      },
      "push_codec.momentum = 1 is not in [0, 1)", Program());
  v1::JobSpec spec = Program();
  dgc(&spec, v1::OptimizerSpec::SGD);
  EXPECT_TRUE(NormalizeJobSpec(&spec, limits_).ok());
}

// NaN, infinite and negative optimizer values are refused at submit, naming the field, as the
// servers refuse them at CreateTable (common/optimizer_spec.h), for a zoo model's optimizer and
// for each table of a program job.
TEST_F(JobSpecTest, RejectsNonFiniteAndNegativeOptimizerValuesByName) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {nan, inf, -inf, -0.5f, 0.0f}) {
    ExpectRejected([bad](v1::JobSpec* s) { s->mutable_optimizer()->set_learning_rate(bad); },
                   "optimizer.learning_rate", Mlp());
    ExpectRejected(
        [bad](v1::JobSpec* s) {
          s->mutable_tables(0)->mutable_optimizer()->set_learning_rate(bad);
        },
        "tables[0] (\"emb\"): optimizer.learning_rate", Program());
  }
  ExpectRejected([nan](v1::JobSpec* s) { s->mutable_optimizer()->set_weight_decay(nan); },
                 "optimizer.weight_decay", Mlp());
  ExpectRejected([](v1::JobSpec* s) { s->mutable_optimizer()->set_weight_decay(-1); },
                 "optimizer.weight_decay", Mlp());
  ExpectRejected(
      [nan](v1::JobSpec* s) {
        s->mutable_optimizer()->set_kind(v1::OptimizerSpec::MOMENTUM);
        s->mutable_optimizer()->set_momentum(nan);
      },
      "optimizer.momentum", Mlp());
  ExpectRejected([](v1::JobSpec* s) { s->mutable_tables(1)->mutable_optimizer()->set_beta2(1.5f); },
                 "tables[1] (\"w\"): optimizer.beta2", Program());
  ExpectRejected(
      [inf](v1::JobSpec* s) { s->mutable_tables(1)->mutable_optimizer()->set_epsilon(inf); },
      "optimizer.epsilon", Program());
  ExpectRejected(
      [](v1::JobSpec* s) {
        s->mutable_tables(0)->mutable_optimizer()->set_kind(v1::OptimizerSpec::FTRL);
        s->mutable_tables(0)->mutable_optimizer()->set_l1(-1);
      },
      "optimizer.l1", Program());
  v1::JobSpec fine = Mlp();
  fine.mutable_optimizer()->set_learning_rate(0.5f);
  EXPECT_TRUE(NormalizeJobSpec(&fine, limits_).ok());
}

TEST_F(JobSpecTest, ProgramJobOverTheModelCapIsResourceExhausted) {
  v1::JobSpec spec = Program();
  spec.mutable_tables(1)->set_num_rows(uint64_t{1} << 30);  // x 10 floats x 3: 120 GiB
  EXPECT_EQ(NormalizeJobSpec(&spec, limits_).code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(JobSpecTest, DataAssignmentIsDynamicForSspAndAsyncAndRefusedForSync) {
  for (auto mode :
       {v1::ConsistencySpec::SYNC, v1::ConsistencySpec::SSP, v1::ConsistencySpec::ASYNC}) {
    v1::JobSpec spec = Mlp();
    spec.mutable_consistency()->set_mode(mode);
    ASSERT_TRUE(NormalizeJobSpec(&spec, limits_).ok());
    const bool sync = mode == v1::ConsistencySpec::SYNC;
    EXPECT_EQ(spec.data_assignment(), sync ? v1::STATIC : v1::DYNAMIC);
    EXPECT_EQ(spec.consistency().data_clocks(), !sync);
  }
  v1::JobSpec fixed = Mlp();
  fixed.mutable_consistency()->set_mode(v1::ConsistencySpec::ASYNC);
  fixed.set_data_assignment(v1::STATIC);
  fixed.mutable_consistency()->set_data_clocks(true);  // the scheduler's to set
  ASSERT_TRUE(NormalizeJobSpec(&fixed, limits_).ok());
  EXPECT_EQ(fixed.data_assignment(), v1::STATIC);
  EXPECT_FALSE(fixed.consistency().data_clocks());
  ExpectRejected([](v1::JobSpec* s) { s->set_data_assignment(v1::DYNAMIC); },
                 "data_assignment = DYNAMIC needs consistency ssp or async", Mlp());
  v1::JobSpec program = Program();
  program.mutable_consistency()->set_mode(v1::ConsistencySpec::ASYNC);
  ASSERT_TRUE(NormalizeJobSpec(&program, limits_).ok());
  EXPECT_EQ(program.data_assignment(), v1::STATIC);
  program.set_data_assignment(v1::DYNAMIC);  // its program asks its Session for the ranges
  ASSERT_TRUE(NormalizeJobSpec(&program, limits_).ok());
  EXPECT_TRUE(program.consistency().data_clocks());
  program.mutable_consistency()->set_mode(v1::ConsistencySpec::SYNC);
  EXPECT_EQ(NormalizeJobSpec(&program, limits_).code(), absl::StatusCode::kInvalidArgument);
  ExpectRejected([](v1::JobSpec* s) { s->set_data_assignment(static_cast<v1::DataAssignment>(9)); },
                 "data_assignment = 9", Mlp());
}

// replication.replicas: a backup needs a server other than its primary.
TEST_F(JobSpecTest, ReplicasNeedAnotherServer) {
  v1::JobSpec spec = Mlp();
  spec.set_num_servers(2);
  spec.mutable_replication()->set_replicas(1);
  EXPECT_TRUE(NormalizeJobSpec(&spec, limits_).ok());
  spec.set_num_servers(1);
  absl::Status s = NormalizeJobSpec(&spec, limits_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("spec.replication.replicas = 1 must be at most num_servers - 1 = 0"),
            std::string::npos)
      << s;
  spec.set_num_servers(0);  // every live server: maybe one
  s = NormalizeJobSpec(&spec, limits_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("needs num_servers"), std::string::npos) << s;
  ExpectRejected(
      [](v1::JobSpec* s) {
        s->set_num_servers(2);
        s->mutable_replication()->set_replicas(1);
      },
      "not available for program jobs", Program());
  // A table with a row cap or a disk tier cannot have replicas, whatever else: named.
  ExpectRejected(
      [](v1::JobSpec* s) {
        s->set_num_servers(2);
        s->mutable_replication()->set_replicas(1);
        s->mutable_tables(0)->mutable_eviction()->set_max_rows(1000);
      },
      "tables[0] (\"emb\") has eviction.max_rows or a disk tier", Program());
  ExpectRejected([](v1::JobSpec* s) { s->mutable_replication()->set_replicas(-1); },
                 "replication.replicas", Mlp());
  ExpectRejected(
      [](v1::JobSpec* s) {
        s->set_num_servers(3);
        s->mutable_replication()->set_replicas(2);
      },
      "replication.replicas", Mlp());
}

}  // namespace
}  // namespace ps
