// Checkpoint, AwaitCheckpoint and Restore end to end: a real server in-process on a free port,
// called through a real stub, writing real RocksDB checkpoints under a temporary directory.
#include <grpcpp/grpcpp.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/node_identity.h"
#include "common/shard_map.h"
#include "common/testing/key_blocks.h"
#include "gtest/gtest.h"
#include "ps/v1/parameter_server.grpc.pb.h"
#include "server/checkpoint_io.h"
#include "server/parameter_server.h"
#include "server/testing/service_fixture.h"

namespace ps::parameter_service_checkpoint_test {
namespace {

namespace fs = std::filesystem;
using testing::Block;
using testing::CallContext;
using testing::Floats;
using v1::KeyBlock;

constexpr uint32_t kDense = 1;   // dim 4, 8 rows, adam
constexpr uint32_t kSparse = 2;  // dim 2, adagrad
constexpr char kJob[] = "job";

v1::TableSpec Spec(uint32_t id, v1::TableKind kind, const std::string& job) {
  v1::TableSpec spec;
  spec.set_table_id(id);
  spec.set_name(kind == v1::DENSE ? "dense" : "sparse");
  spec.set_job_id(job);
  spec.set_kind(kind);
  spec.set_dim(kind == v1::DENSE ? 4 : 2);
  if (kind == v1::DENSE) spec.set_num_rows(8);
  spec.mutable_initializer()->set_kind(v1::InitializerSpec::UNIFORM);
  spec.mutable_initializer()->set_low(-1.0f);
  spec.mutable_initializer()->set_high(1.0f);
  spec.mutable_optimizer()->set_kind(kind == v1::DENSE ? v1::OptimizerSpec::ADAM
                                                       : v1::OptimizerSpec::ADAGRAD);
  spec.mutable_optimizer()->set_learning_rate(0.5f);
  return spec;
}

using RawRows = std::map<std::pair<uint32_t, uint64_t>, std::pair<int64_t, std::string>>;

class CheckpointServiceTest : public testing::ServiceFixture {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            absl::StrCat("checkpoint_service_test_", getpid(), "_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    StartWithWriteDelay(absl::ZeroDuration());
  }
  void TearDown() override {
    ServiceFixture::TearDown();
    fs::remove_all(root_);
  }

  // Starts server_ (checkpoints under root_) with checkpoint writes delayed by `write_delay`.
  void StartWithWriteDelay(absl::Duration write_delay) {
    ParameterServerOptions options;
    options.max_pull_wait = absl::Seconds(10);
    options.checkpoint_write_delay = write_delay;
    options.checkpoint_roots = {root_.string()};
    ASSERT_NO_FATAL_FAILURE(StartServer(options));
  }

  // Configures the job with workers 1 and 2; with a shard epoch, as owner of every slot.
  grpc::Status Configure(const std::string& job, v1::ConsistencySpec::Mode mode,
                         uint64_t shard_epoch = 0, int64_t caller_clock = -1,
                         v1::ConfigureJobResponse* resp = nullptr) {
    v1::ConfigureJobRequest req;
    req.set_job_id(job);
    req.mutable_consistency()->set_mode(mode);
    req.add_worker_ids(1);
    req.add_worker_ids(2);
    req.set_membership_epoch(1);
    if (shard_epoch != 0) {
      req.set_owned_slots(EncodeSlotBitmap(std::vector<bool>(kNumSlots, true)));
      req.set_shard_epoch(shard_epoch);
    }
    req.set_caller_worker_id(2);
    req.set_caller_clock(caller_clock);
    v1::ConfigureJobResponse ignored;
    CallContext c;
    return stub_->ConfigureJob(&c.ctx, req, resp == nullptr ? &ignored : resp);
  }
  void CreateTables(const std::string& job) {
    for (uint32_t id : {kDense, kSparse}) {
      v1::CreateTableRequest req;
      *req.mutable_spec() = Spec(id, id == kDense ? v1::DENSE : v1::SPARSE, job);
      v1::CreateTableResponse resp;
      CallContext c;
      ASSERT_TRUE(stub_->CreateTable(&c.ctx, req, &resp).ok());
    }
  }
  // Pushes a gradient (depending on `seed`) to dense rows 0..7 and sparse keys 10..14.
  grpc::Status Push(const std::string& job, uint32_t worker, int64_t clock, float seed,
                    uint64_t shard_epoch = 0) {
    std::vector<float> dense(8 * 4), sparse(5 * 2);
    for (size_t i = 0; i < dense.size(); ++i) dense[i] = seed * (0.1f + 0.01f * i);
    for (size_t i = 0; i < sparse.size(); ++i) sparse[i] = seed * (0.3f - 0.02f * i);
    v1::PushRequest req;
    req.set_job_id(job);
    req.set_worker_id(worker);
    req.set_request_id(++request_id_);
    req.set_clock(clock);
    req.set_shard_epoch(shard_epoch);
    *req.add_blocks() = Block(kDense, {0, 1, 2, 3, 4, 5, 6, 7}, dense);
    *req.add_blocks() = Block(kSparse, {10, 11, 12, 13, 14}, sparse);
    v1::PushResponse resp;
    CallContext c;
    return stub_->Push(&c.ctx, req, &resp);
  }
  // One sync step of both workers at `clock`.
  void Step(const std::string& job, int64_t clock, float seed) {
    ASSERT_TRUE(Push(job, 1, clock, seed).ok());
    ASSERT_TRUE(Push(job, 2, clock, -0.5f * seed).ok());
    ASSERT_TRUE(Clock(job, 1, clock + 1).ok());
    ASSERT_TRUE(Clock(job, 2, clock + 1).ok());
  }
  grpc::Status Pull(const std::string& job, int64_t clock, uint64_t shard_epoch,
                    std::vector<float>* values = nullptr) {
    v1::PullRequest req;
    req.set_job_id(job);
    req.set_worker_id(1);
    req.set_clock(clock);
    req.set_shard_epoch(shard_epoch);
    *req.add_blocks() = Block(kDense, {0, 1, 2, 3, 4, 5, 6, 7});
    v1::PullResponse resp;
    CallContext c;
    grpc::Status s = stub_->Pull(&c.ctx, req, &resp);
    if (s.ok() && values != nullptr) *values = Floats(resp.blocks(0).values());
    return s;
  }
  std::vector<float> Values(const std::string& job, int64_t clock = 0) {
    std::vector<float> v;
    const grpc::Status s = Pull(job, clock, 0, &v);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return v;
  }
  // Every row of the job's tables as stored: update count, values and optimizer state.
  RawRows Raw() {
    RawRows rows;
    for (uint32_t table : {kDense, kSparse}) {
      server_->store()->ForEachRow(
          table, [&](uint64_t key, int64_t updates, absl::Span<const float> row) {
            rows[{table, key}] = {updates, std::string(reinterpret_cast<const char*>(row.data()),
                                                       row.size() * sizeof(float))};
          });
    }
    return rows;
  }

  std::string PathOf(uint64_t id) { return (root_ / absl::StrCat("ckpt-", id) / "s0").string(); }
  grpc::Status Checkpoint(const std::string& job, uint64_t id, int64_t clock,
                          v1::CheckpointResponse* resp, uint64_t shard_epoch = 1,
                          const std::string& path = "") {
    v1::CheckpointRequest req;
    req.set_job_id(job);
    req.set_checkpoint_id(id);
    req.set_clock(clock);
    req.set_path(path.empty() ? PathOf(id) : path);
    req.set_shard_epoch(shard_epoch);
    CallContext c;
    return stub_->Checkpoint(&c.ctx, req, resp);
  }
  grpc::Status Await(const std::string& job, uint64_t id, v1::CheckpointResponse* resp,
                     absl::Duration deadline = testing::kCallDeadline) {
    v1::AwaitCheckpointRequest req;
    req.set_job_id(job);
    req.set_checkpoint_id(id);
    CallContext c(deadline);
    return stub_->AwaitCheckpoint(&c.ctx, req, resp);
  }
  // Checkpoint `id` taken and written.
  void TakeCheckpoint(const std::string& job, uint64_t id, int64_t clock) {
    v1::CheckpointResponse resp;
    grpc::Status s = Checkpoint(job, id, clock, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    s = Await(job, id, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_TRUE(resp.done());
  }
  v1::RestoreOrder Order(uint64_t shard_epoch, uint64_t checkpoint_id, int64_t clock,
                         bool rollback) {
    v1::RestoreOrder order;
    order.set_shard_epoch(shard_epoch);
    order.set_checkpoint_id(checkpoint_id);
    order.set_clock(clock);
    order.set_rollback(rollback);
    order.set_slots(EncodeSlotBitmap(std::vector<bool>(kNumSlots, true)));
    order.set_reason("test");
    if (checkpoint_id != 0) {
      v1::CheckpointShard* shard = order.add_shards();
      shard->set_path(PathOf(checkpoint_id));
      shard->set_slots(EncodeSlotBitmap(std::vector<bool>(kNumSlots, true)));
    }
    return order;
  }
  grpc::Status Restore(const std::string& job, const v1::RestoreOrder& order,
                       v1::RestoreResponse* resp) {
    v1::RestoreRequest req;
    req.set_job_id(job);
    *req.mutable_order() = order;
    CallContext c;
    return stub_->Restore(&c.ctx, req, resp);
  }

  fs::path root_;
  uint64_t request_id_ = 0;
};

bool Contains(const grpc::Status& s, const std::string& text) {
  return s.error_message().find(text) != std::string::npos;
}

TEST_F(CheckpointServiceTest, CheckpointIsWrittenInTheBackgroundAndRetriesGetTheSameAnswer) {
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC).ok());
  CreateTables(kJob);
  ASSERT_TRUE(Push(kJob, 1, 0, 1.0f).ok());
  const RawRows at_checkpoint = Raw();

  v1::CheckpointResponse first, retry, awaited;
  grpc::Status s = Checkpoint(kJob, 1, 0, &first);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(first.done());
  EXPECT_EQ(first.rows(), 8u + 5u);
  EXPECT_EQ(first.bytes(), (8u * 4 * 3 + 5u * 2 * 2) * sizeof(float));
  EXPECT_EQ(first.slots(), EncodeSlotBitmap(std::vector<bool>(kNumSlots, true)));
  EXPECT_GE(first.snapshot_seconds(), 0.0);
  ASSERT_TRUE(Push(kJob, 1, 0, 2.0f).ok());  // training goes on; the copy is taken
  s = Checkpoint(kJob, 1, 0, &retry);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(retry.rows(), first.rows());
  EXPECT_EQ(retry.snapshot_seconds(), first.snapshot_seconds());
  s = Await(kJob, 1, &awaited);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(awaited.done());
  EXPECT_EQ(awaited.rows(), first.rows());
  EXPECT_EQ(awaited.bytes(), first.bytes());
  EXPECT_GT(awaited.write_seconds(), 0.0);
  EXPECT_TRUE(awaited.receipt().empty());  // no node secret: registered with no scheduler
  // Registered: the answer carries the server's receipt for exactly these figures.
  server_->service()->SetNodeSecret("secret-of-this-server");
  s = Await(kJob, 1, &awaited);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(awaited.receipt(),
            CheckpointReceipt("secret-of-this-server", kJob, 1, first.rows(), first.bytes()));
  EXPECT_NE(awaited.receipt(),
            CheckpointReceipt("secret-of-this-server", kJob, 1, first.rows() + 1, first.bytes()));

  // What was written is the copy taken at Checkpoint time, bit for bit.
  auto meta = ReadCheckpointMeta(PathOf(1));
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(meta->checkpoint_id(), 1u);
  EXPECT_EQ(meta->job_id(), kJob);
  EXPECT_EQ(meta->rows(), first.rows());
  v1::CheckpointShard shard;
  shard.set_path(PathOf(1));
  shard.set_slots(first.slots());
  auto read = ReadCheckpointSlots({shard}, std::vector<bool>(kNumSlots, true),
                                  {Spec(kDense, v1::DENSE, kJob), Spec(kSparse, v1::SPARSE, kJob)});
  ASSERT_TRUE(read.ok()) << read.status();
  RawRows written;
  for (const SlotRows& r : read->rows) {
    for (size_t i = 0; i < r.size(); ++i) {
      written[{r.table_id, r.keys[i]}] = {
          r.updates[i],
          std::string(reinterpret_cast<const char*>(r.row(i)), r.row_floats * sizeof(float))};
    }
  }
  EXPECT_EQ(written, at_checkpoint);

  v1::CheckpointResponse other;
  s = Checkpoint(kJob, 1, 0, &other, 1, (root_ / "elsewhere").string());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  s = Await(kJob, 99, &other);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
}

TEST_F(CheckpointServiceTest, BadCheckpointRequestsAreRefusedAndTheServerKeepsServing) {
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC).ok());
  CreateTables(kJob);
  fs::create_directories(PathOf(5));
  struct Case {
    std::string name;
    std::string job;
    uint64_t id;
    uint64_t epoch;
    std::string path;
    grpc::StatusCode code;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"unknown job", "nojob", 1, 1, "", grpc::StatusCode::FAILED_PRECONDITION,
       "job 'nojob' is not configured"},
      {"wrong shard epoch", kJob, 2, 7, "", grpc::StatusCode::FAILED_PRECONDITION,
       "requested at shard map epoch 7; this server is at 1"},
      {"empty path", kJob, 3, 1, "-", grpc::StatusCode::INVALID_ARGUMENT, "path is empty"},
      {"no checkpoint id", kJob, 0, 1, "", grpc::StatusCode::INVALID_ARGUMENT, "checkpoint_id"},
      {"existing path", kJob, 5, 1, "", grpc::StatusCode::ALREADY_EXISTS, "already exists"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    v1::CheckpointRequest req;
    req.set_job_id(c.job);
    req.set_checkpoint_id(c.id);
    req.set_shard_epoch(c.epoch);
    req.set_path(c.path == "-" ? "" : PathOf(c.id));
    v1::CheckpointResponse resp;
    CallContext ctx;
    const grpc::Status s = stub_->Checkpoint(&ctx.ctx, req, &resp);
    EXPECT_EQ(s.error_code(), c.code) << s.error_message();
    EXPECT_TRUE(Contains(s, c.want)) << s.error_message();
    EXPECT_EQ(Values(kJob).size(), 32u);  // still serving
  }
  // A refused checkpoint is unknown; a later valid one with its id works.
  v1::CheckpointResponse resp;
  EXPECT_EQ(Await(kJob, 2, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  TakeCheckpoint(kJob, 2, 0);
}

TEST_F(CheckpointServiceTest, SyncRollbackRestoresRowsAndClocksAndDropsPendingGradients) {
  const std::string job = "sync";
  ASSERT_TRUE(Configure(job, v1::ConsistencySpec::SYNC).ok());
  CreateTables(job);
  Step(job, 0, 1.0f);
  const std::vector<float> at_1 = Values(job, 1);
  const RawRows raw_1 = Raw();
  TakeCheckpoint(job, 1, 1);
  Step(job, 1, 2.0f);
  const std::vector<float> at_2 = Values(job, 2);
  const RawRows raw_2 = Raw();
  ASSERT_NE(at_2, at_1);
  ASSERT_TRUE(Push(job, 1, 2, 5.0f).ok());  // accumulated for clock 2, never applied

  ASSERT_TRUE(Configure(job, v1::ConsistencySpec::SYNC, /*shard_epoch=*/2).ok());
  v1::RestoreResponse restored;
  grpc::Status s = Restore(job, Order(2, 1, 1, /*rollback=*/true), &restored);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(restored.rows(), 8u + 5u);
  EXPECT_EQ(restored.bytes(), (8u * 4 * 3 + 5u * 2 * 2) * sizeof(float));
  EXPECT_EQ(restored.worker_clocks().at(1), 1);
  EXPECT_EQ(restored.worker_clocks().at(2), 1);
  EXPECT_EQ(Raw(), raw_1);  // values, optimizer state and update counts
  EXPECT_EQ(Values(job, 1), at_1);

  // Replaying step 1 gives the same rows again, bit for bit; the dropped clock-2 push is gone.
  Step(job, 1, 2.0f);
  EXPECT_EQ(Raw(), raw_2);
  ASSERT_TRUE(Clock(job, 1, 3).ok());
  ASSERT_TRUE(Clock(job, 2, 3).ok());
  EXPECT_EQ(Values(job, 3), at_2);
}

TEST_F(CheckpointServiceTest, RestoreIsCarriedOutOncePerShardEpoch) {
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC).ok());
  CreateTables(kJob);
  ASSERT_TRUE(Push(kJob, 1, 0, 1.0f).ok());
  const RawRows raw_1 = Raw();
  TakeCheckpoint(kJob, 1, 0);
  ASSERT_TRUE(Push(kJob, 1, 0, 3.0f).ok());

  // An order for an epoch this server is not at is refused, and not remembered.
  v1::RestoreResponse resp;
  grpc::Status s = Restore(kJob, Order(2, 1, 0, false), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_TRUE(Contains(s, "this server is at 1")) << s.error_message();

  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC, 2).ok());
  // Concurrent callers (every worker hands the order to every server) share one restore.
  constexpr int kCallers = 4;
  std::vector<v1::RestoreResponse> answers(kCallers);
  std::vector<grpc::Status> statuses(kCallers);
  std::vector<std::thread> callers;
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back(
        [&, i] { statuses[i] = Restore(kJob, Order(2, 1, 0, false), &answers[i]); });
  }
  for (std::thread& t : callers) t.join();
  for (int i = 0; i < kCallers; ++i) {
    ASSERT_TRUE(statuses[i].ok()) << statuses[i].error_message();
    EXPECT_EQ(answers[i].seconds(), answers[0].seconds());  // the one answer, not a rerun
  }
  const v1::RestoreResponse& first = answers[0];
  EXPECT_EQ(first.rows(), 13u);
  EXPECT_EQ(Raw(), raw_1);
  ASSERT_TRUE(Push(kJob, 1, 0, 4.0f).ok());
  const RawRows trained = Raw();
  // The same order again (its reason aside) gets the first answer and changes nothing.
  v1::RestoreResponse again;
  v1::RestoreOrder same = Order(2, 1, 0, false);
  same.set_reason("handed on by another worker");
  s = Restore(kJob, same, &again);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(again.rows(), first.rows());
  EXPECT_EQ(again.seconds(), first.seconds());
  EXPECT_EQ(Raw(), trained);
  // Another order for the same epoch would be answered OK without being carried out: refused.
  for (const v1::RestoreOrder& other :
       {Order(2, 0, 0, false), Order(2, 1, 0, true), Order(2, 1, 7, false)}) {
    s = Restore(kJob, other, &again);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
    EXPECT_TRUE(Contains(s, "already had a restore order for shard epoch 2")) << s.error_message();
    EXPECT_EQ(Raw(), trained);
  }

  // A new epoch without a checkpoint empties the slots: rows start over from the initializer.
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC, 3).ok());
  s = Restore(kJob, Order(3, 0, 0, false), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.rows(), 0u);
  EXPECT_TRUE(Raw().empty());
  EXPECT_EQ(Values(kJob).size(), 32u);  // dense rows are created again, never updated
  EXPECT_EQ(Raw().size(), 8u);
  for (const auto& [key, row] : Raw()) EXPECT_EQ(row.first, 0);
}

TEST_F(CheckpointServiceTest, CorruptCheckpointFailsTheRestoreOnceAndChangesNothing) {
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC).ok());
  CreateTables(kJob);
  ASSERT_TRUE(Push(kJob, 1, 0, 1.0f).ok());
  TakeCheckpoint(kJob, 1, 0);
  ASSERT_TRUE(Push(kJob, 1, 0, 2.0f).ok());
  const RawRows before = Raw();
  for (const auto& entry : fs::directory_iterator(PathOf(1))) {
    if (entry.path().extension() != ".sst") continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(entry.path()) / 4));
    f.write("garbage!", 8);
  }
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC, 2).ok());
  v1::RestoreResponse resp;
  grpc::Status s = Restore(kJob, Order(2, 1, 0, /*rollback=*/true), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DATA_LOSS) << s.error_message();
  EXPECT_TRUE(Contains(s, PathOf(1))) << s.error_message();
  EXPECT_EQ(Raw(), before);
  // Not retried for this epoch: the same answer to the same order; another order is refused.
  const grpc::Status again = Restore(kJob, Order(2, 1, 0, true), &resp);
  EXPECT_EQ(again.error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_EQ(again.error_message(), s.error_message());
  EXPECT_EQ(Restore(kJob, Order(2, 0, 0, true), &resp).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Raw(), before);
  // A missing checkpoint directory is NOT_FOUND.
  fs::remove_all(PathOf(1));
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC, 3).ok());
  s = Restore(kJob, Order(3, 1, 0, true), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_EQ(Raw(), before);
  // Unknown jobs are refused; the server keeps serving.
  s = Restore("nojob", Order(3, 1, 0, true), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_EQ(Values(kJob).size(), 32u);
}

// Malformed restore orders are refused before anything is read, and not remembered: the same
// epoch's well-formed order is carried out afterwards.
TEST_F(CheckpointServiceTest, MalformedRestoreOrdersAreRefusedUpFrontAndNotRemembered) {
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC).ok());
  CreateTables(kJob);
  ASSERT_TRUE(Push(kJob, 1, 0, 1.0f).ok());
  const RawRows saved = Raw();
  TakeCheckpoint(kJob, 1, 0);
  ASSERT_TRUE(Push(kJob, 1, 0, 2.0f).ok());
  const RawRows before = Raw();
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC, 2).ok());
  v1::RestoreOrder negative = Order(2, 1, -5, /*rollback=*/true);
  v1::RestoreOrder bad_bitmap = Order(2, 1, 0, false);
  bad_bitmap.mutable_shards(0)->set_slots("xyz");
  v1::RestoreOrder twice = Order(2, 1, 0, false);
  *twice.add_shards() = twice.shards(0);  // two shards holding the same slots
  const std::pair<const v1::RestoreOrder*, std::string> cases[] = {
      {&negative, "clock -5"}, {&bad_bitmap, "malformed slot bitmap"}, {&twice, "both hold slot"}};
  for (const auto& [order, message] : cases) {
    v1::RestoreResponse resp;
    const grpc::Status s = Restore(kJob, *order, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << message;
    EXPECT_TRUE(Contains(s, message)) << s.error_message();
    EXPECT_EQ(Raw(), before);
  }
  v1::RestoreResponse resp;
  const grpc::Status s = Restore(kJob, Order(2, 1, 0, false), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Raw(), saved);
}

// A checkpoint lacking one of the job's tables (by name) cannot be restored: that table would
// silently keep its initial values.
TEST_F(CheckpointServiceTest, ACheckpointWithoutOneOfTheTablesIsRefused) {
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC).ok());
  CreateTables(kJob);
  ASSERT_TRUE(Push(kJob, 1, 0, 1.0f).ok());
  TakeCheckpoint(kJob, 1, 0);
  v1::TableSpec extra;
  extra.set_table_id(9);
  extra.set_name("added_later");
  extra.set_job_id(kJob);
  extra.set_kind(v1::SPARSE);
  extra.set_dim(2);
  extra.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  extra.mutable_optimizer()->set_learning_rate(0.1f);
  {
    CallContext c;
    v1::CreateTableRequest req;
    *req.mutable_spec() = extra;
    v1::CreateTableResponse resp;
    ASSERT_TRUE(stub_->CreateTable(&c.ctx, req, &resp).ok());
  }
  const RawRows before = Raw();
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC, 2).ok());
  v1::RestoreResponse resp;
  const grpc::Status s = Restore(kJob, Order(2, 1, 0, /*rollback=*/true), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_TRUE(Contains(s, "no table named added_later")) << s.error_message();
  EXPECT_EQ(Raw(), before);
}

TEST_F(CheckpointServiceTest, RequestsRoutedWithAStaleShardEpochAreRefused) {
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC).ok());
  CreateTables(kJob);
  EXPECT_TRUE(Pull(kJob, 0, 1).ok());  // the default shards are epoch 1
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC, 2).ok());
  grpc::Status s = Pull(kJob, 0, 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_EQ(s.error_message(), "stale shard map epoch 1 of job job; this server is at 2");
  s = Push(kJob, 1, 0, 1.0f, /*shard_epoch=*/1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  {
    v1::PushPullRequest req;
    req.mutable_push()->set_job_id(kJob);
    req.mutable_push()->set_worker_id(1);
    req.mutable_push()->set_request_id(++request_id_);
    req.mutable_push()->set_shard_epoch(1);
    *req.add_pull_blocks() = Block(kDense, {0});
    v1::PullResponse resp;
    CallContext c;
    s = stub_->PushPull(&c.ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
    EXPECT_TRUE(Contains(s, "stale shard map epoch 1")) << s.error_message();
  }
  EXPECT_TRUE(Pull(kJob, 0, 0).ok());
  EXPECT_TRUE(Pull(kJob, 0, 2).ok());
  EXPECT_TRUE(Push(kJob, 1, 0, 1.0f, 2).ok());
  EXPECT_TRUE(Push(kJob, 1, 0, 1.0f, 0).ok());
  v1::CheckpointResponse resp;
  s = Checkpoint(kJob, 1, 0, &resp, /*shard_epoch=*/1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  s = Checkpoint(kJob, 2, 0, &resp, /*shard_epoch=*/2);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(CheckpointServiceTest, CallerClockRaisesTheWorkersClockNeverLowersIt) {
  v1::ConfigureJobResponse resp;
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::SSP, 0, /*caller_clock=*/5, &resp).ok());
  EXPECT_EQ(resp.worker_clocks().at(2), 5);
  EXPECT_EQ(resp.worker_clocks().at(1), 0);
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::SSP, 0, 3, &resp).ok());
  EXPECT_EQ(resp.worker_clocks().at(2), 5);
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::SSP, 0, -1, &resp).ok());
  EXPECT_EQ(resp.worker_clocks().at(2), 5);
}

TEST_F(CheckpointServiceTest, ShutdownWithADelayedWriteInFlightIsPromptAndLeavesNothing) {
  server_->Shutdown();
  StartWithWriteDelay(absl::Minutes(10));
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC).ok());
  CreateTables(kJob);
  v1::CheckpointResponse resp;
  ASSERT_TRUE(Checkpoint(kJob, 1, 0, &resp).ok());
  // The write waits: AwaitCheckpoint runs into its deadline.
  grpc::Status s = Await(kJob, 1, &resp, absl::Seconds(1));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  grpc::Status waiting;
  std::thread awaiter([&] {
    v1::CheckpointResponse r;
    waiting = Await(kJob, 1, &r, absl::Seconds(60));
  });
  absl::SleepFor(absl::Milliseconds(200));
  const absl::Time start = absl::Now();
  server_->Shutdown();
  awaiter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_FALSE(waiting.ok());
  EXPECT_FALSE(fs::exists(PathOf(1)));
}

// A job's checkpoints outlive the job: once it is dropped (it ended), a new job with the same
// table ids restores them; a write still running when its job is dropped completes and can be
// awaited.
TEST_F(CheckpointServiceTest, ADroppedJobsCheckpointsCompleteAndRestoreIntoANewJob) {
  server_->Shutdown();
  StartWithWriteDelay(absl::Milliseconds(300));
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::SYNC, /*shard_epoch=*/1).ok());
  CreateTables(kJob);
  Step(kJob, 0, 1.0f);
  const RawRows saved = Raw();
  v1::CheckpointResponse resp;
  ASSERT_TRUE(Checkpoint(kJob, 1, 1, &resp).ok());  // copied; written 300 ms later
  v1::DropJobRequest drop;
  drop.set_job_id(kJob);
  v1::DropJobResponse dropped;
  {
    CallContext c;
    ASSERT_TRUE(stub_->DropJob(&c.ctx, drop, &dropped).ok());
  }
  EXPECT_EQ(dropped.tables_dropped(), 2u);
  EXPECT_TRUE(Raw().empty());
  grpc::Status s = Await(kJob, 1, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(resp.done());
  ASSERT_TRUE(fs::exists(PathOf(1)));

  ASSERT_TRUE(Configure("next", v1::ConsistencySpec::SYNC, 1).ok());
  CreateTables("next");  // the dropped job's table ids and names
  v1::RestoreOrder order = Order(1, 1, /*clock=*/1, /*rollback=*/true);
  order.set_source_job_id(kJob);
  v1::RestoreResponse restored;
  s = Restore("next", order, &restored);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Raw(), saved);
  Step("next", 1, 0.5f);  // and it trains on
}

// One job's restore orders and shard epochs never reach another job's rows: a restore touches
// only tables whose spec names the order's job (even when a checkpoint of the other job, with
// tables of the same names, is the source), and epochs are kept per job.
TEST_F(CheckpointServiceTest, RestoreOrdersAndShardEpochsOfOneJobLeaveAnotherJobAlone) {
  constexpr char kOther[] = "other";
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC).ok());
  CreateTables(kJob);
  ASSERT_TRUE(Configure(kOther, v1::ConsistencySpec::ASYNC).ok());
  for (uint32_t id : {21u, 22u}) {  // same names ("dense", "sparse") as kJob's tables
    v1::TableSpec spec =
        Spec(id == 21 ? kDense : kSparse, id == 21 ? v1::DENSE : v1::SPARSE, kOther);
    spec.set_table_id(id);
    v1::CreateTableRequest req;
    *req.mutable_spec() = spec;
    v1::CreateTableResponse resp;
    CallContext c;
    ASSERT_TRUE(stub_->CreateTable(&c.ctx, req, &resp).ok());
  }
  auto push_other = [&](float g, uint64_t epoch) {
    v1::PushRequest req;
    req.set_job_id(kOther);
    req.set_worker_id(1);
    req.set_request_id(++request_id_);
    req.set_shard_epoch(epoch);
    *req.add_blocks() = Block(21, {0, 1}, std::vector<float>(8, g));
    *req.add_blocks() = Block(22, {7, 8}, std::vector<float>(4, g));
    v1::PushResponse resp;
    CallContext c;
    return stub_->Push(&c.ctx, req, &resp);
  };
  auto other_rows = [&] {
    RawRows rows;
    for (uint32_t table : {21u, 22u}) {
      server_->store()->ForEachRow(
          table, [&](uint64_t key, int64_t updates, absl::Span<const float> row) {
            rows[{table, key}] = {updates, std::string(reinterpret_cast<const char*>(row.data()),
                                                       row.size() * sizeof(float))};
          });
    }
    return rows;
  };
  ASSERT_TRUE(push_other(1.0f, 1).ok());
  ASSERT_TRUE(Push(kJob, 1, 0, 1.0f).ok());
  // A checkpoint of the other job, taken under its own (default) epoch.
  {
    v1::CheckpointRequest req;
    req.set_job_id(kOther);
    req.set_checkpoint_id(1);
    req.set_path((root_ / "other-1").string());
    req.set_shard_epoch(1);
    v1::CheckpointResponse resp;
    CallContext c;
    ASSERT_TRUE(stub_->Checkpoint(&c.ctx, req, &resp).ok());
    ASSERT_TRUE(Await(kOther, 1, &resp).ok());
  }
  ASSERT_TRUE(push_other(2.0f, 1).ok());
  const RawRows other_before = other_rows();
  ASSERT_TRUE(other_before.size() == 10u) << other_before.size();

  // kJob's epoch jumps far ahead: the other job's requests of epoch 1 are still served.
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC, uint64_t{1} << 40).ok());
  EXPECT_TRUE(push_other(0.0f, 1).ok());
  const RawRows other_after_push = other_rows();

  // kJob rolls back to "nothing" (every slot emptied), then to the other job's checkpoint.
  v1::RestoreResponse resp;
  grpc::Status s = Restore(kJob, Order(uint64_t{1} << 40, 0, 0, /*rollback=*/true), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(other_rows(), other_after_push);
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC, (uint64_t{1} << 40) + 1).ok());
  v1::RestoreOrder from_other = Order((uint64_t{1} << 40) + 1, 1, 0, /*rollback=*/true);
  from_other.set_source_job_id(kOther);
  from_other.mutable_shards(0)->set_path((root_ / "other-1").string());
  s = Restore(kJob, from_other, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.rows(), 10u);
  EXPECT_EQ(other_rows(), other_after_push);
  // A restore request naming the other job checks the other job's epoch: refused, nothing read.
  s = Restore(kOther, Order((uint64_t{1} << 40) + 1, 0, 0, true), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_EQ(other_rows(), other_after_push);
}

// Issue 15: Checkpoint wrote a RocksDB directory at any path that did not exist yet. Paths
// (and a restore order's shard paths) must lie under the server's --checkpoint_roots.
TEST_F(CheckpointServiceTest, CheckpointAndRestorePathsOutsideTheRootsAreRefused) {
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC).ok());
  CreateTables(kJob);
  ASSERT_TRUE(Push(kJob, 1, 0, 1.0f).ok());
  TakeCheckpoint(kJob, 1, 0);
  const RawRows before = Raw();
  const fs::path outside = root_.string() + "-outside";
  fs::remove_all(outside);
  fs::create_directories(outside);
  fs::create_symlink(outside, root_ / "link");
  const std::string paths[] = {
      "../../x",
      "relative/ckpt",
      (outside / "ckpt-2").string(),
      (root_ / ".." / (root_.filename().string() + "-outside") / "ckpt-2").string(),
      (root_ / "link" / "ckpt-2").string(),
  };
  uint64_t id = 2;
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    v1::CheckpointResponse resp;
    const grpc::Status s = Checkpoint(kJob, id++, 0, &resp, 1, path);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_TRUE(Contains(s, "checkpoint path '" + path + "'")) << s.error_message();
    EXPECT_TRUE(Contains(s, root_.string())) << s.error_message();
  }
  EXPECT_TRUE(fs::is_empty(outside));
  EXPECT_FALSE(fs::exists(root_.parent_path().parent_path() / "x"));
  // A restore order reading from outside the roots is refused before anything is read.
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC, 2).ok());
  v1::RestoreOrder order = Order(2, 1, 0, /*rollback=*/true);
  fs::copy(PathOf(1), outside / "s0", fs::copy_options::recursive);
  order.mutable_shards(0)->set_path((outside / "s0").string());
  v1::RestoreResponse restored;
  grpc::Status s = Restore(kJob, order, &restored);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_TRUE(Contains(s, "restore order shard path")) << s.error_message();
  EXPECT_EQ(Raw(), before);
  // Still serving: the order from inside the root is carried out.
  s = Restore(kJob, Order(2, 1, 0, /*rollback=*/true), &restored);
  EXPECT_TRUE(s.ok()) << s.error_message();
  fs::remove_all(outside);
}

// A server started without checkpoint roots refuses every checkpoint, saying which flag to set.
TEST_F(CheckpointServiceTest, WithoutCheckpointRootsEveryCheckpointIsRefused) {
  server_->Shutdown();
  ParameterServerOptions options;
  options.listen = "127.0.0.1:0";  // for the second start too
  ASSERT_NO_FATAL_FAILURE(StartServer(options));
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC).ok());
  CreateTables(kJob);
  v1::CheckpointResponse resp;
  const grpc::Status s = Checkpoint(kJob, 1, 0, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_TRUE(Contains(s, "--checkpoint_roots")) << s.error_message();
  EXPECT_FALSE(fs::exists(PathOf(1)));
  EXPECT_EQ(Values(kJob).size(), 32u);
  // Relative roots are refused at start-up.
  options.checkpoint_roots = {"relative/dir"};
  EXPECT_EQ(ParameterServer::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps::parameter_service_checkpoint_test
