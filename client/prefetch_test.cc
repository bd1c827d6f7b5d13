// Prefetch over the wire (Client::PrefetchAsync, PullRequest.prefetch) against real in-process
// parameter servers with a disk tier: a prefetch makes the next pull find its rows in RAM (the
// tables' ram_hits / disk_lookups in TableStats), changes no value, and bad prefetches are
// refused with the servers serving on.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/packed_bytes.h"
#include "common/shard_map.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/client.h"
#include "ps/v1/parameter_server.grpc.pb.h"
#include "server/data_plane.h"
#include "server/parameter_server.h"

// A namespace of its own: the unity build compiles test files together.
namespace ps::prefetch_test {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kDim = 4;
constexpr uint64_t kCap = 40;  // rows in RAM per server

// Two in-process servers (slot s on server s % 2), each with a disk tier of its own.
class PrefetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                        absl::StrCat("prefetch_test_", getpid(), "_", i);
      std::filesystem::remove_all(dir);
      dirs_.push_back(dir);
      ParameterServerOptions options;
      options.listen = "127.0.0.1:0";
      options.server_index = i;
      options.num_servers = 2;
      options.max_pull_wait = absl::Seconds(10);
      options.tier_dir = dir.string();
      auto server = ParameterServer::Start(options);
      ASSERT_TRUE(server.ok()) << server.status();
      addresses_.push_back(absl::StrCat("127.0.0.1:", (*server)->port()));
      stubs_.push_back(v1::ParameterServer::NewStub(
          grpc::CreateChannel(addresses_.back(), grpc::InsecureChannelCredentials())));
      servers_.push_back(std::move(*server));
    }
  }
  void TearDown() override {
    for (auto& s : servers_) {
      if (s != nullptr) s->Shutdown();
    }
    servers_.clear();
    for (const auto& d : dirs_) std::filesystem::remove_all(d);
  }

  std::unique_ptr<Client> Connect(const std::string& job) {
    ClientOptions o;
    o.servers = addresses_;
    o.job_id = job;
    o.rpc_timeout = absl::Seconds(20);
    auto client = Client::Connect(std::move(o));
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  static TableConfig Emb(bool tiered) {
    TableConfig c;
    c.name = "emb";
    c.kind = TableKind::kSparse;
    c.dim = kDim;
    c.initializer = Initializer::Uniform(-1.0f, 1.0f, 7);
    c.optimizer = Optimizer::Sgd(0.5f);
    if (tiered) {
      c.eviction.max_rows = kCap;
      c.disk_tier = true;
    }
    return c;
  }

  // The table's figures summed over both servers.
  v1::TableStats Stats(uint32_t table_id) {
    v1::TableStats sum;
    for (auto& stub : stubs_) {
      grpc::ClientContext ctx;
      v1::DescribeTableRequest req;
      req.set_table_id(table_id);
      v1::DescribeTableResponse resp;
      grpc::Status s = stub->DescribeTable(&ctx, req, &resp);
      EXPECT_TRUE(s.ok()) << s.error_message();
      sum.set_ram_hits(sum.ram_hits() + resp.stats().ram_hits());
      sum.set_disk_lookups(sum.disk_lookups() + resp.stats().disk_lookups());
      sum.set_disk_reads(sum.disk_reads() + resp.stats().disk_reads());
      sum.set_disk_rows(sum.disk_rows() + resp.stats().disk_rows());
    }
    return sum;
  }

  // A raw prefetch of `keys` of table `table_id` by job `job` to server `server`.
  grpc::Status RawPrefetch(int server, const std::string& job, uint32_t table_id,
                           const std::vector<uint64_t>& keys) {
    v1::PullRequest req;
    req.set_job_id(job);
    req.set_shard_epoch(1);
    req.set_prefetch(true);
    v1::KeyBlock* block = req.add_blocks();
    block->set_table_id(table_id);
    AppendKeys(keys, block->mutable_keys());
    v1::PullResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    return stubs_[server]->Pull(&ctx, req, &resp);
  }

  // Pushes and pulls every key of `keys` a few times (most rows of a capped table end on disk).
  static void Train(Client& client, const Table& t, const std::vector<uint64_t>& keys) {
    std::vector<float> grads(keys.size() * kDim);
    std::iota(grads.begin(), grads.end(), -100.0f);
    for (float& g : grads) g *= 0.01f;
    std::vector<float> out(keys.size() * kDim);
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(client.Pull(t, keys, absl::MakeSpan(out)).ok());
      ASSERT_TRUE(client.Push(t, keys, grads).ok());
    }
  }

  std::vector<std::filesystem::path> dirs_;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<v1::ParameterServer::Stub>> stubs_;
  std::vector<std::unique_ptr<ParameterServer>> servers_;
};

std::vector<uint64_t> Range(uint64_t from, uint64_t n) {
  std::vector<uint64_t> keys(n);
  std::iota(keys.begin(), keys.end(), from);
  return keys;
}

TEST_F(PrefetchTest, APrefetchedBatchIsPulledFromRamWithTheSameValues) {
  auto tiered_client = Connect("tiered");
  auto plain_client = Connect("plain");
  ASSERT_NE(tiered_client, nullptr);
  ASSERT_NE(plain_client, nullptr);
  auto tiered = tiered_client->CreateTable(Emb(true));
  auto plain = plain_client->CreateTable(Emb(false));
  ASSERT_TRUE(tiered.ok()) << tiered.status();
  ASSERT_TRUE(plain.ok()) << plain.status();
  const std::vector<uint64_t> all = Range(1000, 400);  // 10x the RAM cap of both servers
  Train(*tiered_client, *tiered, all);
  Train(*plain_client, *plain, all);
  ASSERT_GT(Stats(tiered->id).disk_rows(), 0u);

  // The first keys were trained first: by now their rows are on disk. Each key is given twice
  // (a prefetch reads it once).
  std::vector<uint64_t> batch = Range(1000, 24);
  std::vector<uint64_t> doubled = batch;
  doubled.insert(doubled.end(), batch.begin(), batch.end());
  const v1::TableStats before = Stats(tiered->id);
  const absl::Status fetched = tiered_client->PrefetchAsync(*tiered, doubled).Wait();
  ASSERT_TRUE(fetched.ok()) << fetched;
  const v1::TableStats prefetched = Stats(tiered->id);
  EXPECT_GT(prefetched.disk_reads(), before.disk_reads());  // the prefetch read them from disk

  // Other keys churn through RAM meanwhile (2.5x both servers' caps): the prefetched rows stay.
  std::vector<float> churn(120 * kDim);
  ASSERT_TRUE(tiered_client->Pull(*tiered, Range(1200, 120), absl::MakeSpan(churn)).ok());
  ASSERT_TRUE(
      tiered_client->Pull(*tiered, Range(1320, 80), absl::MakeSpan(churn).first(80 * kDim)).ok());
  const v1::TableStats churned = Stats(tiered->id);
  ASSERT_GT(churned.disk_reads(), prefetched.disk_reads());

  std::vector<float> got(batch.size() * kDim), want(batch.size() * kDim);
  ASSERT_TRUE(tiered_client->Pull(*tiered, batch, absl::MakeSpan(got)).ok());
  const v1::TableStats pulled = Stats(tiered->id);
  // The pull found every row in RAM: no disk lookup of its own.
  EXPECT_EQ(pulled.ram_hits() - churned.ram_hits(), batch.size());
  EXPECT_EQ(pulled.disk_lookups(), churned.disk_lookups());
  EXPECT_EQ(pulled.disk_reads(), churned.disk_reads());
  // And the values are the uncapped table's (which never had a prefetch).
  ASSERT_TRUE(plain_client->Pull(*plain, batch, absl::MakeSpan(want)).ok());
  EXPECT_EQ(got, want);

  // Without a prefetch, the same kind of batch is read from disk by the pull itself.
  const std::vector<uint64_t> cold = Range(1100, 24);
  const v1::TableStats cold_before = Stats(tiered->id);
  ASSERT_TRUE(tiered_client->Pull(*tiered, cold, absl::MakeSpan(got)).ok());
  EXPECT_GT(Stats(tiered->id).disk_lookups(), cold_before.disk_lookups());
  ASSERT_TRUE(plain_client->Pull(*plain, cold, absl::MakeSpan(want)).ok());
  EXPECT_EQ(got, want);

  // The Session's form is the client's; a prefetch through the synchronous call, then a push
  // and pull: the same values as the uncapped table still.
  ASSERT_TRUE(tiered_client->Prefetch(*tiered, Range(1200, 30)).ok());
  Train(*tiered_client, *tiered, Range(1200, 30));
  Train(*plain_client, *plain, Range(1200, 30));
  std::vector<float> all_got(all.size() * kDim), all_want(all.size() * kDim);
  ASSERT_TRUE(tiered_client->Pull(*tiered, all, absl::MakeSpan(all_got)).ok());
  ASSERT_TRUE(plain_client->Pull(*plain, all, absl::MakeSpan(all_want)).ok());
  EXPECT_EQ(all_got, all_want);
}

TEST_F(PrefetchTest, TablesWithoutADiskTierTakeAPrefetchAsANoOp) {
  auto client = Connect("job");
  ASSERT_NE(client, nullptr);
  auto sparse = client->CreateTable(Emb(false));
  ASSERT_TRUE(sparse.ok()) << sparse.status();
  TableConfig d;
  d.name = "dense";
  d.kind = TableKind::kDense;
  d.dim = 2;
  d.num_rows = 10;
  auto dense = client->CreateTable(d);
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_TRUE(client->Prefetch(*sparse, Range(0, 100)).ok());
  EXPECT_TRUE(client->Prefetch(*dense, Range(0, 10)).ok());
  // Nothing was created by the prefetch: the rows come from the initializer at the pull.
  std::vector<float> out(10 * 2);
  EXPECT_TRUE(client->Pull(*dense, Range(0, 10), absl::MakeSpan(out)).ok());
  // A dense key out of range is refused as a pull's would be.
  absl::Status s = client->Prefetch(*dense, Range(5, 10));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("out of range"));
  // An empty prefetch is done at once.
  EXPECT_TRUE(client->Prefetch(*sparse, {}).ok());
}

TEST_F(PrefetchTest, BadPrefetchesAreRefusedAndTheServersServeOn) {
  auto client = Connect("owner");
  auto other = Connect("other");
  ASSERT_NE(client, nullptr);
  ASSERT_NE(other, nullptr);
  auto t = client->CreateTable(Emb(true));
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<uint64_t> keys = Range(0, 200);
  Train(*client, *t, keys);

  // Another job's table: the client of job "other" is refused (the table is the owner's).
  absl::Status s = other->Prefetch(*t, Range(0, 10));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("belongs to job 'owner'"));
  // The same on the wire, and an unknown table.
  std::vector<uint64_t> on_server[2];
  ShardMap map = ShardMap::RoundRobin(addresses_);
  for (uint64_t k = 0; on_server[0].empty() || on_server[1].empty(); ++k) {
    on_server[map.OwnerOf(t->id, k)].push_back(k);
  }
  grpc::Status g = RawPrefetch(0, "other", t->id, on_server[0]);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << g.error_message();
  g = RawPrefetch(0, "owner", 987654, on_server[0]);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << g.error_message();
  EXPECT_THAT(g.error_message(), HasSubstr("unknown table id 987654"));
  // Too many keys in one request (the client cuts its requests below the cap).
  std::vector<uint64_t> many(DataPlane::kMaxPrefetchKeys + 1, on_server[0][0]);
  g = RawPrefetch(0, "owner", t->id, many);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << g.error_message();
  EXPECT_THAT(g.error_message(), HasSubstr("at most 1048576"));
  // A key of a slot the server does not own.
  g = RawPrefetch(0, "owner", t->id, on_server[1]);
  EXPECT_NE(g.error_code(), grpc::StatusCode::OK);
  // A well-formed raw prefetch answers an empty PullResponse.
  EXPECT_TRUE(RawPrefetch(0, "owner", t->id, on_server[0]).ok());

  // The servers serve on, the rows intact: a prefetch of a large batch (cut into parts) and a
  // pull of every key.
  EXPECT_TRUE(client->Prefetch(*t, Range(0, 100000)).ok());
  std::vector<float> out(keys.size() * kDim);
  EXPECT_TRUE(client->Pull(*t, keys, absl::MakeSpan(out)).ok());
}

TEST(PrefetchPinTest, APinBoundOutsideASecondToAnHourIsRefused) {
  for (absl::Duration pin : {absl::ZeroDuration(), absl::Milliseconds(500), absl::Hours(2)}) {
    ParameterServerOptions options;
    options.listen = "127.0.0.1:0";
    options.prefetch_pin = pin;
    auto server = ParameterServer::Start(options);
    ASSERT_FALSE(server.ok());
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(server.status().message(), HasSubstr("--prefetch_pin"));
  }
}

}  // namespace
}  // namespace ps::prefetch_test
