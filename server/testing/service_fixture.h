// A ParameterServer in-process on a free loopback port, called through a real stub: the fixture
// of the server's gRPC tests. Tests only.
#ifndef PS_SERVER_TESTING_SERVICE_FIXTURE_H_
#define PS_SERVER_TESTING_SERVICE_FIXTURE_H_

#include <grpcpp/grpcpp.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "ps/v1/parameter_server.grpc.pb.h"
#include "server/parameter_server.h"

namespace ps {
namespace testing {

// The deadline of every call a test makes, so that no test can hang: far beyond what any call
// takes, even on a loaded machine.
inline constexpr absl::Duration kCallDeadline = absl::Seconds(30);

// A call's context that ends at `deadline` from now.
struct CallContext {
  explicit CallContext(absl::Duration deadline = kCallDeadline);
  grpc::ClientContext ctx;
};

// Base of the fixtures that call a real ParameterServer over gRPC: StartServer() brings one up
// (again, after a test shut it down, with other options) and TearDown() shuts it down.
class ServiceFixture : public ::testing::Test {
 protected:
  // Shuts the server down and destroys it: before the derived fixture's members (a registry or a
  // directory it uses) go. A derived TearDown calls it first.
  void TearDown() override;

  // Starts server_ with `options` on a free loopback port (whatever options.listen says) and
  // `registry` (may be null: no metrics; must outlive the server), after shutting down the one
  // running, and connects channel_ (made with `args`) and stub_ to it. A fatal failure if it
  // does not start: call it under ASSERT_NO_FATAL_FAILURE.
  void StartServer(ParameterServerOptions options, prometheus::Registry* registry = nullptr,
                   const grpc::ChannelArguments& args = grpc::ChannelArguments());

  // Calls every fixture makes, through stub_.
  grpc::Status CreateTable(const v1::TableSpec& spec);
  grpc::Status Clock(const std::string& job, uint32_t worker, int64_t clock);

  std::unique_ptr<ParameterServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ParameterServer::Stub> stub_;
};

}  // namespace testing
}  // namespace ps

#endif  // PS_SERVER_TESTING_SERVICE_FIXTURE_H_
