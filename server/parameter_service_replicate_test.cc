// ParameterServer.Replicate over gRPC: servers only (the cluster token), never a job's
// credential; a refused update changes no row.
#include <memory>
#include <string>
#include <vector>

#include "common/security.h"
#include "common/shard_map.h"
#include "common/testing/key_blocks.h"
#include "gtest/gtest.h"
#include "ps/v1/parameter_server.grpc.pb.h"
#include "server/parameter_server.h"
#include "server/replication_source.h"
#include "server/testing/service_fixture.h"

// A namespace of its own: the unity build compiles test files together.
namespace ps::parameter_service_replicate_test {
namespace {

constexpr char kClusterToken[] = "cluster-token-for-the-replicate-test";
constexpr char kJob[] = "job";
constexpr char kPrimary[] = "127.0.0.1:1";
constexpr uint32_t kTable = 1;

class ReplicateServiceTest : public testing::ServiceFixture {
 protected:
  void SetUp() override {
    ParameterServerOptions options;
    options.authorizer = std::make_shared<Authorizer>(kClusterToken, "");
    ASSERT_NO_FATAL_FAILURE(StartServer(options));
    v1::ConfigureJobRequest configure;
    configure.set_job_id(kJob);
    configure.add_worker_ids(1);
    configure.set_membership_epoch(1);
    configure.set_owned_slots(EncodeSlotBitmap(std::vector<bool>(kNumSlots, false)));
    configure.set_shard_epoch(1);
    v1::ConfigureJobResponse configured;
    Context c(kClusterToken);
    grpc::Status s = stub_->ConfigureJob(&c.ctx, configure, &configured);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_TRUE(Create(&primary_).ok());
    v1::CreateTableRequest create;
    *create.mutable_spec() = Spec();
    v1::CreateTableResponse created;
    Context t(kClusterToken);
    s = stub_->CreateTable(&t.ctx, create, &created);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  static v1::TableSpec Spec() {
    v1::TableSpec spec;
    spec.set_table_id(kTable);
    spec.set_name("sparse");
    spec.set_job_id(kJob);
    spec.set_kind(v1::SPARSE);
    spec.set_dim(2);
    spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAGRAD);
    return spec;
  }

  static absl::Status Create(TableStore* store) {
    if (absl::Status s = store->CreateTable(Spec()); !s.ok()) return s;
    return store->SetJobShards(kJob, std::vector<bool>(kNumSlots, true), 1);
  }

  // An update of the slot of key 5, after one push to it on the primary.
  v1::ReplicateRequest Update() {
    const v1::KeyBlock block = testing::Block(kTable, {5}, {1.0f, -1.0f});
    TableStore::BlockView view;
    EXPECT_TRUE(primary_.Resolve(kJob, block, /*with_values=*/true, &view).ok());
    EXPECT_TRUE(primary_.CheckNewRows({view}).ok());
    EXPECT_TRUE(primary_.Apply(view).ok());
    std::vector<bool> slots(kNumSlots, false);
    slots[SlotOf(kTable, 5)] = true;
    auto req = source_.Prepare(kJob, slots, 0);
    EXPECT_TRUE(req.ok()) << req.status();
    return *req;
  }

  struct Context : testing::CallContext {
    explicit Context(const std::string& token) {
      if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    }
  };

  grpc::Status Replicate(const v1::ReplicateRequest& req, const std::string& token,
                         v1::ReplicateResponse* resp) {
    Context c(token);
    return stub_->Replicate(&c.ctx, req, resp);
  }

  TableStore primary_{TableStoreOptions{}};
  ReplicationSource source_{&primary_, kPrimary};
};

TEST_F(ReplicateServiceTest, OnlyServersMayReplicate) {
  ReplicationBackup* backup = server_->service()->replication_backup();
  ASSERT_TRUE(backup->SetBackupSlots(kJob, 1, std::vector<std::string>(kNumSlots, kPrimary)).ok());
  const v1::ReplicateRequest req = Update();
  v1::ReplicateResponse resp;
  // A job's own credential may train the job, never write its rows directly.
  grpc::Status s = Replicate(req, JobToken(kClusterToken, kJob), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  s = Replicate(req, "", &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  EXPECT_EQ(backup->counts().applied, 0u);
  s = Replicate(req, kClusterToken, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.applied(), 1u);
  s = Replicate(req, kClusterToken, &resp);  // a retry
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.applied(), 0u);
  EXPECT_EQ(resp.duplicates(), 1u);
  // A malformed job id, or a job this server backs up nothing of: refused.
  v1::ReplicateRequest other = req;
  other.set_job_id("");
  s = Replicate(other, kClusterToken, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  other.set_job_id("other");
  s = Replicate(other, kClusterToken, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
}

TEST_F(ReplicateServiceTest, AServerThatBacksUpNothingRefuses) {
  v1::ReplicateResponse resp;
  grpc::Status s = Replicate(Update(), kClusterToken, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("backs up no slot"), std::string::npos) << s.error_message();
}

// A replica map says where a server sends the job's rows (with the cluster token): a program's
// job credential may not set one.
TEST_F(ReplicateServiceTest, AJobCredentialMayNotSetAReplicaMap) {
  v1::ConfigureJobRequest configure;
  configure.set_job_id(kJob);
  configure.add_worker_ids(1);
  configure.set_membership_epoch(1);
  v1::ReplicaMap& map = *configure.mutable_replicas();
  map.add_servers("127.0.0.1:1");
  map.add_servers("attacker.example:443");
  for (uint32_t s = 0; s < kNumSlots; ++s) map.add_slot_backups((s + 1) % 2);
  v1::ConfigureJobResponse resp;
  Context job(JobToken(kClusterToken, kJob));
  grpc::Status s = stub_->ConfigureJob(&job.ctx, configure, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  Context node(kClusterToken);
  s = stub_->ConfigureJob(&node.ctx, configure, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  map.set_server_index(2);  // malformed: refused, nothing changed
  Context again(kClusterToken);
  s = stub_->ConfigureJob(&again.ctx, configure, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
}

}  // namespace
}  // namespace ps::parameter_service_replicate_test
