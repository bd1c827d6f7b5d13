// Test support: a gtest fixture with one in-process parameter server on a free loopback port,
// started before each test and shut down after it, and clients of it.
#ifndef PS_WORKER_TESTING_SERVER_FIXTURE_H_
#define PS_WORKER_TESTING_SERVER_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/parameter_server.h"
#include "client/rpc_client.h"

namespace ps {
namespace testing {

class InProcessServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ParameterServerOptions options;
    options.listen = "127.0.0.1:0";
    options.max_pull_wait = absl::Seconds(10);
    auto server = ParameterServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  // A client of server_ for `job` as `worker` (requests time out after `rpc_timeout`); null,
  // with a test failure, if it cannot be made.
  std::unique_ptr<RpcClient> Connect(const std::string& job, uint32_t worker = 0,
                                     absl::Duration rpc_timeout = absl::Seconds(20)) {
    RpcClientOptions options;
    options.servers = {absl::StrCat("127.0.0.1:", server_->port())};
    options.job_id = job;
    options.worker_id = worker;
    options.rpc_timeout = rpc_timeout;
    auto client = RpcClient::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  std::unique_ptr<ParameterServer> server_;
};

}  // namespace testing
}  // namespace ps

#endif  // PS_WORKER_TESTING_SERVER_FIXTURE_H_
