#include "server/testing/service_fixture.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ps {
namespace testing {

CallContext::CallContext(absl::Duration deadline) {
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
}

void ServiceFixture::TearDown() {
  if (server_ != nullptr) server_->Shutdown();
  stub_.reset();
  channel_.reset();
  server_.reset();
}

void ServiceFixture::StartServer(ParameterServerOptions options, prometheus::Registry* registry,
                                 const grpc::ChannelArguments& args) {
  if (server_ != nullptr) server_->Shutdown();
  stub_.reset();
  channel_.reset();
  options.listen = "127.0.0.1:0";
  auto server = ParameterServer::Start(options, registry);
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = std::move(*server);
  channel_ = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                       grpc::InsecureChannelCredentials(), args);
  stub_ = v1::ParameterServer::NewStub(channel_);
}

grpc::Status ServiceFixture::CreateTable(const v1::TableSpec& spec) {
  v1::CreateTableRequest req;
  *req.mutable_spec() = spec;
  v1::CreateTableResponse resp;
  CallContext c;
  return stub_->CreateTable(&c.ctx, req, &resp);
}

grpc::Status ServiceFixture::Clock(const std::string& job, uint32_t worker, int64_t clock) {
  v1::ClockRequest req;
  req.set_job_id(job);
  req.set_worker_id(worker);
  req.set_clock(clock);
  v1::ClockResponse resp;
  CallContext c;
  return stub_->Clock(&c.ctx, req, &resp);
}

}  // namespace testing
}  // namespace ps
