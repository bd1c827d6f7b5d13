// What a job's credential may name: the checks alone, then through a real server in-process (a
// real stub, a token in the call's metadata, real RocksDB checkpoints under a temporary folder).
// Issue 49: a program of job A created the table id the scheduler would give job C's first
// table, and wrote a checkpoint into job B's folder, so that C's CreateTable and B's next
// checkpoint failed.
#include "server/job_grants.h"

#include <grpcpp/grpcpp.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_tables.h"
#include "common/security.h"
#include "common/shard_map.h"
#include "gtest/gtest.h"
#include "server/parameter_server.h"
#include "server/testing/service_fixture.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

TEST(JobGrantsTest, TableIdsAreTheJobsRangeOnly) {
  EXPECT_TRUE(CheckJobTableId("job-1", 1001).ok());
  EXPECT_TRUE(CheckJobTableId("job-1", 2000).ok());
  EXPECT_TRUE(CheckJobTableId("job-3", 3001).ok());
  const absl::Status squat = CheckJobTableId("job-1", 3001);
  EXPECT_EQ(squat.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(squat.message().find("table id 3001 is not one of job 'job-1''s (the scheduler "
                                 "numbers its tables 1001..2000)"),
            std::string::npos)
      << squat;
  EXPECT_FALSE(CheckJobTableId("job-1", 1000).ok());
  EXPECT_FALSE(CheckJobTableId("job-1", 2001).ok());
  EXPECT_FALSE(CheckJobTableId("job-1", 0).ok());
  // Ids that are not job-N hash into a range of their own.
  const uint32_t first = FirstTableIdOf("fashion");
  EXPECT_TRUE(CheckJobTableId("fashion", first).ok());
  EXPECT_TRUE(CheckJobTableId("fashion", first + kTableIdsPerJob - 1).ok());
  EXPECT_FALSE(CheckJobTableId("fashion", first + kTableIdsPerJob).ok());
}

TEST(JobGrantsTest, CheckpointPathsAreTheJobsFolderOnly) {
  const fs::path root = fs::path(::testing::TempDir()) / absl::StrCat("job_grants_", getpid());
  fs::create_directories(root);
  const std::vector<std::string> roots = {fs::canonical(root).string()};
  const std::string r = roots[0];
  auto ok = [&](const std::string& job, const std::string& path) {
    return CheckJobCheckpointPath(job, path, roots).ok();
  };
  EXPECT_TRUE(ok("job-1", r + "/job-1.1700000000000/ckpt-3/shard-0"));
  EXPECT_TRUE(ok("job-1", r + "/team/job-1.17/ckpt-1/shard-12"));  // a spec's checkpoint.root
  // Another job's folder, named outright or reached with "..".
  EXPECT_FALSE(ok("job-1", r + "/job-2.1700000000000/ckpt-3/shard-0"));
  EXPECT_FALSE(ok("job-1", r + "/job-1.17/../job-2.17/ckpt-3/shard-0"));
  EXPECT_FALSE(ok("job-1", r + "/job-11.17/ckpt-3/shard-0"));
  EXPECT_FALSE(ok("job-11", r + "/job-1.17/ckpt-3/shard-0"));
  // A path of the job's shape below another job's shard folder would create that folder.
  EXPECT_FALSE(ok("job-1", r + "/job-2.17/ckpt-3/shard-0/job-1.17/ckpt-1/shard-0"));
  EXPECT_FALSE(ok("job-1", r + "/x/ckpt-3/job-1.17/ckpt-1/shard-0"));
  // Nor anything inside another job's folder.
  EXPECT_FALSE(ok("job-1", r + "/job-2.17/job-1.17/ckpt-1/shard-0"));
  EXPECT_FALSE(ok("job-1", r + "/team/job-2.17/job-1.17/ckpt-1/shard-0"));
  // Not the scheduler's shape.
  EXPECT_FALSE(ok("job-1", r + "/job-1.17/ckpt-3"));
  EXPECT_FALSE(ok("job-1", r + "/job-1/ckpt-3/shard-0"));
  EXPECT_FALSE(ok("job-1", r + "/job-1.17x/ckpt-3/shard-0"));
  EXPECT_FALSE(ok("job-1", r + "/job-1.17/ckpt-3/shard-0x"));
  EXPECT_FALSE(ok("job-1", r + "/job-1.17/ckpt-/shard-0"));
  EXPECT_FALSE(ok("job-1", "job-1.17/ckpt-3/shard-0"));  // relative
  EXPECT_FALSE(ok("job-1", ""));
  // Outside the roots.
  EXPECT_FALSE(ok("job-1", "/elsewhere/job-1.17/ckpt-3/shard-0"));
  EXPECT_FALSE(CheckJobCheckpointPath("job-1", r + "/job-1.17/ckpt-3/shard-0", {}).ok());
  // A symlink under the root is followed: one into another job's folder is that folder.
  fs::create_directories(root / "job-2.17");
  fs::create_symlink(root / "job-2.17", root / "job-1.17");
  EXPECT_FALSE(ok("job-1", r + "/job-1.17/ckpt-3/shard-0"));
  fs::remove_all(root);
}

constexpr char kClusterToken[] = "cluster-token-for-the-job-grants-test";

class JobGrantsServerTest : public testing::ServiceFixture {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            absl::StrCat("job_grants_server_", getpid(), "_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    root_ = fs::canonical(root_);
    ParameterServerOptions options;
    options.checkpoint_roots = {root_.string()};
    options.authorizer = std::make_shared<Authorizer>(kClusterToken, "", &registry_);
    ASSERT_NO_FATAL_FAILURE(StartServer(options, &registry_));
  }
  void TearDown() override {
    ServiceFixture::TearDown();
    fs::remove_all(root_);
  }

  struct Context : testing::CallContext {
    explicit Context(const std::string& token) {
      ctx.AddMetadata("authorization", "Bearer " + token);
    }
  };

  grpc::Status Configure(const std::string& job, const std::string& token) {
    v1::ConfigureJobRequest req;
    req.set_job_id(job);
    req.mutable_consistency()->set_mode(v1::ConsistencySpec::ASYNC);
    req.add_worker_ids(0);
    req.set_membership_epoch(1);
    req.set_owned_slots(EncodeSlotBitmap(std::vector<bool>(kNumSlots, true)));
    req.set_shard_epoch(1);
    v1::ConfigureJobResponse resp;
    Context c(token);
    return stub_->ConfigureJob(&c.ctx, req, &resp);
  }
  grpc::Status Create(const std::string& job, uint32_t table_id, const std::string& token) {
    v1::CreateTableRequest req;
    v1::TableSpec& spec = *req.mutable_spec();
    spec.set_table_id(table_id);
    spec.set_name("w");
    spec.set_job_id(job);
    spec.set_kind(v1::DENSE);
    spec.set_dim(4);
    spec.set_num_rows(8);
    spec.mutable_initializer()->set_kind(v1::InitializerSpec::ZEROS);
    spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
    spec.mutable_optimizer()->set_learning_rate(0.5f);
    v1::CreateTableResponse resp;
    Context c(token);
    return stub_->CreateTable(&c.ctx, req, &resp);
  }
  grpc::Status Checkpoint(const std::string& job, const fs::path& path, const std::string& token) {
    v1::CheckpointRequest req;
    req.set_job_id(job);
    req.set_checkpoint_id(++checkpoint_id_);
    req.set_path(path.string());
    req.set_shard_epoch(1);
    v1::CheckpointResponse resp;
    Context c(token);
    return stub_->Checkpoint(&c.ctx, req, &resp);
  }
  // Waits until the last checkpoint of `job` is written (at most 2 are written at once).
  grpc::Status AwaitLast(const std::string& job) {
    v1::AwaitCheckpointRequest req;
    req.set_job_id(job);
    req.set_checkpoint_id(checkpoint_id_);
    v1::CheckpointResponse resp;
    Context c(kClusterToken);
    return stub_->AwaitCheckpoint(&c.ctx, req, &resp);
  }
  double Refused(const std::string& reason) {
    const std::string text = prometheus::TextSerializer().Serialize(registry_.Collect());
    const std::string key = absl::StrCat("ps_auth_refused_total{reason=\"", reason, "\"} ");
    const size_t at = text.find(key);
    return at == std::string::npos ? 0 : std::stod(text.substr(at + key.size()));
  }

  prometheus::Registry registry_;  // the server (destroyed by TearDown) must not outlive it
  fs::path root_;
  uint64_t checkpoint_id_ = 0;
};

TEST_F(JobGrantsServerTest, AJobsCredentialCannotSquatAnotherJobsTableId) {
  const std::string a = JobToken(kClusterToken, "job-1");
  ASSERT_TRUE(Configure("job-1", a).ok());
  grpc::Status s = Create("job-1", 3001, a);  // job-3's first table
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_NE(s.error_message().find("table id 3001 is not one of job 'job-1''s"), std::string::npos)
      << s.error_message();
  EXPECT_EQ(Refused("table_id"), 1);
  // Nothing was created: job-3's own CreateTable (its credential) goes through.
  s = Create("job-3", 3001, JobToken(kClusterToken, "job-3"));
  EXPECT_TRUE(s.ok()) << s.error_message();
  // Its own ids, and any id with the cluster token (the daemons', psctl's), as before.
  s = Create("job-1", 1001, a);
  EXPECT_TRUE(s.ok()) << s.error_message();
  s = Create("job-1", 5, kClusterToken);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Refused("table_id"), 1);
}

TEST_F(JobGrantsServerTest, AJobsCredentialCannotSquatAnotherJobsCheckpointFolder) {
  const std::string a = JobToken(kClusterToken, "job-1");
  const std::string b = JobToken(kClusterToken, "job-2");
  ASSERT_TRUE(Configure("job-1", a).ok());
  ASSERT_TRUE(Configure("job-2", b).ok());
  const fs::path victim = root_ / "job-2.1700000000000" / "ckpt-3" / "shard-0";
  grpc::Status s = Checkpoint("job-1", victim, a);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_NE(s.error_message().find("is not job 'job-1''s own"), std::string::npos)
      << s.error_message();
  s = Checkpoint("job-1", root_ / "elsewhere", a);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_EQ(Refused("checkpoint_path"), 2);
  EXPECT_FALSE(fs::exists(root_ / "job-2.1700000000000"));
  EXPECT_FALSE(fs::exists(root_ / "elsewhere"));
  // job-2's own checkpoint there goes through; job-1's into its own folder too.
  s = Checkpoint("job-2", victim, b);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(AwaitLast("job-2").ok());
  s = Checkpoint("job-1", root_ / "job-1.1700000000000" / "ckpt-3" / "shard-0", a);
  EXPECT_TRUE(s.ok()) << s.error_message();
  // The cluster token (a worker daemon's checkpointer) names any path under the roots.
  s = Checkpoint("job-1", root_ / "by-the-daemon", kClusterToken);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Refused("checkpoint_path"), 2);
}

TEST_F(JobGrantsServerTest, DataCallsWithAnotherJobsCredentialAreRefusedAndCounted) {
  const std::string a = JobToken(kClusterToken, "job-1");
  const std::string b = JobToken(kClusterToken, "job-2");
  ASSERT_TRUE(Configure("job-2", b).ok());
  ASSERT_TRUE(Create("job-2", 2001, b).ok());
  v1::PullRequest pull;
  pull.set_job_id("job-2");
  pull.set_shard_epoch(1);
  v1::KeyBlock& block = *pull.add_blocks();
  block.set_table_id(2001);
  const uint64_t key = 0;
  block.set_keys(std::string(reinterpret_cast<const char*>(&key), sizeof(key)));
  v1::PullResponse answer;
  {
    Context c(a);
    grpc::Status s = stub_->Pull(&c.ctx, pull, &answer);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
    EXPECT_NE(s.error_message().find("job-1's credential"), std::string::npos) << s.error_message();
  }
  v1::PushRequest push;
  push.set_job_id("job-2");
  push.set_shard_epoch(1);
  *push.add_blocks() = block;
  push.mutable_blocks(0)->set_values(std::string(4 * sizeof(float), '\0'));
  v1::PushResponse pushed;
  {
    Context c(a);
    grpc::Status s = stub_->Push(&c.ctx, push, &pushed);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  }
  EXPECT_EQ(Refused("other_job"), 2);
  // job-2's own credential still pulls (the refusals changed nothing).
  Context c(b);
  grpc::Status s = stub_->Pull(&c.ctx, pull, &answer);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Refused("other_job"), 2);
}

TEST_F(JobGrantsServerTest, APrefetchWithAnotherJobsCredentialIsRefusedAndCounted) {
  const std::string a = JobToken(kClusterToken, "job-1");
  const std::string b = JobToken(kClusterToken, "job-2");
  ASSERT_TRUE(Configure("job-2", b).ok());
  ASSERT_TRUE(Create("job-2", 2001, b).ok());
  v1::PullRequest prefetch;
  prefetch.set_job_id("job-2");
  prefetch.set_shard_epoch(1);
  prefetch.set_prefetch(true);
  v1::KeyBlock& block = *prefetch.add_blocks();
  block.set_table_id(2001);
  const uint64_t key = 0;
  block.set_keys(std::string(reinterpret_cast<const char*>(&key), sizeof(key)));
  v1::PullResponse answer;
  {
    Context c(a);
    grpc::Status s = stub_->Pull(&c.ctx, prefetch, &answer);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  }
  EXPECT_EQ(Refused("other_job"), 1);
  Context c(b);  // job-2's own credential: answered, with no value
  grpc::Status s = stub_->Pull(&c.ctx, prefetch, &answer);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(answer.blocks_size(), 0);
}

}  // namespace
}  // namespace ps
