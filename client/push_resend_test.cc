// Failover from the client's side, on two real servers in process: a sync job whose slots each
// have a backup on the other server loses server B in a step; the push of that step is re-sent
// under the new map (A owns every slot) for B's slots only, and A applies it once.
#include "client/push_resend.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/job_admin.h"
#include "common/shard_map.h"
#include "gtest/gtest.h"
#include "server/parameter_server.h"

// A namespace of its own: the unity build compiles test files together.
namespace ps::push_resend_test {
namespace {

constexpr char kJob[] = "resend";
constexpr uint32_t kTable = 1;
constexpr uint64_t kRows = 64;
constexpr int kDim = 2;

// `rpc_timeout`: how long the step to the dead server waits before it fails.
std::unique_ptr<RpcClient> Connect(std::vector<std::string> servers, uint64_t epoch,
                                   absl::Duration rpc_timeout = absl::Seconds(20)) {
  RpcClientOptions options;
  options.servers = std::move(servers);
  options.shard_epoch = epoch;
  options.job_id = kJob;
  options.max_retries = 0;  // a dead server fails the step at once
  options.rpc_timeout = rpc_timeout;
  auto client = RpcClient::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

v1::TableSpec Table() {
  v1::TableSpec spec;
  spec.set_table_id(kTable);
  spec.set_name("w");
  spec.set_job_id(kJob);
  spec.set_kind(v1::DENSE);
  spec.set_dim(kDim);
  spec.set_num_rows(kRows);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  return spec;  // initial values 0
}

TEST(PushResendTest, TheFailedStepsPushIsResentForTheMovedSlotsAndAppliedOnce) {
  std::vector<std::unique_ptr<ParameterServer>> servers;
  std::vector<std::string> addresses;
  for (int i = 0; i < 2; ++i) {
    ParameterServerOptions options;
    options.listen = "127.0.0.1:0";
    auto server = ParameterServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    addresses.push_back(absl::StrCat("127.0.0.1:", (*server)->port()));
    servers.push_back(std::move(*server));
  }
  v1::ConsistencySpec sync;
  sync.set_mode(v1::ConsistencySpec::SYNC);
  std::vector<uint32_t> backups(kNumSlots);
  for (uint32_t s = 0; s < kNumSlots; ++s) backups[s] = (s + 1) % 2;  // the other server
  std::unique_ptr<RpcClient> before = Connect(addresses, 1, absl::Seconds(2));
  ASSERT_NE(before, nullptr);
  ASSERT_TRUE(JobAdmin(*before).WithSlotBackups(backups).ConfigureJob(sync, {0}, 1).ok());
  ASSERT_TRUE(before->CreateTable(Table()).ok());

  const std::vector<uint64_t> keys = DenseKeys(kRows);
  std::vector<float> g0(kRows * kDim, 1.0f), g1(kRows * kDim), values(kRows * kDim);
  for (size_t i = 0; i < g1.size(); ++i) g1[i] = 0.25f * static_cast<float>(i % 5);
  const std::vector<TableOp> pull = {TableOp{kTable, keys, nullptr, values.data()}};
  // Clock 0 completes on both servers (and on their backups).
  ASSERT_TRUE(before->PushPull({TableOp{kTable, keys, g0.data(), nullptr}}, pull).ok());
  EXPECT_FALSE(before->FailedPushPull().has_value());
  // Server B dies; the step of clock 1 fails (A applies its own part).
  servers[1]->Shutdown();
  servers[1].reset();
  EXPECT_FALSE(before->PushPull({TableOp{kTable, keys, g1.data(), nullptr}}, pull).ok());
  std::optional<InFlightPush> failed = CopyFailedPushPull(*before);
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->clock, 1);
  ASSERT_EQ(failed->tables.size(), 1u);
  EXPECT_EQ(failed->tables[0].grads, g1);

  // The failover's map: A owns every slot (B's from its backup copies, as of clock 0).
  std::unique_ptr<RpcClient> after = Connect({addresses[0]}, 2);
  ASSERT_NE(after, nullptr);
  int64_t clock = -1;
  ASSERT_TRUE(JobAdmin(*after).ConfigureJob(sync, {0}, 1, &clock, before->clock()).ok());
  ASSERT_TRUE(after->CreateTable(Table()).ok());
  ASSERT_TRUE(ResendMovedSlots(*after, *failed).ok());
  ASSERT_TRUE(ResendMovedSlots(*after, *failed).ok());  // again: nothing is owed any more
  after->SetClock(2);
  ASSERT_TRUE(after->Pull(pull).ok());
  // Every row took both clocks once: 0 - g0 - g1 (SGD, learning rate 1).
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(values[i], -g0[i] - g1[i]) << "value " << i << " (key " << i / kDim << ")";
  }
  servers[0]->Shutdown();
}

}  // namespace
}  // namespace ps::push_resend_test
