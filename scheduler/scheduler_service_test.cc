// The Scheduler gRPC service end to end: a real server in-process on a free port, called
// through a real stub.
#include "scheduler/scheduler_service.h"

#include <grpcpp/grpcpp.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ps/v1/scheduler.grpc.pb.h"
#include "scheduler/internal/test_util.h"
#include "scheduler/job_spec.h"
#include "scheduler/scheduler_server.h"

namespace ps {
namespace {

class SchedulerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.listen = "127.0.0.1:0";
    options_.state_dir = dir_.path() + "/state";
    options_.checkpoint_roots = {dir_.path() + "/shared"};
    // The ticker runs on real time but reads the fake clock, which stands still: nobody dies.
    auto server = SchedulerServer::Start(options_, clock_.AsFunction());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = v1::Scheduler::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                                       grpc::InsecureChannelCredentials()));
  }

  uint64_t Register(v1::NodeRole role, const std::string& address) {
    grpc::ClientContext ctx;
    v1::RegisterRequest req;
    req.set_role(role);
    req.set_address(address);
    v1::RegisterResponse resp;
    grpc::Status s = stub_->Register(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    secrets_[resp.node_id()] = resp.node_secret();
    return resp.node_id();
  }

  // What a client sees of the scheduler's state: jobs (with their events) and nodes.
  std::string State() {
    std::string state;
    v1::ListJobsResponse jobs;
    {
      grpc::ClientContext ctx;
      EXPECT_TRUE(stub_->ListJobs(&ctx, v1::ListJobsRequest(), &jobs).ok());
    }
    for (const v1::JobInfo& listed : jobs.jobs()) {
      grpc::ClientContext ctx;
      v1::GetJobRequest req;
      req.set_job_id(listed.job_id());
      v1::JobInfo job;
      EXPECT_TRUE(stub_->GetJob(&ctx, req, &job).ok());
      state += job.SerializeAsString();
    }
    v1::ListNodesResponse nodes;
    {
      grpc::ClientContext ctx;
      EXPECT_TRUE(stub_->ListNodes(&ctx, v1::ListNodesRequest(), &nodes).ok());
    }
    return state + nodes.SerializeAsString();
  }

  v1::JobSpec GoodSpec() const {
    v1::JobSpec spec;
    spec.set_model("fashion_mlp");
    spec.set_num_workers(1);
    spec.set_data_dir(dir_.path());
    return spec;
  }

  grpc::Status Submit(const v1::JobSpec& spec, std::string* job_id = nullptr) {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    v1::SubmitJobResponse resp;
    grpc::Status s = stub_->SubmitJob(&ctx, req, &resp);
    if (job_id != nullptr) *job_id = resp.job_id();
    return s;
  }

  // Submits `spec`: refused with `code` and a message holding each of `words`, the state as it
  // was, and the scheduler still serving (a good job is accepted after it).
  void ExpectSubmitRefused(const v1::JobSpec& spec, grpc::StatusCode code,
                           const std::vector<std::string>& words) {
    const std::string before = State();
    grpc::Status s = Submit(spec);
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    for (const std::string& word : words) {
      EXPECT_NE(s.error_message().find(word), std::string::npos)
          << "'" << word << "' not in: " << s.error_message();
    }
    EXPECT_EQ(State(), before);
    std::string job_id;
    ASSERT_TRUE(Submit(GoodSpec(), &job_id).ok());
    grpc::ClientContext ctx;
    v1::CancelJobRequest cancel;
    cancel.set_job_id(job_id);
    v1::JobInfo job;
    EXPECT_TRUE(stub_->CancelJob(&ctx, cancel, &job).ok());
  }

  ScopedTempDir dir_;
  FakeClock clock_;
  SchedulerOptions options_;
  std::unique_ptr<SchedulerServer> server_;
  std::unique_ptr<v1::Scheduler::Stub> stub_;
  std::map<uint64_t, std::string> secrets_;  // by node id, from Register()
};

TEST_F(SchedulerServiceTest, JobLifecycleOverGrpc) {
  const uint64_t server = Register(v1::SERVER, "127.0.0.1:7100");
  const uint64_t worker = Register(v1::WORKER, "");
  EXPECT_NE(server, worker);

  v1::SubmitJobRequest submit;
  submit.mutable_spec()->set_model("spam_logreg");
  submit.mutable_spec()->set_num_workers(1);
  submit.mutable_spec()->set_hash_bits(40);
  submit.mutable_spec()->set_data_dir(dir_.path());
  v1::SubmitJobResponse submitted;
  {
    grpc::ClientContext ctx;
    grpc::Status s = stub_->SubmitJob(&ctx, submit, &submitted);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("hash_bits"), std::string::npos) << s.error_message();
  }
  submit.mutable_spec()->set_hash_bits(0);
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->SubmitJob(&ctx, submit, &submitted).ok());
  }
  EXPECT_EQ(submitted.job_id(), "job-1");

  v1::HeartbeatResponse beat;
  {
    grpc::ClientContext ctx;
    v1::HeartbeatRequest req;
    req.set_node_id(worker);
    req.set_node_secret(secrets_[worker]);
    ASSERT_TRUE(stub_->Heartbeat(&ctx, req, &beat).ok());
  }
  EXPECT_FALSE(beat.reregister());
  EXPECT_EQ(beat.assignment().job_id(), "job-1");
  EXPECT_EQ(beat.assignment().spec().hash_bits(), 20);
  ASSERT_EQ(beat.assignment().servers_size(), 1);
  EXPECT_EQ(beat.assignment().servers(0), "127.0.0.1:7100");

  v1::JobInfo job;
  {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id("job-1");
    ASSERT_TRUE(stub_->GetJob(&ctx, req, &job).ok());
  }
  EXPECT_EQ(job.state(), v1::RUNNING);
  EXPECT_GE(job.events_size(), 2);
  v1::ListJobsResponse jobs;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->ListJobs(&ctx, v1::ListJobsRequest(), &jobs).ok());
  }
  ASSERT_EQ(jobs.jobs_size(), 1);
  EXPECT_EQ(jobs.jobs(0).events_size(), 0);
  v1::ListNodesResponse nodes;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->ListNodes(&ctx, v1::ListNodesRequest(), &nodes).ok());
  }
  ASSERT_EQ(nodes.nodes_size(), 2);
  EXPECT_EQ(nodes.nodes(1).job_id(), "job-1");

  v1::CancelJobRequest cancel;
  cancel.set_job_id("job-1");
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->CancelJob(&ctx, cancel, &job).ok());
  }
  EXPECT_EQ(job.state(), v1::CANCELLED);
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(stub_->CancelJob(&ctx, cancel, &job).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
  }
  {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id("job-7");
    EXPECT_EQ(stub_->GetJob(&ctx, req, &job).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext ctx;
    v1::HeartbeatRequest req;
    req.set_node_id(12345);
    ASSERT_TRUE(stub_->Heartbeat(&ctx, req, &beat).ok());
    EXPECT_TRUE(beat.reregister());
  }
}

// Hostile checkpoint roots: outside every allowed root, or escaping one with '..'.
TEST_F(SchedulerServiceTest, CheckpointRootOutsideTheAllowedRootsIsRefused) {
  const std::string shared = NormalPath(dir_.path()) + "/shared";  // TempDir may hold "//"
  for (const std::string& root : {std::string("/etc"), std::string("/tmp/../etc/cron.d"),
                                  shared + "/../../etc", shared + "x"}) {
    v1::JobSpec spec = GoodSpec();
    spec.mutable_checkpoint()->set_root(root);
    ExpectSubmitRefused(spec, grpc::StatusCode::INVALID_ARGUMENT,
                        {"checkpoint.root", root, shared});
  }
  // Allowed: under --checkpoint_roots (normalized), and under the scheduler's own root.
  v1::JobSpec spec = GoodSpec();
  spec.mutable_checkpoint()->set_root(shared + "/team-a/../team-b/");
  std::string job_id;
  ASSERT_TRUE(Submit(spec).ok());
  spec.mutable_checkpoint()->set_root(dir_.path() + "/checkpoints/mine");
  ASSERT_TRUE(Submit(spec, &job_id).ok());
  grpc::ClientContext ctx;
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(stub_->ListJobs(&ctx, v1::ListJobsRequest(), &jobs).ok());
  bool seen = false;
  for (const v1::JobInfo& job : jobs.jobs()) {
    if (job.spec().checkpoint().root() == shared + "/team-b") seen = true;
  }
  EXPECT_TRUE(seen) << "the root is stored normalized";
}

// Memory bombs: a model far over --max_model_bytes (RESOURCE_EXHAUSTED), and sizes beyond their
// documented ranges (INVALID_ARGUMENT naming the field).
TEST_F(SchedulerServiceTest, OversizedJobSpecsAreRefused) {
  v1::JobSpec wide = GoodSpec();
  for (int size : {784, 65536, 65536, 65536, 10}) wide.add_layers(size);  // ~96 GiB with adam
  ExpectSubmitRefused(wide, grpc::StatusCode::RESOURCE_EXHAUSTED,
                      {"max_model_bytes", "4294967296 bytes", "GiB"});
  v1::JobSpec hashed = GoodSpec();
  hashed.set_model("spam_logreg");
  hashed.set_hash_bits(30);
  ExpectSubmitRefused(hashed, grpc::StatusCode::RESOURCE_EXHAUSTED, {"12.0 GiB"});
  const std::vector<std::pair<std::string, std::function<void(v1::JobSpec*)>>> bad = {
      {"epochs", [](v1::JobSpec* s) { s->set_epochs(2000000000); }},
      {"batch_size", [](v1::JobSpec* s) { s->set_batch_size(2000000000); }},
      {"num_workers", [](v1::JobSpec* s) { s->set_num_workers(1 << 30); }},
      {"num_servers", [](v1::JobSpec* s) { s->set_num_servers(1 << 30); }},
      {"layers", [](v1::JobSpec* s) { s->mutable_layers()->Resize(100000, 784); }},
      {"hash_bits",
       [](v1::JobSpec* s) {
         s->set_model("spam_logreg");
         s->set_hash_bits(63);
       }},
  };
  for (const auto& [field, mutate] : bad) {
    v1::JobSpec spec = GoodSpec();
    mutate(&spec);
    ExpectSubmitRefused(spec, grpc::StatusCode::INVALID_ARGUMENT, {field});
  }
}

// Strings from clients: bounded, printable, refused (INVALID_ARGUMENT naming the field) before
// they are stored, listed, logged or echoed. Every job-naming request checks the id.
TEST_F(SchedulerServiceTest, HostileStringsAreRefusedWithoutChangingState) {
  Register(v1::SERVER, "127.0.0.1:7100");
  Register(v1::WORKER, "");
  std::string job_id;
  ASSERT_TRUE(Submit(GoodSpec(), &job_id).ok());
  const std::string escape = "evil\x1b]0;pwned\x07\x1b[2J\n";
  const std::string huge(1 << 20, 'a');
  const std::string before = State();
  auto expect_refused = [&](const grpc::Status& s, const std::string& field) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << field << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(field), std::string::npos) << s.error_message();
    EXPECT_LT(s.error_message().size(), 512u) << "the message echoes the whole value";
    EXPECT_EQ(s.error_message().find('\x1b'), std::string::npos) << "echoed unescaped";
    EXPECT_EQ(State(), before);
  };
  for (const auto& [field, mutate] :
       std::vector<std::pair<std::string, std::function<void(v1::RegisterRequest*)>>>{
           {"hostname", [&](v1::RegisterRequest* r) { r->set_hostname(escape); }},
           {"hostname", [&](v1::RegisterRequest* r) { r->set_hostname(huge); }},
           {"address", [&](v1::RegisterRequest* r) { r->set_address(huge + ":7100"); }},
           {"address", [&](v1::RegisterRequest* r) { r->set_address("10.0.0.9:7100\n"); }},
           {"metrics_address", [&](v1::RegisterRequest* r) { r->set_metrics_address(escape); }},
       }) {
    v1::RegisterRequest req;
    req.set_role(v1::SERVER);
    req.set_address("10.0.0.8:7100");
    mutate(&req);
    grpc::ClientContext ctx;
    v1::RegisterResponse resp;
    expect_refused(stub_->Register(&ctx, req, &resp), field);
  }
  for (const std::string& name : {escape, huge, std::string("caf\xc3\xa9")}) {
    v1::JobSpec spec = GoodSpec();
    spec.set_name(name);
    expect_refused(Submit(spec), "spec.name");
  }
  v1::JobSpec from = GoodSpec();
  from.mutable_from_checkpoint()->set_job_id(huge);
  expect_refused(Submit(from), "from_checkpoint.job_id");
  for (const std::string& id : {escape, huge}) {
    v1::JobInfo job;
    {
      grpc::ClientContext ctx;
      v1::GetJobRequest req;
      req.set_job_id(id);
      expect_refused(stub_->GetJob(&ctx, req, &job), "job_id");
    }
    {
      grpc::ClientContext ctx;
      v1::CancelJobRequest req;
      req.set_job_id(id);
      expect_refused(stub_->CancelJob(&ctx, req, &job), "job_id");
    }
    {
      grpc::ClientContext ctx;
      v1::RequestCheckpointRequest req;
      req.set_job_id(id);
      v1::RequestCheckpointResponse resp;
      expect_refused(stub_->RequestCheckpoint(&ctx, req, &resp), "job_id");
    }
    {
      grpc::ClientContext ctx;
      v1::ListCheckpointsRequest req;
      req.set_job_id(id);
      v1::ListCheckpointsResponse resp;
      expect_refused(stub_->ListCheckpoints(&ctx, req, &resp), "job_id");
    }
    {
      grpc::ClientContext ctx;
      v1::RestoreJobRequest req;
      req.set_job_id(id);
      expect_refused(stub_->RestoreJob(&ctx, req, &job), "job_id");
    }
    {
      grpc::ClientContext ctx;
      v1::BeginCheckpointRequest req;
      req.set_job_id(id);
      v1::CheckpointInfo resp;
      expect_refused(stub_->BeginCheckpoint(&ctx, req, &resp), "job_id");
    }
    {
      grpc::ClientContext ctx;
      v1::FinishCheckpointRequest req;
      req.set_job_id(id);
      v1::CheckpointInfo resp;
      expect_refused(stub_->FinishCheckpoint(&ctx, req, &resp), "job_id");
    }
    {
      grpc::ClientContext ctx;
      v1::ReportRestoreFailureRequest req;
      req.set_job_id(id);
      expect_refused(stub_->ReportRestoreFailure(&ctx, req, &job), "job_id");
    }
  }
  // Still serving, and good names still pass.
  v1::JobSpec named = GoodSpec();
  named.set_name("fashion run 3 (lr=0.01)");
  EXPECT_TRUE(Submit(named).ok());
}

// data_dir is no oracle: paths that exist on the scheduler's host and paths that do not get the
// same answer; only a malformed one is refused.
TEST_F(SchedulerServiceTest, DataDirIsJudgedByItsFormOnly) {
  for (const std::string& dir : {std::string("/etc"), std::string("/nonexistent/secret")}) {
    v1::JobSpec spec = GoodSpec();
    spec.set_data_dir(dir);
    EXPECT_TRUE(Submit(spec).ok()) << dir;
  }
  for (const std::string& dir :
       {std::string("relative/dir"), std::string("/tmp/\x1b[2J"), "/" + std::string(4096, 'd')}) {
    v1::JobSpec spec = GoodSpec();
    spec.set_data_dir(dir);
    ExpectSubmitRefused(spec, grpc::StatusCode::INVALID_ARGUMENT, {"data_dir"});
  }
}

}  // namespace
}  // namespace ps
