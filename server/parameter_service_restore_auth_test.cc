// Restore orders under tokens: a real server in-process on a free port with a cluster token,
// called through a real stub with the token or a job's credential in the call's metadata, reading
// real RocksDB checkpoints under a temporary directory. A job's credential carries out only the
// orders the scheduler signed for that job; the cluster token is trusted as before.
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_tables.h"
#include "common/node_identity.h"
#include "common/security.h"
#include "common/shard_map.h"
#include "common/testing/key_blocks.h"
#include "gtest/gtest.h"
#include "ps/v1/parameter_server.grpc.pb.h"
#include "server/parameter_server.h"
#include "server/testing/service_fixture.h"

namespace ps {
namespace {

namespace fs = std::filesystem;
using testing::Block;

constexpr char kClusterToken[] = "cluster-token-for-the-restore-auth-test";
constexpr char kVictim[] = "victim";
constexpr char kThief[] = "thief";
constexpr uint32_t kVictimDense = 1, kVictimSparse = 2;  // "dense" (8 rows of dim 4), "sparse"
// The same names and shapes, with ids of the thief's (a job's credential creates no others).
const uint32_t kThiefDense = FirstTableIdOf(kThief), kThiefSparse = kThiefDense + 1;

using RawRows = std::map<std::pair<uint32_t, uint64_t>, std::pair<int64_t, std::string>>;

class RestoreAuthTest : public testing::ServiceFixture {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            absl::StrCat("restore_auth_test_", getpid(), "_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    ParameterServerOptions options;
    options.checkpoint_roots = {root_.string()};
    options.authorizer = std::make_shared<Authorizer>(kClusterToken, "");
    ASSERT_NO_FATAL_FAILURE(StartServer(options));
  }
  void TearDown() override {
    ServiceFixture::TearDown();
    fs::remove_all(root_);
  }

  // A call's context presenting `token`.
  struct Context : testing::CallContext {
    explicit Context(const std::string& token) {
      ctx.AddMetadata("authorization", "Bearer " + token);
    }
  };

  // Job `job` with worker 1, owning every slot at shard epoch 1, and two tables.
  void SetUpJob(const std::string& job, const std::string& token, uint32_t dense, uint32_t sparse) {
    v1::ConfigureJobRequest configure;
    configure.set_job_id(job);
    configure.mutable_consistency()->set_mode(v1::ConsistencySpec::ASYNC);
    configure.add_worker_ids(1);
    configure.set_membership_epoch(1);
    configure.set_owned_slots(EncodeSlotBitmap(std::vector<bool>(kNumSlots, true)));
    configure.set_shard_epoch(1);
    v1::ConfigureJobResponse configured;
    Context c(token);
    grpc::Status s = stub_->ConfigureJob(&c.ctx, configure, &configured);
    ASSERT_TRUE(s.ok()) << s.error_message();
    for (uint32_t id : {dense, sparse}) {
      v1::CreateTableRequest req;
      v1::TableSpec& spec = *req.mutable_spec();
      spec.set_table_id(id);
      spec.set_name(id == dense ? "dense" : "sparse");
      spec.set_job_id(job);
      spec.set_kind(id == dense ? v1::DENSE : v1::SPARSE);
      spec.set_dim(id == dense ? 4 : 2);
      if (id == dense) spec.set_num_rows(8);
      spec.mutable_initializer()->set_kind(v1::InitializerSpec::ZEROS);
      spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
      spec.mutable_optimizer()->set_learning_rate(0.5f);
      v1::CreateTableResponse created;
      Context t(token);
      s = stub_->CreateTable(&t.ctx, req, &created);
      ASSERT_TRUE(s.ok()) << s.error_message();
    }
  }

  // The victim trains a little and takes checkpoint 1 (at <root>/victim-1).
  void TrainAndCheckpointVictim() {
    v1::PushRequest push;
    push.set_job_id(kVictim);
    push.set_worker_id(1);
    push.set_request_id(1);
    *push.add_blocks() = Block(kVictimDense, {0, 1, 2, 3, 4, 5, 6, 7}, std::vector<float>(32, 1));
    *push.add_blocks() = Block(kVictimSparse, {10, 11}, std::vector<float>(4, -1));
    v1::PushResponse pushed;
    Context p(kClusterToken);
    grpc::Status s = stub_->Push(&p.ctx, push, &pushed);
    ASSERT_TRUE(s.ok()) << s.error_message();
    v1::CheckpointRequest checkpoint;
    checkpoint.set_job_id(kVictim);
    checkpoint.set_checkpoint_id(1);
    checkpoint.set_path(VictimShardPath());
    checkpoint.set_shard_epoch(1);
    v1::CheckpointResponse resp;
    Context c(kClusterToken);
    s = stub_->Checkpoint(&c.ctx, checkpoint, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    v1::AwaitCheckpointRequest await;
    await.set_job_id(kVictim);
    await.set_checkpoint_id(1);
    Context a(kClusterToken);
    s = stub_->AwaitCheckpoint(&a.ctx, await, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_TRUE(resp.done());
  }

  std::string VictimShardPath() const { return (root_ / "victim-1").string(); }

  // An order to load the victim's checkpoint 1 (every slot, rollback to clock 0) at epoch 1.
  v1::RestoreOrder FromVictimsCheckpoint() const {
    v1::RestoreOrder order;
    order.set_shard_epoch(1);
    order.set_source_job_id(kVictim);
    order.set_checkpoint_id(1);
    order.set_rollback(true);
    order.set_slots(EncodeSlotBitmap(std::vector<bool>(kNumSlots, true)));
    order.set_reason("test");
    v1::CheckpointShard* shard = order.add_shards();
    shard->set_path(VictimShardPath());
    shard->set_slots(EncodeSlotBitmap(std::vector<bool>(kNumSlots, true)));
    return order;
  }

  grpc::Status Restore(const std::string& job, const v1::RestoreOrder& order,
                       const std::string& token, v1::RestoreResponse* resp) {
    v1::RestoreRequest req;
    req.set_job_id(job);
    *req.mutable_order() = order;
    Context c(token);
    return stub_->Restore(&c.ctx, req, resp);
  }

  // Every row of `tables` as stored: update count and values.
  RawRows Rows(std::initializer_list<uint32_t> tables) {
    RawRows rows;
    for (uint32_t table : tables) {
      server_->store()->ForEachRow(
          table, [&](uint64_t key, int64_t updates, absl::Span<const float> row) {
            rows[{table, key}] = {updates, std::string(reinterpret_cast<const char*>(row.data()),
                                                       row.size() * sizeof(float))};
          });
    }
    return rows;
  }

  fs::path root_;
};

bool Contains(const grpc::Status& s, const std::string& text) {
  return s.error_message().find(text) != std::string::npos;
}

// Issue 36: a program of one job, with only its job's credential, sent its servers a restore
// order naming another job's checkpoint and read that job's rows into its own tables. Such an
// order must carry the scheduler's signature for the program's job.
TEST_F(RestoreAuthTest, AJobsCredentialCarriesOutOnlyOrdersSignedForItsJob) {
  SetUpJob(kVictim, kClusterToken, kVictimDense, kVictimSparse);
  TrainAndCheckpointVictim();
  const std::string thief_token = JobToken(kClusterToken, kThief);
  SetUpJob(kThief, thief_token, kThiefDense, kThiefSparse);  // its own job: allowed
  const RawRows victim = Rows({kVictimDense, kVictimSparse});
  const RawRows thief = Rows({kThiefDense, kThiefSparse});
  ASSERT_FALSE(victim.empty());

  v1::RestoreResponse resp;
  // Unsigned.
  grpc::Status s = Restore(kThief, FromVictimsCheckpoint(), thief_token, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_TRUE(Contains(s, "restore order of job 'thief' (checkpoint 1 of job 'victim'"))
      << s.error_message();
  EXPECT_TRUE(Contains(s, "is not signed")) << s.error_message();
  EXPECT_TRUE(Contains(s, "nothing was restored")) << s.error_message();
  // Signed, but for the victim (an order the victim's workers got, replayed by the thief).
  Authorizer scheduler(kClusterToken, "");
  v1::RestoreOrder victims_order = FromVictimsCheckpoint();
  scheduler.SignRestoreOrder(kVictim, &victims_order);
  s = Restore(kThief, victims_order, thief_token, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_TRUE(Contains(s, "has a wrong signature")) << s.error_message();
  // Signed for the thief's job (a rollback to its initial values), then pointed elsewhere.
  v1::RestoreOrder own;
  own.set_shard_epoch(1);
  own.set_rollback(true);
  own.set_slots(EncodeSlotBitmap(std::vector<bool>(kNumSlots, true)));
  scheduler.SignRestoreOrder(kThief, &own);
  v1::RestoreOrder altered = FromVictimsCheckpoint();
  altered.set_signature(own.signature());
  s = Restore(kThief, altered, thief_token, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  // Signed under another cluster token.
  v1::RestoreOrder forged = FromVictimsCheckpoint();
  Authorizer(std::string("another-cluster-token"), "").SignRestoreOrder(kThief, &forged);
  s = Restore(kThief, forged, thief_token, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  // Nothing was read into the thief's tables; the victim's rows are as they were.
  EXPECT_EQ(Rows({kThiefDense, kThiefSparse}), thief);
  EXPECT_EQ(Rows({kVictimDense, kVictimSparse}), victim);
  // The victim's credential cannot send the order into the thief's job either.
  s = Restore(kThief, FromVictimsCheckpoint(), JobToken(kClusterToken, kVictim), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();

  // The server keeps serving, and the same order signed by the scheduler for the thief's job (a
  // job an admin started from the victim's checkpoint) is carried out: it was the signature
  // alone that refused the others.
  v1::RestoreOrder signed_order = FromVictimsCheckpoint();
  scheduler.SignRestoreOrder(kThief, &signed_order);
  s = Restore(kThief, signed_order, thief_token, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.rows(), 10u);  // 8 dense rows and 2 sparse ones
  EXPECT_NE(Rows({kThiefDense, kThiefSparse}), thief);
  EXPECT_EQ(Rows({kVictimDense, kVictimSparse}), victim);
}

// The cluster token (the worker daemons', psctl's) is trusted as before: its orders need no
// signature. A cluster without tokens is covered by the checkpoint tests
// (parameter_service_checkpoint_test.cc).
TEST_F(RestoreAuthTest, TheClusterTokenNeedsNoSignature) {
  SetUpJob(kVictim, kClusterToken, kVictimDense, kVictimSparse);
  TrainAndCheckpointVictim();
  SetUpJob(kThief, kClusterToken, kThiefDense, kThiefSparse);
  v1::RestoreResponse resp;
  grpc::Status s = Restore(kThief, FromVictimsCheckpoint(), kClusterToken, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.rows(), 10u);
}

}  // namespace
}  // namespace ps
