// Consistency over real gRPC: ps_server processes on loopback, workers as client threads.
#include <grpcpp/create_channel.h>

#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/packed_bytes.h"
#include "common/shard_map.h"
#include "gtest/gtest.h"
#include "server/table_store.h"
#include "tests/local_cluster.h"
#include "client/job_admin.h"
#include "client/rpc_client.h"

namespace ps {
namespace {

using testing::LocalCluster;

std::unique_ptr<RpcClient> Connect(const LocalCluster& cluster, const std::string& job,
                                   uint32_t worker, size_t max_part_bytes = 4 << 20) {
  RpcClientOptions o;
  o.servers = cluster.addresses();
  o.job_id = job;
  o.worker_id = worker;
  o.max_part_bytes = max_part_bytes;
  o.rpc_timeout = absl::Seconds(60);
  auto c = RpcClient::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

v1::ConsistencySpec Mode(v1::ConsistencySpec::Mode mode, int staleness = 0) {
  v1::ConsistencySpec c;
  c.set_mode(mode);
  c.set_staleness(staleness);
  return c;
}

v1::TableSpec Table(uint32_t id, const std::string& job, v1::TableKind kind, uint32_t dim,
                    uint64_t rows, v1::OptimizerSpec::Kind opt, float lr) {
  v1::TableSpec t;
  t.set_table_id(id);
  t.set_name(absl::StrCat("t", id));
  t.set_job_id(job);
  t.set_kind(kind);
  t.set_dim(dim);
  t.set_num_rows(rows);
  t.mutable_initializer()->set_kind(v1::InitializerSpec::UNIFORM);
  t.mutable_initializer()->set_low(-0.5f);
  t.mutable_initializer()->set_high(0.5f);
  t.mutable_initializer()->set_seed(id * 17);
  t.mutable_optimizer()->set_kind(opt);
  t.mutable_optimizer()->set_learning_rate(lr);
  return t;
}

// A deterministic gradient value in [-1, 1) for (worker, clock, table, key, index).
float Grad(uint32_t w, int c, uint32_t table, uint64_t key, int i) {
  uint64_t z = (((w * 1000003ULL + c) * 7919 + table) * 104729 + key) * 131 + i;
  z = (z ^ (z >> 31)) * 0x7fb5d329728ea185ULL;
  z = (z ^ (z >> 27)) * 0x81dadef4bc2dd44dULL;
  return static_cast<float>(z >> 40) / static_cast<float>(1 << 23) - 1.0f;
}

// The sparse keys worker w touches at clock c: overlapping across workers, distinct within one.
std::vector<uint64_t> SparseKeys(uint32_t w, int c) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 40; ++k) keys.push_back((k * 97 + (w + c) * 13) % 300 + (1ULL << 40));
  return keys;
}

// Test of BSP: N workers in sync mode produce the parameters of one process applying the summed
// gradients of the same batches, clock by clock.
TEST(ClusterTest, SyncEqualsSequential) {
  auto cluster = LocalCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  constexpr int kWorkers = 3, kClocks = 8, kDenseRows = 50, kDenseDim = 8, kSparseDim = 4;
  const std::string job = "sync_eq";
  const v1::TableSpec dense =
      Table(1, job, v1::DENSE, kDenseDim, kDenseRows, v1::OptimizerSpec::ADAM, 0.05f);
  const v1::TableSpec sparse =
      Table(2, job, v1::SPARSE, kSparseDim, 0, v1::OptimizerSpec::MOMENTUM, 0.1f);
  const std::vector<uint64_t> dense_keys = DenseKeys(kDenseRows);
  std::vector<uint64_t> all_sparse;
  for (uint64_t k = 0; k < 300; ++k) all_sparse.push_back(k + (1ULL << 40));

  // What worker 0 pulled after each clock: dense table, then every sparse key.
  std::vector<std::vector<float>> seen(kClocks);
  std::vector<std::thread> workers;
  std::atomic<int> failures{0};
  for (uint32_t w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      auto client = Connect(*cluster, job, w);
      if (!client || !client->CreateTable(dense).ok() || !client->CreateTable(sparse).ok() ||
          !JobAdmin(*client).ConfigureJob(Mode(v1::ConsistencySpec::SYNC), {0, 1, 2}).ok()) {
        ++failures;
        return;
      }
      std::vector<float> dense_vals(kDenseRows * kDenseDim), sparse_vals(300 * kSparseDim);
      for (int c = 0; c < kClocks; ++c) {
        std::vector<float> dg(kDenseRows * kDenseDim);
        for (int k = 0; k < kDenseRows; ++k)
          for (int i = 0; i < kDenseDim; ++i) dg[k * kDenseDim + i] = Grad(w, c, 1, k, i);
        const std::vector<uint64_t> sk = SparseKeys(w, c);
        std::vector<float> sg(sk.size() * kSparseDim);
        for (size_t k = 0; k < sk.size(); ++k)
          for (int i = 0; i < kSparseDim; ++i) sg[k * kSparseDim + i] = Grad(w, c, 2, sk[k], i);
        absl::Status s = client->PushPull(
            {TableOp{1, dense_keys, dg.data(), nullptr}, TableOp{2, sk, sg.data(), nullptr}},
            {TableOp{1, dense_keys, nullptr, dense_vals.data()},
             TableOp{2, all_sparse, nullptr, sparse_vals.data()}});
        if (!s.ok()) {
          ADD_FAILURE() << "worker " << w << " clock " << c << ": " << s;
          ++failures;
          return;
        }
        if (w == 0) {
          seen[c] = dense_vals;
          seen[c].insert(seen[c].end(), sparse_vals.begin(), sparse_vals.end());
        }
      }
    });
  }
  for (auto& t : workers) t.join();
  ASSERT_EQ(failures.load(), 0);

  // The sequential reference: one store, the summed gradient of every clock applied once.
  TableStore ref(TableStoreOptions{});
  ASSERT_TRUE(ref.CreateTable(dense).ok());
  ASSERT_TRUE(ref.CreateTable(sparse).ok());
  for (int c = 0; c < kClocks; ++c) {
    std::vector<float> dsum(kDenseRows * kDenseDim, 0.0f);
    std::map<uint64_t, std::vector<float>> ssum;
    for (uint32_t w = 0; w < kWorkers; ++w) {
      for (int k = 0; k < kDenseRows; ++k)
        for (int i = 0; i < kDenseDim; ++i) dsum[k * kDenseDim + i] += Grad(w, c, 1, k, i);
      for (uint64_t key : SparseKeys(w, c)) {
        auto& v = ssum[key];
        v.resize(kSparseDim, 0.0f);
        for (int i = 0; i < kSparseDim; ++i) v[i] += Grad(w, c, 2, key, i);
      }
    }
    v1::KeyBlock db, sb;
    db.set_table_id(1);
    AppendKeys(dense_keys, db.mutable_keys());
    AppendValues(dsum.data(), dsum.size(), db.mutable_values());
    sb.set_table_id(2);
    for (const auto& [key, v] : ssum) {
      AppendKeys({key}, sb.mutable_keys());
      AppendValues(v.data(), v.size(), sb.mutable_values());
    }
    for (const v1::KeyBlock* b : {&db, &sb}) {
      TableStore::BlockView view;
      ASSERT_TRUE(ref.Resolve(job, *b, true, &view).ok());
      ASSERT_TRUE(ref.Apply(view).ok());
    }
    // After clock c every worker pulled the parameters of clock c + 1: compare.
    std::vector<float> want;
    const std::pair<uint32_t, const std::vector<uint64_t>*> pulls[] = {{1, &dense_keys},
                                                                       {2, &all_sparse}};
    for (const auto& [table, keys] : pulls) {
      v1::KeyBlock pb;
      pb.set_table_id(table);
      AppendKeys(*keys, pb.mutable_keys());
      TableStore::BlockView view;
      ASSERT_TRUE(ref.Resolve(job, pb, false, &view).ok());
      std::string out;
      ASSERT_TRUE(ref.Pull(view, &out).ok());
      const float* f = reinterpret_cast<const float*>(out.data());
      want.insert(want.end(), f, f + out.size() / sizeof(float));
    }
    ASSERT_EQ(seen[c].size(), want.size());
    int mismatches = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::fabs(seen[c][i] - want[i]) > 1e-5f * (1 + std::fabs(want[i]))) ++mismatches;
    }
    EXPECT_EQ(mismatches, 0) << "clock " << c << ": " << mismatches << " of " << want.size()
                             << " values differ from the sequential run";
  }
}

// Test of SSP: with one worker slowed down, no pull is served more than `s` clocks ahead of the
// slowest worker, and the fast workers do wait.
TEST(ClusterTest, SspBoundHolds) {
  auto cluster = LocalCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  constexpr int kWorkers = 3, kClocks = 12, kStaleness = 2;
  const std::string job = "ssp";
  // One counter per server (keys 0..15 cover both); every push adds 1 to each (sgd, lr 1).
  v1::TableSpec counter = Table(1, job, v1::DENSE, 1, 16, v1::OptimizerSpec::SGD, 1.0f);
  counter.mutable_initializer()->set_kind(v1::InitializerSpec::ZEROS);
  const std::vector<uint64_t> keys = DenseKeys(16);
  std::atomic<int> failures{0};
  std::vector<absl::Duration> waited(kWorkers);
  std::vector<std::thread> workers;
  for (uint32_t w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      auto client = Connect(*cluster, job, w);
      if (!client || !client->CreateTable(counter).ok() ||
          !JobAdmin(*client)
               .ConfigureJob(Mode(v1::ConsistencySpec::SSP, kStaleness), {0, 1, 2})
               .ok()) {
        ++failures;
        return;
      }
      const std::vector<float> minus_one(16, -1.0f);
      std::vector<float> vals(16);
      for (int c = 0; c < kClocks; ++c) {
        if (w == kWorkers - 1) absl::SleepFor(absl::Milliseconds(30));  // the straggler
        RpcHandle h = client->PushPullAsync({TableOp{1, keys, minus_one.data(), nullptr}},
                                            {TableOp{1, keys, nullptr, vals.data()}});
        absl::Status s = h.Wait();
        if (!s.ok()) {
          ADD_FAILURE() << "worker " << w << " clock " << c << ": " << s;
          ++failures;
          return;
        }
        waited[w] += h.max_wait();
        const int64_t pull_clock = c + 1;
        // The servers vouch for the bound...
        EXPECT_GE(h.min_clock(), pull_clock - kStaleness) << "worker " << w << " clock " << c;
        // ...and the values show it: every worker's pushes of clocks < pull_clock - s are in.
        for (int k = 0; k < 16; ++k) {
          EXPECT_GE(vals[k], kWorkers * (pull_clock - kStaleness))
              << "worker " << w << " pulled a value staler than " << kStaleness << " clocks";
          EXPECT_LE(vals[k], kWorkers * kClocks);
        }
      }
    });
  }
  for (auto& t : workers) t.join();
  ASSERT_EQ(failures.load(), 0);
  EXPECT_GT(waited[0], absl::ZeroDuration()) << "fast worker 0 never waited for the straggler";
  EXPECT_GT(waited[1], absl::ZeroDuration()) << "fast worker 1 never waited for the straggler";
}

// Test of ASYNC: many workers pushing concurrently with a known update sum end at that sum.
TEST(ClusterTest, AsyncLosesNothing) {
  auto cluster = LocalCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  constexpr int kWorkers = 4, kPushes = 100, kRows = 1000, kDim = 4;
  const std::string job = "async";
  v1::TableSpec dense = Table(1, job, v1::DENSE, kDim, kRows, v1::OptimizerSpec::SGD, 1.0f);
  dense.mutable_initializer()->set_kind(v1::InitializerSpec::ZEROS);
  v1::TableSpec sparse = Table(2, job, v1::SPARSE, kDim, 0, v1::OptimizerSpec::SGD, 1.0f);
  sparse.mutable_initializer()->set_kind(v1::InitializerSpec::ZEROS);
  const std::vector<uint64_t> keys = DenseKeys(kRows);
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (uint32_t w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      auto client = Connect(*cluster, job, w, /*max_part_bytes=*/8192);
      if (!client || !client->CreateTable(dense).ok() || !client->CreateTable(sparse).ok() ||
          !JobAdmin(*client).ConfigureJob(Mode(v1::ConsistencySpec::ASYNC), {0, 1, 2, 3}).ok()) {
        ++failures;
        return;
      }
      // Gradient -(w + 1) on every value: the final value is sum_w (w + 1) * kPushes.
      const std::vector<float> grad(kRows * kDim, -static_cast<float>(w + 1));
      std::vector<RpcHandle> inflight;
      for (int p = 0; p < kPushes; ++p) {
        inflight.push_back(client->PushAsync(
            {TableOp{1, keys, grad.data(), nullptr}, TableOp{2, keys, grad.data(), nullptr}}));
        if (inflight.size() == 4) {  // several requests in flight per worker
          for (RpcHandle& h : inflight) {
            absl::Status s = h.Wait();
            if (!s.ok()) {
              ADD_FAILURE() << s;
              ++failures;
            }
          }
          inflight.clear();
        }
      }
      for (RpcHandle& h : inflight) {
        if (!h.Wait().ok()) ++failures;
      }
    });
  }
  for (auto& t : workers) t.join();
  ASSERT_EQ(failures.load(), 0);
  auto client = Connect(*cluster, job, 0);
  std::vector<float> d(kRows * kDim), s(kRows * kDim);
  ASSERT_TRUE(
      client->Pull({TableOp{1, keys, nullptr, d.data()}, TableOp{2, keys, nullptr, s.data()}})
          .ok());
  const float want = kPushes * (1 + 2 + 3 + 4);
  int wrong = 0;
  for (size_t i = 0; i < d.size(); ++i) wrong += (d[i] != want) + (s[i] != want);
  EXPECT_EQ(wrong, 0) << "values differ from the exact sum " << want;
}

// A tensor much larger than the servers' message limit travels in parts, split over servers.
TEST(ClusterTest, LargeTensorTravelsInParts) {
  auto cluster = LocalCluster::Start(2, {"--max_message_mb=1"});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string job = "large";
  constexpr int kDim = 1024, kRows = 4096;  // 16 MiB of values
  v1::TableSpec t = Table(1, job, v1::DENSE, kDim, kRows, v1::OptimizerSpec::SGD, 1.0f);
  t.mutable_initializer()->set_kind(v1::InitializerSpec::ZEROS);
  auto client = Connect(*cluster, job, 0, /*max_part_bytes=*/512 << 10);
  ASSERT_TRUE(client->CreateTable(t).ok());
  ASSERT_TRUE(JobAdmin(*client).ConfigureJob(Mode(v1::ConsistencySpec::ASYNC), {0}).ok());
  const std::vector<uint64_t> keys = DenseKeys(kRows);
  std::vector<float> grad(static_cast<size_t>(kRows) * kDim);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = -static_cast<float>(i % 1000);
  ASSERT_TRUE(client->Push({TableOp{1, keys, grad.data(), nullptr}}).ok());
  std::vector<float> got(grad.size(), -1.0f);
  ASSERT_TRUE(client->Pull({TableOp{1, keys, nullptr, got.data()}}).ok());
  int wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != static_cast<float>(i % 1000);
  EXPECT_EQ(wrong, 0);
  // The same request in one part is over the limit: the server refuses it, and keeps serving.
  auto whole = Connect(*cluster, job, 0, /*max_part_bytes=*/64 << 20);
  absl::Status s = whole->Push({TableOp{1, keys, grad.data(), nullptr}});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  ASSERT_TRUE(client->Pull({TableOp{1, keys, nullptr, got.data()}}).ok());
  EXPECT_EQ(got[999], 999.0f);
}

// ConfigureJob tells each server which slots it owns for the job: servers started without a
// shard map (each would own every slot) then refuse keys of slots that are not theirs.
TEST(ClusterTest, ConfigureJobAssignsSlots) {
  auto cluster = LocalCluster::Start(2, {"--server_index=0", "--num_servers=1"});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string job = "slots";
  auto client = Connect(*cluster, job, 0);
  ASSERT_TRUE(JobAdmin(*client).ConfigureJob(Mode(v1::ConsistencySpec::ASYNC), {0}).ok());
  v1::TableSpec t = Table(1, job, v1::SPARSE, 2, 0, v1::OptimizerSpec::SGD, 1.0f);
  ASSERT_TRUE(client->CreateTable(t).ok());
  std::vector<uint64_t> keys = DenseKeys(64);
  std::vector<float> vals(128);
  ASSERT_TRUE(client->Pull({TableOp{1, keys, nullptr, vals.data()}}).ok());
  // Key k's slot belongs to server SlotOf(1, k) % 2; ask server 0 for one of server 1's keys.
  uint64_t theirs = 0;
  while (SlotOf(1, theirs) % 2 != 1) ++theirs;
  auto stub = v1::ParameterServer::NewStub(
      grpc::CreateChannel(cluster->addresses()[0], grpc::InsecureChannelCredentials()));
  v1::PullRequest req;
  req.set_job_id(job);
  v1::KeyBlock* b = req.add_blocks();
  b->set_table_id(1);
  AppendKeys({theirs}, b->mutable_keys());
  grpc::ClientContext ctx;
  v1::PullResponse resp;
  grpc::Status s = stub->Pull(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("wrong shard"), std::string::npos) << s.error_message();
  // Each server holds only its own half of the rows.
  for (int i = 0; i < 2; ++i) {
    auto st = v1::ParameterServer::NewStub(
        grpc::CreateChannel(cluster->addresses()[i], grpc::InsecureChannelCredentials()));
    v1::DescribeTableRequest dreq;
    dreq.set_table_id(1);
    v1::DescribeTableResponse dresp;
    grpc::ClientContext dctx;
    ASSERT_TRUE(st->DescribeTable(&dctx, dreq, &dresp).ok());
    EXPECT_GT(dresp.rows_on_server(), 0u);
    EXPECT_LT(dresp.rows_on_server(), 64u);
  }
}

// A worker that dies between its clock advances on two servers leaves them at different clocks
// for a worker that joins (sync: the applied clock; ssp/async: the slowest live worker's). The
// worker that replaces it starts at the highest of them on every server, so its pulls there do
// not wait forever for a clock no live worker will push (seen in CI: a sync job hung after
// `kill -9` of a worker, both live workers stuck on one server) and its pushes are not "ahead".
class JoinTest : public ::testing::TestWithParam<v1::ConsistencySpec::Mode> {};

TEST_P(JoinTest, JoiningWorkerStartsAtOneClockOnEveryServer) {
  auto cluster = LocalCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string job = "join_after_partial_push";
  const v1::ConsistencySpec mode = Mode(GetParam(), 1);
  auto connect = [&](uint32_t worker) {
    RpcClientOptions o;
    o.servers = cluster->addresses();
    o.job_id = job;
    o.worker_id = worker;
    o.rpc_timeout = absl::Seconds(5);  // without the fix the pulls below wait this long and fail
    auto c = RpcClient::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  };
  auto w1 = connect(1);
  ASSERT_NE(w1, nullptr);
  ASSERT_TRUE(JobAdmin(*w1).ConfigureJob(mode, {0, 1}).ok());
  v1::TableSpec t = Table(1, job, v1::DENSE, 2, 16, v1::OptimizerSpec::SGD, 1.0f);
  ASSERT_TRUE(w1->CreateTable(t).ok());
  // Worker 1 finishes clock 0 everywhere; worker 0 only on server 1, then dies.
  ASSERT_TRUE(w1->Clock().ok());
  {
    auto stub = v1::ParameterServer::NewStub(
        grpc::CreateChannel(cluster->addresses()[1], grpc::InsecureChannelCredentials()));
    v1::ClockRequest req;
    req.set_job_id(job);
    req.set_worker_id(0);
    req.set_clock(1);
    v1::ClockResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->Clock(&ctx, req, &resp).ok());
  }
  // The scheduler replaces worker 0 by worker 2 (membership epoch 2); worker 1 is told too.
  ASSERT_TRUE(JobAdmin(*w1).ConfigureJob(mode, {1, 2}, 2).ok());
  auto w2 = connect(2);
  ASSERT_NE(w2, nullptr);
  int64_t clock = -1;
  ASSERT_TRUE(
      JobAdmin(*w2).ConfigureJob(mode, {1, 2}, 2, &clock, -1, /*even_out_clock=*/true).ok());
  EXPECT_EQ(clock, 1);
  for (size_t i = 0; i < 2; ++i) {  // every server has worker 2 at clock 1
    auto stub = v1::ParameterServer::NewStub(
        grpc::CreateChannel(cluster->addresses()[i], grpc::InsecureChannelCredentials()));
    v1::ConfigureJobRequest req;
    req.set_job_id(job);
    *req.mutable_consistency() = mode;
    req.add_worker_ids(1);
    req.add_worker_ids(2);
    req.set_membership_epoch(2);
    v1::ConfigureJobResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->ConfigureJob(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.worker_clocks().at(2), 1) << "server " << i;
  }
  w2->SetClock(clock);
  const std::vector<uint64_t> keys = DenseKeys(16);
  std::vector<float> vals(32);
  EXPECT_TRUE(w2->Pull({TableOp{1, keys, nullptr, vals.data()}}).ok());
  EXPECT_TRUE(w1->Pull({TableOp{1, keys, nullptr, vals.data()}}).ok());
  std::vector<float> grads(32, 0.01f);
  absl::Status pushed = w2->Push({TableOp{1, keys, grads.data(), nullptr}});
  EXPECT_TRUE(pushed.ok()) << pushed;
}

INSTANTIATE_TEST_SUITE_P(Modes, JoinTest,
                         ::testing::Values(v1::ConsistencySpec::SYNC, v1::ConsistencySpec::SSP,
                                           v1::ConsistencySpec::ASYNC),
                         [](const ::testing::TestParamInfo<JoinTest::ParamType>& info) {
                           return v1::ConsistencySpec::Mode_Name(info.param);
                         });

// Records the thread that reported each answered part.
class ThreadObserver : public ClientObserver {
 public:
  void OnPushAccepted(int64_t) override { Record(); }
  void OnPullAnswered(int64_t) override { Record(); }
  void OnPullStaleness(int64_t) override {}
  void OnRetry() override {}
  void OnBlocked(absl::Duration) override {}
  std::vector<std::thread::id> Take() {
    absl::MutexLock l(&mu_);
    return std::move(threads_);
  }

 private:
  void Record() {
    absl::MutexLock l(&mu_);
    threads_.push_back(std::this_thread::get_id());
  }
  absl::Mutex mu_;
  std::vector<std::thread::id> threads_ ABSL_GUARDED_BY(mu_);
};

// A waited-for request of one part runs on the caller's thread, which reads its own answer (one
// thread hop less per round trip); an async request, or one of several parts, is answered on
// gRPC's threads. The values are the same either way.
TEST(ClusterTest, WaitedRequestsOfOnePartRunOnTheCallersThread) {
  auto cluster = LocalCluster::Start(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string job = "here";
  auto client = Connect(*cluster, job, 0, /*max_part_bytes=*/4096);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(
      client->CreateTable(Table(1, job, v1::SPARSE, 4, 0, v1::OptimizerSpec::SGD, 1.0f)).ok());
  ASSERT_TRUE(JobAdmin(*client).ConfigureJob(Mode(v1::ConsistencySpec::ASYNC), {0}).ok());
  ThreadObserver observer;
  client->set_observer(&observer);
  const std::thread::id me = std::this_thread::get_id();
  const std::vector<uint64_t> keys = {1, 2, 3};
  const std::vector<float> grads(12, 0.5f);
  std::vector<float> here(12), there(12);
  ASSERT_TRUE(client->Pull({TableOp{1, keys, nullptr, here.data()}}).ok());
  ASSERT_TRUE(client->Push({TableOp{1, keys, grads.data(), nullptr}}).ok());
  ASSERT_TRUE(client
                  ->PushPull({TableOp{1, keys, grads.data(), nullptr}},
                             {TableOp{1, keys, nullptr, here.data()}})
                  .ok());
  // Pull, push, and the push-pull's push and pull.
  EXPECT_EQ(observer.Take(), std::vector<std::thread::id>(4, me));

  ASSERT_TRUE(client->PullAsync({TableOp{1, keys, nullptr, there.data()}}).Wait().ok());
  EXPECT_EQ(there, here);
  std::vector<std::thread::id> threads = observer.Take();
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_NE(threads[0], me);

  // 300 keys of dim 4 are 7200 bytes: two parts of at most 4096.
  std::vector<uint64_t> many(300);
  std::iota(many.begin(), many.end(), 0);
  std::vector<float> all(many.size() * 4);
  ASSERT_TRUE(client->Pull({TableOp{1, many, nullptr, all.data()}}).ok());
  EXPECT_EQ(std::vector<float>(all.begin() + 4, all.begin() + 16), here);  // keys 1, 2, 3
  threads = observer.Take();
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_NE(threads[0], me);
  EXPECT_NE(threads[1], me);
  client->set_observer(nullptr);
}

// A waited-for request on the caller's thread that waits in the servers' consistency gate (a
// sync job's other worker never pushes) still ends at CancelInFlight from another thread.
TEST(ClusterTest, AWaitedRequestBlockedOnTheCallersThreadIsCancelled) {
  auto cluster = LocalCluster::Start(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string job = "cancel_here";
  auto client = Connect(*cluster, job, 0);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(
      client->CreateTable(Table(1, job, v1::DENSE, 1, 4, v1::OptimizerSpec::SGD, 1.0f)).ok());
  ASSERT_TRUE(JobAdmin(*client).ConfigureJob(Mode(v1::ConsistencySpec::SYNC), {0, 1}).ok());
  const std::vector<uint64_t> keys = DenseKeys(4);
  const std::vector<float> grads(4, 1.0f);
  std::vector<float> out(4);
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(300));
    client->CancelInFlight();
  });
  const absl::Time start = absl::Now();
  absl::Status s = client->PushPull({TableOp{1, keys, grads.data(), nullptr}},
                                    {TableOp{1, keys, nullptr, out.data()}});
  canceller.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));  // it did wait for worker 1
}

}  // namespace
}  // namespace ps
