// The public client library (<ps/client.h>) against real parameter servers, in process.
#include "ps/client.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/shard_map.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/parameter_server.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

std::vector<uint64_t> DenseKeysFor(uint64_t n) {
  std::vector<uint64_t> keys(n);
  std::iota(keys.begin(), keys.end(), 0);
  return keys;
}

// Two in-process servers (slot s on server s % 2), started for each test.
class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      ParameterServerOptions options;
      options.listen = "127.0.0.1:0";
      options.server_index = i;
      options.num_servers = 2;
      options.max_pull_wait = absl::Seconds(10);
      auto server = ParameterServer::Start(options);
      ASSERT_TRUE(server.ok()) << server.status();
      addresses_.push_back(absl::StrCat("127.0.0.1:", (*server)->port()));
      servers_.push_back(std::move(*server));
    }
  }
  void TearDown() override {
    for (auto& s : servers_) {
      if (s != nullptr) s->Shutdown();
    }
  }

  ClientOptions Options(const std::string& job = "job") const {
    ClientOptions o;
    o.servers = addresses_;
    o.job_id = job;
    o.rpc_timeout = absl::Seconds(20);
    return o;
  }

  std::unique_ptr<Client> Connect(ClientOptions options) {
    auto client = Client::Connect(std::move(options));
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  static TableConfig Sparse(const std::string& name, uint32_t dim, float lr = 0.5f) {
    TableConfig c;
    c.name = name;
    c.kind = TableKind::kSparse;
    c.dim = dim;
    c.optimizer = Optimizer::Sgd(lr);
    return c;
  }
  static TableConfig Dense(const std::string& name, uint64_t rows, uint32_t dim) {
    TableConfig c = Sparse(name, dim);
    c.kind = TableKind::kDense;
    c.num_rows = rows;
    return c;
  }

  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<ParameterServer>> servers_;
};

TEST_F(ClientTest, PushThenPullAppliesTheServersOptimizerToSummedGradients) {
  auto client = Connect(Options());
  ASSERT_NE(client, nullptr);
  TableConfig config = Sparse("emb", 3, /*lr=*/0.5f);
  config.initializer = Initializer::Constant(1.0f);
  auto table = client->CreateTable(config);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->id, TableIdFor("job", "emb"));
  EXPECT_EQ(table->dim, 3u);

  // Keys on both servers; key 7 twice: its gradients are summed.
  const std::vector<uint64_t> keys = {7, 8, 7, 1000001};
  std::vector<float> grads(keys.size() * 3);
  std::iota(grads.begin(), grads.end(), 1.0f);
  absl::Status pushed = client->Push(*table, keys, grads);
  ASSERT_TRUE(pushed.ok()) << pushed;

  std::vector<float> out(keys.size() * 3);
  ASSERT_TRUE(client->Pull(*table, keys, absl::MakeSpan(out)).ok());
  for (int d = 0; d < 3; ++d) {
    const float g7 = grads[0 * 3 + d] + grads[2 * 3 + d];
    EXPECT_FLOAT_EQ(out[0 * 3 + d], 1.0f - 0.5f * g7);
    EXPECT_FLOAT_EQ(out[2 * 3 + d], 1.0f - 0.5f * g7);
    EXPECT_FLOAT_EQ(out[1 * 3 + d], 1.0f - 0.5f * grads[1 * 3 + d]);
    EXPECT_FLOAT_EQ(out[3 * 3 + d], 1.0f - 0.5f * grads[3 * 3 + d]);
  }
}

TEST_F(ClientTest, AsyncRequestsOverlapAndPushPullAdvancesTheClock) {
  auto client = Connect(Options());
  ASSERT_NE(client, nullptr);
  auto w = client->CreateTable(Dense("w", 100, 4));
  auto b = client->CreateTable(Dense("b", 1, 4));
  ASSERT_TRUE(w.ok() && b.ok());
  std::vector<uint64_t> keys(100);
  std::iota(keys.begin(), keys.end(), 0);
  std::vector<float> w_out(400), b_out(4);
  const std::vector<uint64_t> b_key = {0};
  Pending p1 = client->PullAsync(*w, keys, absl::MakeSpan(w_out));
  Pending p2 = client->PullAsync(*b, b_key, absl::MakeSpan(b_out));
  ASSERT_TRUE(p1.Wait().ok());
  ASSERT_TRUE(p2.Wait().ok());
  EXPECT_TRUE(p1.Done());
  EXPECT_TRUE(p1.Wait().ok());  // again: the same answer

  std::vector<float> grads(400, 1.0f);
  EXPECT_EQ(client->clock(), 0);
  ASSERT_TRUE(
      client->PushPull({PushOp{*w, keys, grads}}, {PullOp{*w, keys, absl::MakeSpan(w_out)}}).ok());
  EXPECT_EQ(client->clock(), 1);
  for (float v : w_out) EXPECT_FLOAT_EQ(v, -0.5f);
  ASSERT_TRUE(client->Clock().ok());
  EXPECT_EQ(client->clock(), 2);
}

TEST_F(ClientTest, TablesAreFoundByNameAndIdAndCreationIsIdempotent) {
  auto client = Connect(Options());
  ASSERT_NE(client, nullptr);
  auto created = client->CreateTable(Sparse("a/emb", 8));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(client->CreateTable(Sparse("a/emb", 8)).ok());

  // Another client of the same job sees it; one of another job does not.
  auto other = Connect(Options());
  auto by_name = other->OpenTable("a/emb");
  ASSERT_TRUE(by_name.ok()) << by_name.status();
  EXPECT_EQ(by_name->id, created->id);
  EXPECT_EQ(by_name->dim, 8u);
  EXPECT_EQ(by_name->kind, TableKind::kSparse);
  auto by_id = other->OpenTableById(created->id);
  ASSERT_TRUE(by_id.ok());
  EXPECT_EQ(by_id->name, "a/emb");

  auto stranger = Connect(Options("another-job"));
  auto missing = stranger->OpenTable("a/emb");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("no table named 'a/emb'"));
  EXPECT_EQ(other->OpenTableById(12345).status().code(), absl::StatusCode::kNotFound);

  // Same id, another config: refused by the servers, with their message.
  auto clash = client->CreateTable(Sparse("a/emb", 9));
  EXPECT_FALSE(clash.ok());
  EXPECT_THAT(std::string(clash.status().message()), HasSubstr("creating table 'a/emb'"));
}

TEST_F(ClientTest, BadArgumentsAreRefusedBeforeTheWireAndRowsStayIntact) {
  auto client = Connect(Options());
  ASSERT_NE(client, nullptr);
  TableConfig dense = Dense("d", 10, 2);
  dense.initializer = Initializer::Constant(3.0f);
  auto d = client->CreateTable(dense);
  auto s = client->CreateTable(Sparse("s", 2));
  ASSERT_TRUE(d.ok() && s.ok());
  const std::vector<uint64_t> keys = {1, 2};
  std::vector<float> two_rows(4, 1.0f), short_buf(3);

  // Wrong buffer sizes.
  absl::Status st = client->Push(*d, keys, absl::MakeConstSpan(two_rows.data(), 3));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("2 keys of dim 2 need 4 floats"));
  st = client->Pull(*d, keys, absl::MakeSpan(short_buf));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);

  // A dense key out of range.
  const std::vector<uint64_t> far = {1, 10};
  st = client->Push(*d, far, two_rows);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("key 10 is out of range for a dense table of 10"));

  // A Table that does not match the servers' (wrong dim), or does not exist.
  Table lying = *d;
  lying.dim = 1;
  st = client->Pull(lying, keys, absl::MakeSpan(two_rows.data(), 2));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("of dim 2 on the servers"));
  Table ghost = *s;
  ghost.id = 424242;
  EXPECT_EQ(client->Pull(ghost, keys, absl::MakeSpan(two_rows)).code(),
            absl::StatusCode::kNotFound);

  // Bad table configs.
  EXPECT_EQ(client->CreateTable(Sparse("", 2)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->CreateTable(Sparse("no spaces", 2)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->CreateTable(Sparse("zero", 0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->CreateTable(Dense("norows", 0, 2)).status().code(),
            absl::StatusCode::kInvalidArgument);

  // NaN gradients: refused before anything is sent.
  std::vector<float> nan(4, std::nanf(""));
  st = client->Push(*d, keys, nan);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("holds a NaN or an Inf"));

  // Nothing above changed a row.
  std::vector<float> out(4);
  ASSERT_TRUE(client->Pull(*d, keys, absl::MakeSpan(out)).ok());
  for (float v : out) EXPECT_FLOAT_EQ(v, 3.0f);
}

TEST_F(ClientTest, APushWithOneNonFiniteRowChangesNoRowOnAnyServer) {
  auto client = Connect(Options());
  ASSERT_NE(client, nullptr);
  TableConfig config = Dense("d", 64, 4);
  config.initializer = Initializer::Constant(2.0f);
  auto d = client->CreateTable(config);
  ASSERT_TRUE(d.ok());
  std::vector<uint64_t> keys(64);
  std::iota(keys.begin(), keys.end(), 0);  // rows on both servers
  std::vector<float> grads(64 * 4, 1.0f);
  grads[37 * 4 + 2] = std::numeric_limits<float>::infinity();
  absl::Status st = client->Push(*d, keys, grads);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("key 37 holds a NaN or an Inf"));
  st = client->PushPull({PushOp{*d, keys, grads}}, {});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->clock(), 0) << "a refused PushPull advanced the clock";
  std::vector<float> out(64 * 4);
  ASSERT_TRUE(client->Pull(*d, keys, absl::MakeSpan(out)).ok());
  for (float v : out) ASSERT_FLOAT_EQ(v, 2.0f);
}

TEST_F(ClientTest, AClosedClientRefusesEveryCall) {
  auto client = Connect(Options());
  ASSERT_NE(client, nullptr);
  auto t = client->CreateTable(Sparse("t", 2));
  ASSERT_TRUE(t.ok());
  client->Close();
  client->Close();  // idempotent
  EXPECT_TRUE(client->closed());
  const std::vector<uint64_t> keys = {1};
  std::vector<float> buf(2);
  absl::Status st = client->Pull(*t, keys, absl::MakeSpan(buf));
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()), HasSubstr("the client is closed"));
  EXPECT_EQ(client->Push(*t, keys, buf).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client->Clock().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client->CreateTable(Sparse("u", 2)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client->OpenTable("t").status().code(), absl::StatusCode::kFailedPrecondition);
}

// Options whose calls give up after 2 s, with no retry.
ClientOptions Impatient(ClientOptions o) {
  o.rpc_timeout = absl::Seconds(2);
  o.max_retries = 0;
  return o;
}

// What a call to a stopped server ends with.
bool ServerGone(const absl::Status& st) {
  return st.code() == absl::StatusCode::kUnavailable ||
         st.code() == absl::StatusCode::kDeadlineExceeded;
}

TEST_F(ClientTest, AServerThatWentAwayIsAnErrorNotAHang) {
  auto client = Connect(Impatient(Options()));
  ASSERT_NE(client, nullptr);
  auto t = client->CreateTable(Sparse("t", 2));
  ASSERT_TRUE(t.ok());
  servers_[1]->Shutdown();
  servers_[1].reset();
  std::vector<uint64_t> keys(64);
  std::iota(keys.begin(), keys.end(), 0);  // some on each server
  std::vector<float> buf(128);
  absl::Status st = client->Pull(*t, keys, absl::MakeSpan(buf));
  EXPECT_TRUE(ServerGone(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr(addresses_[1]));
}

// The same with a request of one part, which runs on the caller's thread: an error naming the
// server once the deadline passes, not a hang.
TEST_F(ClientTest, AOnePartRequestToAServerThatWentAwayIsAnErrorNotAHang) {
  auto client = Connect(Impatient(Options()));
  ASSERT_NE(client, nullptr);
  auto t = client->CreateTable(Sparse("t", 2));
  ASSERT_TRUE(t.ok());
  uint64_t key = 0;
  while (SlotOf(t->id, key) % 2 != 1) ++key;  // a key of server 1
  servers_[1]->Shutdown();
  servers_[1].reset();
  const std::vector<uint64_t> keys = {key};
  std::vector<float> buf(2);
  const absl::Time start = absl::Now();
  absl::Status st = client->Pull(*t, keys, absl::MakeSpan(buf));
  EXPECT_TRUE(ServerGone(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr(addresses_[1]));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  st = client->Push(*t, keys, buf);
  EXPECT_TRUE(ServerGone(st)) << st;
  // Server 0 still answers a one-part request of its own keys.
  uint64_t other = 0;
  while (SlotOf(t->id, other) % 2 != 0) ++other;
  EXPECT_TRUE(client->Pull(*t, {other}, absl::MakeSpan(buf)).ok());
}

TEST_F(ClientTest, OptionsAreValidated) {
  ClientOptions o = Options();
  o.servers.clear();
  EXPECT_EQ(Client::Connect(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options();
  o.num_workers = 2;
  o.worker_id = 2;
  auto s = Client::Connect(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("worker_id 2 is not in 0..1"));
  o = Options("bad job\n");
  EXPECT_EQ(Client::Connect(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options();
  o.rpc_timeout = absl::ZeroDuration();
  EXPECT_EQ(Client::Connect(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, SyncWorkersSeeTheSumOfAClocksGradients) {
  ClientOptions o = Options("syncjob");
  o.consistency = Consistency::kSync;
  o.num_workers = 2;
  auto w0 = Connect(o);
  o.worker_id = 1;
  auto w1 = Connect(o);
  ASSERT_TRUE(w0 != nullptr && w1 != nullptr);
  auto t = w0->CreateTable(Dense("w", 4, 1));
  ASSERT_TRUE(t.ok());
  std::vector<uint64_t> keys = {0, 1, 2, 3};
  std::vector<float> g0(4, 1.0f), g1(4, 3.0f), out0(4), out1(4);
  Pending a = w0->PushPullAsync({PushOp{*t, keys, g0}}, {PullOp{*t, keys, absl::MakeSpan(out0)}});
  Pending b = w1->PushPullAsync({PushOp{*t, keys, g1}}, {PullOp{*t, keys, absl::MakeSpan(out1)}});
  ASSERT_TRUE(a.Wait().ok());
  ASSERT_TRUE(b.Wait().ok());
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(out0[i], -0.5f * 4.0f);  // sgd 0.5 on the sum 1 + 3
    EXPECT_FLOAT_EQ(out1[i], out0[i]);
  }
}

TEST_F(ClientTest, AdmissionKeepsAKeyOutUntilItsSecondPushAndStorageIsPassedOn) {
  auto client = Connect(Options());
  ASSERT_NE(client, nullptr);
  TableConfig config = Sparse("adm", 2, /*lr=*/0.5f);
  config.initializer = Initializer::Constant(1.0f);
  config.storage = Storage::kFp16;
  config.admission.min_count = 2;
  config.eviction.max_rows = 1000;
  auto table = client->CreateTable(config);
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<uint64_t> key = {42};
  const std::vector<float> grad = {1.0f, 1.0f};
  std::vector<float> out(2);
  auto rows = [&] {
    uint64_t n = 0;
    for (auto& s : servers_) n += s->store()->NumRows(table->id);
    return n;
  };
  // The first push is counted and dropped: the key pulls its initializer's values, no row.
  ASSERT_TRUE(client->Push(*table, key, grad).ok());
  ASSERT_TRUE(client->Pull(*table, key, absl::MakeSpan(out)).ok());
  EXPECT_THAT(out, ::testing::ElementsAre(1.0f, 1.0f));
  EXPECT_EQ(rows(), 0u);
  // The second admits it.
  ASSERT_TRUE(client->Push(*table, key, grad).ok());
  ASSERT_TRUE(client->Pull(*table, key, absl::MakeSpan(out)).ok());
  EXPECT_EQ(rows(), 1u);
  uint64_t rejected = 0, admitted = 0;
  for (auto& s : servers_) {
    auto stats = s->store()->Stats(table->id);
    ASSERT_TRUE(stats.ok()) << stats.status();
    rejected += stats->rejected();
    admitted += stats->admitted();
  }
  EXPECT_EQ(rejected, 1u);
  EXPECT_EQ(admitted, 1u);
  auto described = servers_[0]->store()->Describe(table->id);
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_EQ(described->spec().storage(), v1::TableSpec::FP16);
  EXPECT_EQ(described->spec().eviction().max_rows(), 1000u);
  EXPECT_FALSE(described->spec().admission().has_probability());
}

TEST_F(ClientTest, BadAdmissionOrEvictionIsRefusedNamingTheTableAndField) {
  auto client = Connect(Options());
  ASSERT_NE(client, nullptr);
  TableConfig config = Sparse("bad", 2);
  config.admission.probability = 1.5f;
  auto table = client->CreateTable(config);
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(table.status().message(), HasSubstr("'bad'"));
  EXPECT_THAT(table.status().message(), HasSubstr("admission.probability"));
  config = Sparse("bad", 2);
  config.admission.min_count = 300;
  EXPECT_THAT(client->CreateTable(config).status().message(), HasSubstr("admission.min_count"));
  config = Sparse("bad", 2);
  config.eviction.ttl_seconds = -1;
  EXPECT_THAT(client->CreateTable(config).status().message(), HasSubstr("eviction.ttl_seconds"));
  config = Dense("dense", 4, 2);
  config.eviction.max_rows = 10;
  EXPECT_FALSE(client->CreateTable(config).ok());
}

TEST_F(ClientTest, TheSpecStringCarriesAnySettingToTheServers) {
  auto client = Connect(Options());
  ASSERT_NE(client, nullptr);
  TableConfig config = Sparse("byspec", 2);
  config.eviction.max_rows = 1000;
  config.spec = "admission { min_count: 3 } eviction { ttl_seconds: 600 } storage: BF16";
  auto table = client->CreateTable(config);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_TRUE(client->CreateTable(config).ok());  // idempotent: the same spec
  for (auto& server : servers_) {
    auto described = server->store()->Describe(table->id);
    ASSERT_TRUE(described.ok()) << described.status();
    EXPECT_EQ(described->spec().storage(), v1::TableSpec::BF16);
    EXPECT_EQ(described->spec().admission().min_count(), 3u);
    EXPECT_EQ(described->spec().eviction().max_rows(), 1000u);
    EXPECT_EQ(described->spec().eviction().ttl_seconds(), 600);
  }
  // What the spec sets is checked as the typed fields are; what it may not set is refused; nothing
  // reaches a server.
  config = Sparse("badspec", 2);
  config.spec = R"({"eviction": {"max_rows": 0}})";
  absl::Status s = client->CreateTable(config).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("table 'badspec': eviction.max_rows = 0"));
  config.spec = "dim: 3";
  EXPECT_THAT(client->CreateTable(config).status().message(), HasSubstr("spec sets dim"));
  config.spec = "evction {}";
  EXPECT_THAT(client->CreateTable(config).status().message(), HasSubstr("evction"));
  EXPECT_EQ(client->OpenTable("badspec").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ClientTest, Fp16TablesPushAndPullHalfPrecision) {
  auto client = Connect(Options());
  ASSERT_NE(client, nullptr);
  TableConfig config = Dense("w", 50, 4);
  config.initializer = Initializer::Constant(1.0f);
  config.optimizer = Optimizer::Sgd(1.0f);
  config.push_codec.codec = Codec::kFp16;
  config.pull_codec.codec = Codec::kFp16;
  auto table = client->CreateTable(config);
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<uint64_t> keys = DenseKeysFor(50);
  std::vector<float> grads(200);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.001f * static_cast<float>(i);
  ASSERT_TRUE(client->Push(*table, keys, grads).ok());
  std::vector<float> out(200);
  ASSERT_TRUE(client->Pull(*table, keys, absl::MakeSpan(out)).ok());
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_NEAR(out[i], 1.0f - grads[i], 1e-3f) << i;  // two fp16 roundings
  }
}

// Error feedback end to end: the same gradient pushed with topk (a quarter of each block) or sign
// for many steps moves every value, and the sum applied stays within one step's residual of the
// sum pushed.
TEST_F(ClientTest, TopkAndSignTablesApplyTheGradientOverStepsWithErrorFeedback) {
  auto client = Connect(Options());
  ASSERT_NE(client, nullptr);
  for (WireCodec codec : {WireCodec{Codec::kTopk, 0.25f}, WireCodec{Codec::kSign, 0}}) {
    TableConfig config = Dense(codec.codec == Codec::kTopk ? "topk" : "sign", 16, 8);
    config.optimizer = Optimizer::Sgd(1.0f);
    config.push_codec = codec;
    auto table = client->CreateTable(config);
    ASSERT_TRUE(table.ok()) << table.status();
    const std::vector<uint64_t> keys = DenseKeysFor(16);
    std::vector<float> grads(128);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
    const int steps = 40;
    for (int s = 0; s < steps; ++s) ASSERT_TRUE(client->Push(*table, keys, grads).ok());
    std::vector<float> out(128);
    ASSERT_TRUE(client->Pull(*table, keys, absl::MakeSpan(out)).ok());
    // Applied: -(steps * g - residual); the residual stays bounded (a few steps' gradients),
    // so the error relative to what was pushed shrinks as the steps add up.
    double err = 0, norm = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      err += std::fabs(out[i] + steps * grads[i]);
      norm += std::fabs(steps * grads[i]);
    }
    std::printf("%s: relative error after %d steps %.4f\n", table->name.c_str(), steps, err / norm);
    EXPECT_LT(err, 0.1 * norm) << table->name;
  }
}

// Sync mode sums the decoded gradients of a clock: with values fp16 holds exactly, the same
// answer as without a codec.
TEST_F(ClientTest, SyncWorkersSeeTheSumOfAClocksFp16Gradients) {
  ClientOptions o = Options("syncfp16");
  o.consistency = Consistency::kSync;
  o.num_workers = 2;
  auto w0 = Connect(o);
  o.worker_id = 1;
  auto w1 = Connect(o);
  ASSERT_TRUE(w0 != nullptr && w1 != nullptr);
  TableConfig config = Dense("w", 4, 1);
  config.push_codec.codec = Codec::kFp16;
  config.pull_codec.codec = Codec::kBf16;
  auto t = w0->CreateTable(config);
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<uint64_t> keys = {0, 1, 2, 3};
  std::vector<float> g0(4, 1.0f), g1(4, 3.0f), out0(4), out1(4);
  Pending a = w0->PushPullAsync({PushOp{*t, keys, g0}}, {PullOp{*t, keys, absl::MakeSpan(out0)}});
  Pending b = w1->PushPullAsync({PushOp{*t, keys, g1}}, {PullOp{*t, keys, absl::MakeSpan(out1)}});
  ASSERT_TRUE(a.Wait().ok());
  ASSERT_TRUE(b.Wait().ok());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out0[i], -0.5f * 4.0f);  // sgd 0.5 on the sum 1 + 3
    EXPECT_EQ(out1[i], out0[i]);
  }
}

// Delta pulls end to end: a table with pull_codec.delta pulls exactly what a plain table
// pulls, through PushPull, plain pulls of subsets in any key order, repeated keys, several parts
// and a second client with nothing held; and its answers carry fewer bytes.
TEST_F(ClientTest, DeltaPullsPullWhatAPlainTablePullsInFewerBytes) {
  ClientOptions options = Options();
  options.max_part_bytes = 4096;  // several parts (blocks) per server
  auto client = Connect(options);
  ASSERT_NE(client, nullptr);
  constexpr uint64_t kRows = 300;
  constexpr uint32_t kDim = 40;
  TableConfig config = Dense("plain", kRows, kDim);
  config.initializer = Initializer::Constant(0.5f);  // (a uniform one depends on the table id)
  config.optimizer = Optimizer::Sgd(1.0f);
  auto plain = client->CreateTable(config);
  ASSERT_TRUE(plain.ok()) << plain.status();
  config.name = "delta";
  config.pull_codec.delta = true;
  auto delta = client->CreateTable(config);
  ASSERT_TRUE(delta.ok()) << delta.status();
  const std::vector<uint64_t> keys = DenseKeysFor(kRows);
  std::vector<float> grads(kRows * kDim), a(kRows * kDim), b(kRows * kDim);
  std::mt19937 rng(7);
  for (int step = 0; step < 20; ++step) {
    std::fill(grads.begin(), grads.end(), 0.0f);
    for (int j = 0; j < 60; ++j) grads[rng() % grads.size()] = 0.01f * static_cast<float>(j + 1);
    ASSERT_TRUE(client->Push(*plain, keys, grads).ok());
    ASSERT_TRUE(
        client->PushPull({PushOp{*delta, keys, grads}}, {PullOp{*delta, keys, absl::MakeSpan(b)}})
            .ok());
    ASSERT_TRUE(client->Pull(*plain, keys, absl::MakeSpan(a)).ok());
    ASSERT_EQ(a, b) << "step " << step;
    // A few rows, in another order and one twice.
    const std::vector<uint64_t> some = {rng() % kRows, 17, rng() % kRows, 17, 299};
    std::vector<float> sa(some.size() * kDim), sb(some.size() * kDim);
    ASSERT_TRUE(client->Pull(*plain, some, absl::MakeSpan(sa)).ok());
    ASSERT_TRUE(client->Pull(*delta, some, absl::MakeSpan(sb)).ok());
    ASSERT_EQ(sa, sb) << "step " << step;
  }
  // Overlapping pulls of the same rows while pushes go on: each answer is a real state, and
  // once the pushes end a pull gives the plain table's values.
  for (int round = 0; round < 5; ++round) {
    std::fill(grads.begin(), grads.end(), 0.0f);
    for (int j = 0; j < 60; ++j) grads[rng() % grads.size()] = 0.02f;
    std::vector<std::vector<float>> outs(4, std::vector<float>(kRows * kDim));
    std::vector<Pending> pulls;
    for (auto& o : outs) pulls.push_back(client->PullAsync(*delta, keys, absl::MakeSpan(o)));
    ASSERT_TRUE(client->Push(*delta, keys, grads).ok());
    ASSERT_TRUE(client->Push(*plain, keys, grads).ok());
    for (Pending& p : pulls) ASSERT_TRUE(p.Wait().ok());
  }
  ASSERT_TRUE(client->Pull(*plain, keys, absl::MakeSpan(a)).ok());
  ASSERT_TRUE(client->Pull(*delta, keys, absl::MakeSpan(b)).ok());
  ASSERT_EQ(a, b);
  // A client that holds nothing pulls every value.
  auto other = Connect(options);
  ASSERT_NE(other, nullptr);
  auto seen = other->OpenTable("delta");
  ASSERT_TRUE(seen.ok()) << seen.status();
  ASSERT_TRUE(other->Pull(*seen, keys, absl::MakeSpan(b)).ok());
  EXPECT_EQ(a, b);
  // The servers answered most of the delta table's pulls with the changes only.
  uint64_t raw = 0, wire = 0, plain_wire = 0;
  for (auto& server : servers_) {
    auto stats = server->store()->Stats(delta->id);
    ASSERT_TRUE(stats.ok()) << stats.status();
    raw += stats->pull_raw_bytes();
    wire += stats->pull_wire_bytes();
    auto p = server->store()->Stats(plain->id);
    ASSERT_TRUE(p.ok());
    plain_wire += p->pull_wire_bytes();  // no codec: not counted
  }
  EXPECT_EQ(plain_wire, 0u);
  EXPECT_GE(raw, 21 * kRows * kDim * sizeof(float));
  EXPECT_LT(wire * 5, raw) << wire << " of " << raw;
}

TEST_F(ClientTest, BadCodecsAreRefusedNamingTheField) {
  auto client = Connect(Options());
  ASSERT_NE(client, nullptr);
  TableConfig config = Dense("bad", 4, 4);
  config.push_codec = WireCodec{Codec::kTopk, 0.0f};
  absl::Status s = client->CreateTable(config).status();
  EXPECT_THAT(s.message(), HasSubstr("push_codec.ratio = 0"));
  config = Sparse("bad", 4);
  config.push_codec = WireCodec{Codec::kSign, 0};
  s = client->CreateTable(config).status();
  EXPECT_THAT(s.message(), HasSubstr("is for DENSE tables"));
  config = Dense("bad", 4, 4);
  config.pull_codec = WireCodec{Codec::kTopk, 0.5f};
  s = client->CreateTable(config).status();
  EXPECT_THAT(s.message(), HasSubstr("pull_codec"));
}

}  // namespace
}  // namespace ps
