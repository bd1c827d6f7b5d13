// Checkpoints through real ps_server processes: a checkpoint written by one cluster and restored
// into a fresh one (of another size, under another job and other table ids) gives bit-identical
// rows, values and optimizer state; a corrupt checkpoint file is detected and leaves the target's
// rows intact.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/shard_map.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"
#include "client/job_admin.h"
#include "client/rpc_client.h"

namespace ps {
namespace {

using testing::LocalCluster;

constexpr uint64_t kDenseRows = 700;
constexpr int kDenseDim = 16;
constexpr int kSparseDim = 8;

std::unique_ptr<RpcClient> Connect(const LocalCluster& cluster, const std::string& job) {
  RpcClientOptions o;
  o.servers = cluster.addresses();
  o.job_id = job;
  o.worker_id = 0;
  o.rpc_timeout = absl::Seconds(60);
  auto c = RpcClient::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

// The job's two tables: a dense one with adam, a sparse one with adagrad. Names are what a
// restore matches on; ids differ from job to job.
std::vector<v1::TableSpec> Tables(const std::string& job, uint32_t first_id) {
  std::vector<v1::TableSpec> tables(2);
  for (int t = 0; t < 2; ++t) {
    v1::TableSpec& s = tables[t];
    s.set_table_id(first_id + t);
    s.set_name(t == 0 ? "dense" : "sparse");
    s.set_job_id(job);
    s.set_kind(t == 0 ? v1::DENSE : v1::SPARSE);
    s.set_dim(t == 0 ? kDenseDim : kSparseDim);
    s.set_num_rows(t == 0 ? kDenseRows : 0);
    s.mutable_initializer()->set_kind(v1::InitializerSpec::UNIFORM);
    s.mutable_initializer()->set_low(-0.5f);
    s.mutable_initializer()->set_high(0.5f);
    s.mutable_initializer()->set_seed(11 + t);
    s.mutable_optimizer()->set_kind(t == 0 ? v1::OptimizerSpec::ADAM : v1::OptimizerSpec::ADAGRAD);
    s.mutable_optimizer()->set_learning_rate(0.05f);
  }
  return tables;
}

std::vector<uint64_t> SparseKeys() {
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 300; ++k) keys.push_back(k * 7919 + (uint64_t{1} << 40));
  return keys;
}

std::vector<float> Gradients(size_t n, int clock) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = static_cast<float>((i * 31 + clock * 17) % 23) / 23 - 0.5f;
  return g;
}

struct Job {
  std::unique_ptr<RpcClient> client;
  uint32_t first_id = 0;
  std::vector<uint64_t> dense_keys = DenseKeys(kDenseRows);
  std::vector<uint64_t> sparse_keys = SparseKeys();
};

Job StartJob(const LocalCluster& cluster, const std::string& name, uint32_t first_id) {
  Job job;
  job.client = Connect(cluster, name);
  job.first_id = first_id;
  v1::ConsistencySpec async;
  async.set_mode(v1::ConsistencySpec::ASYNC);
  EXPECT_TRUE(JobAdmin(*job.client).ConfigureJob(async, {0}).ok());
  for (const v1::TableSpec& t : Tables(name, first_id)) {
    EXPECT_TRUE(job.client->CreateTable(t).ok());
  }
  return job;
}

absl::Status PushStep(Job& job, int clock) {
  const std::vector<float> dense = Gradients(kDenseRows * kDenseDim, clock);
  const std::vector<float> sparse = Gradients(job.sparse_keys.size() * kSparseDim, clock + 99);
  std::vector<TableOp> ops(2);
  ops[0].table_id = job.first_id;
  ops[0].keys = job.dense_keys;
  ops[0].grads = dense.data();
  ops[1].table_id = job.first_id + 1;
  ops[1].keys = job.sparse_keys;
  ops[1].grads = sparse.data();
  absl::Status s = job.client->Push(std::move(ops));
  if (!s.ok()) return s;
  return job.client->Clock();
}

// Every row of both tables, as pulled.
std::vector<float> PullAll(Job& job) {
  std::vector<float> out(kDenseRows * kDenseDim + job.sparse_keys.size() * kSparseDim);
  std::vector<TableOp> ops(2);
  ops[0].table_id = job.first_id;
  ops[0].keys = job.dense_keys;
  ops[0].out = out.data();
  ops[1].table_id = job.first_id + 1;
  ops[1].keys = job.sparse_keys;
  ops[1].out = out.data() + kDenseRows * kDenseDim;
  EXPECT_TRUE(job.client->Pull(std::move(ops)).ok());
  return out;
}

bool BitIdentical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Writes checkpoint 1 of `job` (on `cluster`) under `dir`; the restore order that loads it.
v1::RestoreOrder WriteCheckpoint(const LocalCluster& cluster, Job& job, const std::string& dir) {
  std::vector<std::string> paths;
  v1::RestoreOrder order;
  order.set_shard_epoch(1);
  order.set_checkpoint_id(1);
  order.set_source_job_id(job.client->job_id());
  order.set_clock(job.client->clock());
  order.set_rollback(true);
  order.set_slots(EncodeSlotBitmap(std::vector<bool>(kNumSlots, true)));
  const ShardMap map = ShardMap::RoundRobin(cluster.addresses());
  for (size_t i = 0; i < cluster.addresses().size(); ++i) {
    paths.push_back(absl::StrCat(dir, "/shard-", i));
    v1::CheckpointShard* shard = order.add_shards();
    shard->set_server_index(i);
    shard->set_path(paths.back());
    shard->set_slots(EncodeSlotBitmap(map.SlotsOf(static_cast<int>(i))));
  }
  auto snapshot = JobAdmin(*job.client).SnapshotCheckpoint(1, job.client->clock(), paths);
  EXPECT_TRUE(snapshot.ok()) << snapshot.status();
  auto written = JobAdmin(*job.client).AwaitCheckpoint(1, absl::Seconds(60));
  EXPECT_TRUE(written.ok()) << written.status();
  uint64_t rows = 0;
  if (written.ok()) {
    for (const v1::CheckpointResponse& r : *written) {
      EXPECT_TRUE(r.done());
      rows += r.rows();
    }
  }
  EXPECT_EQ(rows, kDenseRows + job.sparse_keys.size());
  return order;
}

class CheckpointClusterTest : public ::testing::Test {
 protected:
  std::string Dir() {
    const std::string dir =
        absl::StrCat(::testing::TempDir(), "/ps_ckpt_cluster_", getpid(), "_",
                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir);
    return dir;
  }
};

TEST_F(CheckpointClusterTest, RestoreIntoAFreshClusterIsBitIdentical) {
  const std::string dir = Dir();
  // The servers write and read checkpoints under `dir` only.
  auto a = LocalCluster::Start(2, {"--checkpoint_roots=" + dir});
  ASSERT_TRUE(a.ok()) << a.status();
  Job original = StartJob(*a, "ckpt-a", 1);
  for (int c = 0; c < 4; ++c) ASSERT_TRUE(PushStep(original, c).ok());
  const std::vector<float> before = PullAll(original);
  const v1::RestoreOrder order = WriteCheckpoint(*a, original, dir);

  // A fresh cluster of another size, another job, other table ids.
  auto b = LocalCluster::Start(3, {"--checkpoint_roots=" + dir});
  ASSERT_TRUE(b.ok()) << b.status();
  Job restored = StartJob(*b, "ckpt-b", 501);
  const std::vector<float> initial = PullAll(restored);
  EXPECT_FALSE(BitIdentical(initial, before));
  auto clock = JobAdmin(*restored.client).Restore(order, absl::Seconds(60));
  ASSERT_TRUE(clock.ok()) << clock.status();
  EXPECT_EQ(*clock, 4);  // rolled back to the checkpoint's clock
  restored.client->SetClock(*clock);
  EXPECT_TRUE(BitIdentical(PullAll(restored), before));

  // The optimizer state came along: the same gradients give the same rows again.
  for (int c = 4; c < 6; ++c) {
    ASSERT_TRUE(PushStep(original, c).ok());
    ASSERT_TRUE(PushStep(restored, c).ok());
  }
  const std::vector<float> after = PullAll(original);
  EXPECT_FALSE(BitIdentical(after, before));
  EXPECT_TRUE(BitIdentical(PullAll(restored), after));
  std::filesystem::remove_all(dir);
}

TEST_F(CheckpointClusterTest, CorruptCheckpointIsDetectedAndRowsStayIntact) {
  const std::string dir = Dir();
  // The servers write and read checkpoints under `dir` only.
  auto a = LocalCluster::Start(2, {"--checkpoint_roots=" + dir});
  ASSERT_TRUE(a.ok()) << a.status();
  Job original = StartJob(*a, "ckpt-c", 1);
  for (int c = 0; c < 2; ++c) ASSERT_TRUE(PushStep(original, c).ok());
  const v1::RestoreOrder order = WriteCheckpoint(*a, original, dir);

  // Flip bytes in the middle of shard 1's largest table file.
  std::filesystem::path victim;
  uintmax_t largest = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/shard-1")) {
    if (entry.path().extension() == ".sst" && entry.file_size() > largest) {
      largest = entry.file_size();
      victim = entry.path();
    }
  }
  ASSERT_FALSE(victim.empty()) << "no .sst file in " << dir << "/shard-1";
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(largest / 2));
    const std::string junk(512, '\x5a');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }

  // One target server: it reads both shards, finds one corrupt, and loads nothing.
  auto b = LocalCluster::Start(1, {"--checkpoint_roots=" + dir});
  ASSERT_TRUE(b.ok()) << b.status();
  Job target = StartJob(*b, "ckpt-d", 1);
  for (int c = 0; c < 1; ++c) ASSERT_TRUE(PushStep(target, c).ok());
  const std::vector<float> rows = PullAll(target);
  auto restored = JobAdmin(*target.client).Restore(order, absl::Seconds(60));
  EXPECT_EQ(restored.status().code(), absl::StatusCode::kDataLoss) << restored.status();
  // Nothing was loaded (a server reads everything before it replaces a row), and it serves.
  EXPECT_TRUE(BitIdentical(PullAll(target), rows));
  EXPECT_TRUE(PushStep(target, 1).ok());

  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ps
