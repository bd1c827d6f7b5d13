// Replicas end to end on two real servers in-process: a sync job whose slots each have a
// backup on the other server; after every clock, each backup holds its primary's rows bit for
// bit (values, optimizer state, update counts), forwarded before the clock completes.
#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/shard_map.h"
#include "common/testing/key_blocks.h"
#include "gtest/gtest.h"
#include "ps/v1/parameter_server.grpc.pb.h"
#include "server/parameter_server.h"
#include "server/replication_forwarder.h"
#include "server/table_store.h"
#include "server/testing/service_fixture.h"

// A namespace of its own: the unity build compiles test files together.
namespace ps::replication_forward_test {
namespace {

constexpr char kJob[] = "job";
constexpr uint32_t kTable = 1;
constexpr uint64_t kRows = 256;

using Rows = std::map<uint64_t, std::vector<float>>;  // key -> values, state, update count

class ReplicationForwardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      ParameterServerOptions options;
      options.listen = "127.0.0.1:0";
      auto server = ParameterServer::Start(options);
      ASSERT_TRUE(server.ok()) << server.status();
      servers_.push_back(std::move(*server));
      addresses_.push_back(absl::StrCat("127.0.0.1:", servers_.back()->port()));
      stubs_.push_back(v1::ParameterServer::NewStub(
          grpc::CreateChannel(addresses_.back(), grpc::InsecureChannelCredentials())));
    }
  }
  void TearDown() override {
    for (auto& server : servers_) server->Shutdown();
  }

  // The job on both servers: slot s on server s % 2, its backup on the other (with replicas).
  void ConfigureJob(bool replicas, uint64_t epoch = 1, bool create = true) {
    epoch_ = epoch;
    for (int i = 0; i < 2; ++i) {
      v1::ConfigureJobRequest req;
      req.set_job_id(kJob);
      req.mutable_consistency()->set_mode(v1::ConsistencySpec::SYNC);
      for (uint32_t w : workers_) req.add_worker_ids(w);
      req.set_membership_epoch(epoch);
      std::vector<bool> owned(kNumSlots);
      for (uint32_t s = 0; s < kNumSlots; ++s) owned[s] = static_cast<int>(s % 2) == i;
      req.set_owned_slots(EncodeSlotBitmap(owned));
      req.set_shard_epoch(epoch);
      if (replicas) {
        v1::ReplicaMap& map = *req.mutable_replicas();
        for (const std::string& a : addresses_) map.add_servers(a);
        for (uint32_t s = 0; s < kNumSlots; ++s) map.add_slot_backups((s + 1) % 2);
        map.set_server_index(i);
      }
      v1::ConfigureJobResponse resp;
      testing::CallContext c;
      grpc::Status st = stubs_[i]->ConfigureJob(&c.ctx, req, &resp);
      ASSERT_TRUE(st.ok()) << st.error_message();
      if (!create) continue;
      v1::CreateTableRequest create_req;
      v1::TableSpec& spec = *create_req.mutable_spec();
      spec.set_table_id(kTable);
      spec.set_name("dense");
      spec.set_job_id(kJob);
      spec.set_kind(v1::DENSE);
      spec.set_dim(4);
      spec.set_num_rows(kRows);
      spec.mutable_initializer()->set_kind(v1::InitializerSpec::UNIFORM);
      spec.mutable_initializer()->set_low(-1.0f);
      spec.mutable_initializer()->set_high(1.0f);
      spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
      v1::CreateTableResponse created;
      testing::CallContext t;
      st = stubs_[i]->CreateTable(&t.ctx, create_req, &created);
      ASSERT_TRUE(st.ok()) << st.error_message();
    }
  }

  // Worker 0's step at `clock`: a gradient for every row, pushed to the row's server, then the
  // clock advanced on both (which applies the clock's sum).
  void Step(int64_t clock) {
    for (int i = 0; i < 2; ++i) {
      std::vector<uint64_t> keys;
      std::vector<float> grads;
      for (uint64_t k = 0; k < kRows; ++k) {
        if (static_cast<int>(SlotOf(kTable, k) % 2) != i) continue;
        keys.push_back(k);
        for (int d = 0; d < 4; ++d) grads.push_back(0.01f * (k % 7) - 0.02f * d + 0.1f * clock);
      }
      v1::PushRequest push;
      push.set_job_id(kJob);
      push.set_worker_id(0);
      push.set_request_id(clock * 2 + i + 1);
      push.set_clock(clock);
      push.set_shard_epoch(epoch_);
      *push.add_blocks() = testing::Block(kTable, keys, grads);
      v1::PushResponse pushed;
      testing::CallContext c;
      grpc::Status st = stubs_[i]->Push(&c.ctx, push, &pushed);
      ASSERT_TRUE(st.ok()) << st.error_message();
    }
    for (int i = 0; i < 2; ++i) {
      v1::ClockRequest req;
      req.set_job_id(kJob);
      req.set_worker_id(0);
      req.set_clock(clock + 1);
      v1::ClockResponse resp;
      testing::CallContext c;
      grpc::Status st = stubs_[i]->Clock(&c.ctx, req, &resp);
      ASSERT_TRUE(st.ok()) << st.error_message();
    }
  }

  // Rows of server i whose slots are (owner) or are not (!owner) its own.
  Rows RowsOf(int i, bool owner) {
    Rows rows;
    servers_[i]->store()->ForEachRow(
        kTable, [&](uint64_t key, int64_t updates, absl::Span<const float> row) {
          if ((static_cast<int>(SlotOf(kTable, key) % 2) == i) != owner) return;
          std::vector<float> v(row.begin(), row.end());
          v.push_back(static_cast<float>(updates));
          rows[key] = std::move(v);
        });
    return rows;
  }

  uint64_t epoch_ = 1;
  std::vector<uint32_t> workers_ = {0};
  std::vector<std::unique_ptr<ParameterServer>> servers_;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<v1::ParameterServer::Stub>> stubs_;
};

TEST_F(ReplicationForwardTest, EveryCompletedClockIsOnTheBackup) {
  ASSERT_NO_FATAL_FAILURE(ConfigureJob(/*replicas=*/true));
  for (int64_t clock = 0; clock < 3; ++clock) {
    ASSERT_NO_FATAL_FAILURE(Step(clock));
    for (int i = 0; i < 2; ++i) {
      const Rows primary = RowsOf(i, /*owner=*/true);
      const Rows backup = RowsOf(1 - i, /*owner=*/false);
      ASSERT_FALSE(primary.empty());
      EXPECT_EQ(backup, primary) << "server " << i << " at clock " << clock;
    }
  }
  for (int i = 0; i < 2; ++i) {
    const ReplicationBackup::Counts counts = servers_[i]->service()->replication_backup()->counts();
    EXPECT_GT(counts.applied, 0u);
    EXPECT_EQ(counts.duplicates, 0u);
    EXPECT_EQ(counts.gaps, 0u);
    EXPECT_EQ(servers_[i]->service()->replication_forwarder()->counts().failures, 0u);
  }
}

TEST_F(ReplicationForwardTest, AJobWithoutReplicasForwardsNothing) {
  ASSERT_NO_FATAL_FAILURE(ConfigureJob(/*replicas=*/false));
  ASSERT_NO_FATAL_FAILURE(Step(0));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(servers_[i]->service()->replication_forwarder()->counts().slots, 0u);
    EXPECT_EQ(servers_[i]->service()->replication_backup()->counts().applied, 0u);
  }
}

// A shard map without a replica map (one server left, or replicas off) ends both roles: the
// server forwards nothing more (and serves pushes inline again), and the rows it held as a
// backup are dropped.
TEST_F(ReplicationForwardTest, AMapWithoutReplicasEndsForwardingAndDropsBackupRows) {
  ASSERT_NO_FATAL_FAILURE(ConfigureJob(/*replicas=*/true));
  ASSERT_NO_FATAL_FAILURE(Step(0));
  for (int i = 0; i < 2; ++i) {
    ReplicationForwarder* forwarder = servers_[i]->service()->replication_forwarder();
    EXPECT_TRUE(forwarder->HasTargets(kJob));
    EXPECT_TRUE(forwarder->Active());
    ASSERT_FALSE(RowsOf(i, /*owner=*/false).empty());
  }
  ASSERT_NO_FATAL_FAILURE(ConfigureJob(/*replicas=*/false, /*epoch=*/2, /*create=*/false));
  std::vector<uint64_t> forwarded;
  for (int i = 0; i < 2; ++i) {
    ReplicationForwarder* forwarder = servers_[i]->service()->replication_forwarder();
    EXPECT_FALSE(forwarder->HasTargets(kJob));
    EXPECT_FALSE(forwarder->Active());
    EXPECT_TRUE(RowsOf(i, /*owner=*/false).empty()) << "server " << i;
    EXPECT_FALSE(RowsOf(i, /*owner=*/true).empty()) << "server " << i;
    forwarded.push_back(forwarder->counts().slots);
  }
  ASSERT_NO_FATAL_FAILURE(Step(1));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(servers_[i]->service()->replication_forwarder()->counts().slots, forwarded[i]);
    EXPECT_TRUE(RowsOf(i, /*owner=*/false).empty()) << "server " << i;
  }
}

// A clock that a ConfigureJob completes (a worker left) goes to the backups of the map it
// brings: the replica roles are set before the membership changes.
TEST_F(ReplicationForwardTest, AClockCompletedByConfigureGoesToTheNewBackups) {
  workers_ = {0, 1};
  ASSERT_NO_FATAL_FAILURE(ConfigureJob(/*replicas=*/false));
  ASSERT_NO_FATAL_FAILURE(Step(0));  // worker 0 only: clock 0 waits for worker 1
  const Rows before = RowsOf(0, /*owner=*/true);
  workers_ = {0};  // worker 1 left: clock 0 completes inside ConfigureJob
  ASSERT_NO_FATAL_FAILURE(ConfigureJob(/*replicas=*/true, /*epoch=*/2, /*create=*/false));
  // Server 1, configured second, forwarded clock 0 to server 0, which had the new map. (Server
  // 0 forwarded it to server 1 before server 1 had the map: refused, that backup left out until
  // the next map, as documented.)
  const Rows primary = RowsOf(1, /*owner=*/true);
  ASSERT_FALSE(primary.empty());
  EXPECT_EQ(RowsOf(0, /*owner=*/false), primary);
  EXPECT_EQ(servers_[1]->service()->replication_forwarder()->counts().failures, 0u);
  EXPECT_NE(RowsOf(0, /*owner=*/true), before);  // clock 0 was applied
}

// A table with a cap on its rows (or a disk tier) is refused for a job with replicas, naming
// the table: at CreateTable, and at a ConfigureJob that brings replicas to a job that has one.
TEST_F(ReplicationForwardTest, CappedTablesAreRefusedWithReplicas) {
  v1::CreateTableRequest create;
  v1::TableSpec& spec = *create.mutable_spec();
  spec.set_table_id(7);
  spec.set_name("capped");
  spec.set_job_id(kJob);
  spec.set_kind(v1::SPARSE);
  spec.set_dim(4);
  spec.mutable_initializer()->set_kind(v1::InitializerSpec::UNIFORM);
  spec.mutable_initializer()->set_low(-1.0f);
  spec.mutable_initializer()->set_high(1.0f);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_eviction()->set_max_rows(100);
  ASSERT_NO_FATAL_FAILURE(ConfigureJob(/*replicas=*/true));
  v1::CreateTableResponse created;
  testing::CallContext c;
  grpc::Status st = stubs_[0]->CreateTable(&c.ctx, create, &created);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("capped"), std::string::npos) << st.error_message();
  EXPECT_EQ(servers_[0]->store()->NumRows(7), 0u);

  // Another job: the capped table first, then a map with replicas.
  spec.set_job_id("other");
  testing::CallContext c2;
  st = stubs_[0]->CreateTable(&c2.ctx, create, &created);
  ASSERT_TRUE(st.ok()) << st.error_message();
  v1::ConfigureJobRequest req;
  req.set_job_id("other");
  req.mutable_consistency()->set_mode(v1::ConsistencySpec::SYNC);
  req.add_worker_ids(0);
  req.set_membership_epoch(1);
  std::vector<bool> owned(kNumSlots);
  for (uint32_t s = 0; s < kNumSlots; ++s) owned[s] = s % 2 == 0;
  req.set_owned_slots(EncodeSlotBitmap(owned));
  req.set_shard_epoch(1);
  v1::ReplicaMap& map = *req.mutable_replicas();
  for (const std::string& a : addresses_) map.add_servers(a);
  for (uint32_t s = 0; s < kNumSlots; ++s) map.add_slot_backups((s + 1) % 2);
  map.set_server_index(0);
  v1::ConfigureJobResponse resp;
  testing::CallContext c3;
  st = stubs_[0]->ConfigureJob(&c3.ctx, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("capped"), std::string::npos) << st.error_message();
  EXPECT_FALSE(servers_[0]->service()->replication_forwarder()->HasTargets("other"));
}

// A backup that answers only once the other backup has its update too: forwarding that sent to
// one backup after the other would wait out its bound at the first and leave it out.
class BarrierBackup : public v1::ParameterServer::Service {
 public:
  explicit BarrierBackup(int* arrived, absl::Mutex* mu) : arrived_(arrived), mu_(mu) {}
  grpc::Status Replicate(grpc::ServerContext* ctx, const v1::ReplicateRequest* req,
                         v1::ReplicateResponse* resp) override {
    absl::MutexLock l(mu_);
    ++*arrived_;
    const auto both = [this] { return *arrived_ >= 2; };
    if (!mu_->AwaitWithDeadline(absl::Condition(&both), absl::FromChrono(ctx->deadline()))) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the other backup never asked");
    }
    resp->set_applied(req->slots_size());
    return grpc::Status::OK;
  }

 private:
  int* const arrived_;
  absl::Mutex* const mu_;
};

// Failover: server 1 "dies" with clock 2 pushed to it but not applied; server 0, its slots'
// backup, takes them over under shard epoch 2 and catches clock 2 up from the worker's re-sent
// push: its rows of those slots end bit for bit as server 1's own would have been (values,
// optimizer state, update counts), and a second re-send changes nothing.
TEST_F(ReplicationForwardTest, APromotedBackupCatchesUpTheClockInFlightOnce) {
  ASSERT_NO_FATAL_FAILURE(ConfigureJob(/*replicas=*/true));
  ASSERT_NO_FATAL_FAILURE(Step(0));
  ASSERT_NO_FATAL_FAILURE(Step(1));
  // Clock 2: worker 0's push reaches both servers, its clock only server 0 (which applies
  // clock 2 for its own slots); server 1 holds clock 2's sums unapplied.
  auto push_of = [](int server, int64_t clock, uint64_t request_id) {
    std::vector<uint64_t> keys;
    std::vector<float> grads;
    for (uint64_t k = 0; k < kRows; ++k) {
      if (static_cast<int>(SlotOf(kTable, k) % 2) != server) continue;
      keys.push_back(k);
      for (int d = 0; d < 4; ++d) grads.push_back(0.01f * (k % 7) - 0.02f * d + 0.1f * clock);
    }
    v1::PushRequest push;
    push.set_job_id(kJob);
    push.set_worker_id(0);
    push.set_request_id(request_id);
    push.set_clock(clock);
    *push.add_blocks() = testing::Block(kTable, keys, grads);
    return push;
  };
  auto call_push = [&](int server, v1::PushRequest push, uint64_t epoch) {
    push.set_shard_epoch(epoch);
    v1::PushResponse resp;
    testing::CallContext c;
    grpc::Status st = stubs_[server]->Push(&c.ctx, push, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.duplicate();
  };
  auto advance = [&](int server, int64_t clock) {
    v1::ClockRequest req;
    req.set_job_id(kJob);
    req.set_worker_id(0);
    req.set_clock(clock);
    v1::ClockResponse resp;
    testing::CallContext c;
    grpc::Status st = stubs_[server]->Clock(&c.ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  };
  for (int i = 0; i < 2; ++i) EXPECT_FALSE(call_push(i, push_of(i, 2, 100 + i), 1));
  ASSERT_NO_FATAL_FAILURE(advance(0, 3));

  // The failover: server 0 owns every slot under epoch 2, without replicas.
  v1::ConfigureJobRequest req;
  req.set_job_id(kJob);
  req.mutable_consistency()->set_mode(v1::ConsistencySpec::SYNC);
  req.add_worker_ids(0);
  req.set_membership_epoch(1);
  req.set_owned_slots(EncodeSlotBitmap(std::vector<bool>(kNumSlots, true)));
  req.set_shard_epoch(2);
  req.set_caller_worker_id(0);
  req.set_caller_clock(3);
  v1::ConfigureJobResponse configured;
  testing::CallContext c;
  grpc::Status st = stubs_[0]->ConfigureJob(&c.ctx, req, &configured);
  ASSERT_TRUE(st.ok()) << st.error_message();
  // A pull past clock 2 waits for the re-send (here: until its deadline).
  v1::PullRequest pull;
  pull.set_job_id(kJob);
  pull.set_worker_id(0);
  pull.set_clock(3);
  pull.set_shard_epoch(2);
  *pull.add_blocks() = testing::Block(kTable, {1});
  v1::PullResponse pulled;
  grpc::ClientContext short_pull;
  short_pull.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(300)));
  EXPECT_EQ(stubs_[0]->Pull(&short_pull, pull, &pulled).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);

  v1::PushRequest resend = push_of(1, 2, 200);
  resend.set_resend_parts(1);
  EXPECT_FALSE(call_push(0, resend, 2));
  testing::CallContext p;
  st = stubs_[0]->Pull(&p.ctx, pull, &pulled);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const Rows caught_up = RowsOf(0, /*owner=*/false);
  resend.set_request_id(201);  // the worker re-sends again: nothing is owed any more
  EXPECT_TRUE(call_push(0, resend, 2));
  EXPECT_EQ(RowsOf(0, /*owner=*/false), caught_up);

  // What server 1 would have held: it applies clock 2 now (its forward to server 0 is refused:
  // another epoch there).
  ASSERT_NO_FATAL_FAILURE(advance(1, 3));
  const Rows reference = RowsOf(1, /*owner=*/true);
  ASSERT_FALSE(reference.empty());
  EXPECT_EQ(caught_up, reference);
}

TEST(ReplicationForwarderTest, BackupsAreSentToAtOnce) {
  absl::Mutex mu;
  int arrived = 0;
  BarrierBackup a(&arrived, &mu), b(&arrived, &mu);
  std::vector<std::unique_ptr<grpc::Server>> servers;
  std::vector<std::string> addresses;
  for (BarrierBackup* service : {&a, &b}) {
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service);
    servers.push_back(builder.BuildAndStart());
    ASSERT_NE(servers.back(), nullptr);
    addresses.push_back(absl::StrCat("127.0.0.1:", port));
  }
  TableStore store{TableStoreOptions{}};
  v1::TableSpec spec;
  spec.set_table_id(kTable);
  spec.set_name("dense");
  spec.set_job_id(kJob);
  spec.set_kind(v1::DENSE);
  spec.set_dim(4);
  spec.set_num_rows(kRows);
  spec.mutable_initializer()->set_kind(v1::InitializerSpec::UNIFORM);
  spec.mutable_initializer()->set_low(-1.0f);
  spec.mutable_initializer()->set_high(1.0f);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  ASSERT_TRUE(store.CreateTable(spec).ok());
  ASSERT_TRUE(store.SetJobShards(kJob, std::vector<bool>(kNumSlots, true), 1).ok());
  // A generous bound: sent at once, both answer well within it; one after the other, the first
  // waits all of it.
  ReplicationForwarder forwarder(&store, absl::Seconds(20));
  std::vector<std::string> backups(kNumSlots);
  for (uint32_t s = 0; s < kNumSlots; ++s) backups[s] = addresses[s % 2];
  ASSERT_TRUE(forwarder.SetTargets(kJob, 1, "127.0.0.1:1", backups).ok());
  forwarder.ForwardClock(kJob, 0);
  EXPECT_EQ(forwarder.counts().failures, 0u);
  EXPECT_EQ(forwarder.counts().slots, kNumSlots);
  for (auto& server : servers) server->Shutdown();
}

}  // namespace
}  // namespace ps::replication_forward_test
