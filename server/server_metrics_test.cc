// The server's metrics, health and reflection, seen from outside: a real ParameterServer
// in-process, called over gRPC, its registry scraped as Prometheus text.
#include "server/server_metrics.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/packed_bytes.h"
#include "common/process_metrics.h"
#include "common/shard_map.h"
#include "common/testing/key_blocks.h"
#include "gtest/gtest.h"
#include "ps/v1/parameter_server.grpc.pb.h"
#include "server/parameter_server.h"
#include "server/testing/service_fixture.h"

namespace ps::server_metrics_test {
namespace {

using testing::Block;
using testing::CallContext;
using v1::KeyBlock;

constexpr char kJob[] = "job";
constexpr uint32_t kDense = 1;   // "dense": dim 4, 8 rows, sgd (no optimizer state)
constexpr uint32_t kSparse = 2;  // "sparse": dim 2, adagrad (one state float per value)

v1::TableSpec Spec(uint32_t id, const std::string& name, v1::TableKind kind, uint32_t dim,
                   const std::string& job) {
  v1::TableSpec spec;
  spec.set_table_id(id);
  spec.set_name(name);
  spec.set_job_id(job);
  spec.set_kind(kind);
  spec.set_dim(dim);
  if (kind == v1::DENSE) spec.set_num_rows(8);
  spec.mutable_initializer()->set_kind(v1::InitializerSpec::CONSTANT);
  spec.mutable_initializer()->set_value(0.5f);
  spec.mutable_optimizer()->set_kind(kind == v1::DENSE ? v1::OptimizerSpec::SGD
                                                       : v1::OptimizerSpec::ADAGRAD);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  return spec;
}

// The value of the sample `series` (name{labels} exactly as serialized); NaN if absent.
double Sample(const std::string& text, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, series) || !absl::ConsumePrefix(&line, " ")) continue;
    double v = 0;
    if (absl::SimpleAtod(line.substr(0, line.find(' ')), &v)) return v;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

class ServerMetricsTest : public testing::ServiceFixture {
 protected:
  void SetUp() override {
    ParameterServerOptions options;
    options.max_pull_wait = absl::Seconds(10);
    options.checkpoint_roots = {
        absl::StrCat(::testing::TempDir(), "/server_metrics_test_", getpid())};
    ASSERT_NO_FATAL_FAILURE(StartServer(options, &registry_));
  }

  std::string Scrape() const { return prometheus::TextSerializer().Serialize(registry_.Collect()); }

  grpc::Status Configure(const std::string& job, v1::ConsistencySpec::Mode mode,
                         const std::vector<uint32_t>& workers, std::string owned_slots = "") {
    v1::ConfigureJobRequest req;
    req.set_job_id(job);
    req.mutable_consistency()->set_mode(mode);
    for (uint32_t w : workers) req.add_worker_ids(w);
    req.set_membership_epoch(1);
    if (!owned_slots.empty()) {
      req.set_owned_slots(std::move(owned_slots));
      req.set_shard_epoch(1);
    }
    v1::ConfigureJobResponse resp;
    CallContext c;
    return stub_->ConfigureJob(&c.ctx, req, &resp);
  }
  grpc::Status Pull(const std::vector<KeyBlock>& blocks, const std::string& job = kJob,
                    int64_t clock = 0) {
    v1::PullRequest req;
    req.set_job_id(job);
    req.set_worker_id(1);
    req.set_clock(clock);
    for (const KeyBlock& b : blocks) *req.add_blocks() = b;
    v1::PullResponse resp;
    CallContext c;
    return stub_->Pull(&c.ctx, req, &resp);
  }
  grpc::Status Push(const std::vector<KeyBlock>& blocks, uint64_t request_id,
                    const std::string& job = kJob, int64_t clock = 0, float lr_scale = 0,
                    bool* duplicate = nullptr) {
    v1::PushRequest req;
    req.set_job_id(job);
    req.set_worker_id(1);
    req.set_request_id(request_id);
    req.set_clock(clock);
    req.set_lr_scale(lr_scale);
    for (const KeyBlock& b : blocks) *req.add_blocks() = b;
    v1::PushResponse resp;
    CallContext c;
    grpc::Status s = stub_->Push(&c.ctx, req, &resp);
    if (duplicate != nullptr) *duplicate = resp.duplicate();
    return s;
  }

  prometheus::Registry registry_;  // the server (destroyed by TearDown) must not outlive it
};

TEST_F(ServerMetricsTest, CountsRequestsKeysRejectionsAndRows) {
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC, {1}).ok());
  ASSERT_TRUE(CreateTable(Spec(kDense, "dense", v1::DENSE, 4, kJob)).ok());
  ASSERT_TRUE(CreateTable(Spec(kSparse, "sparse", v1::SPARSE, 2, kJob)).ok());

  // Accepted: 3 + 2 pushed keys; a retry of request 1 is a duplicate; 2 + 3 pulled keys.
  const std::vector<float> g3(3 * 4, 0.1f);
  ASSERT_TRUE(Push({Block(kDense, {0, 1, 2}, g3)}, 1).ok());
  bool duplicate = false;
  ASSERT_TRUE(Push({Block(kDense, {0, 1, 2}, g3)}, 1, kJob, 0, 0, &duplicate).ok());
  EXPECT_TRUE(duplicate);
  ASSERT_TRUE(Push({Block(kSparse, {100, 200}, std::vector<float>(4, 0.1f))}, 2).ok());
  ASSERT_TRUE(Pull({Block(kDense, {3, 4})}).ok());
  ASSERT_TRUE(Pull({Block(kSparse, {100, 300, 400})}).ok());  // creates rows 300, 400

  // Refused, one per reason.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(Push({Block(99, {0}, {1})}, 10).ok());                              // unknown_table
  EXPECT_FALSE(Push({Block(kDense, {0, 0}, std::vector<float>(8, 0))}, 11).ok());  // duplicate_key
  EXPECT_FALSE(Push({Block(kDense, {8}, std::vector<float>(4, 0))}, 12).ok());  // key_out_of_range
  EXPECT_FALSE(Push({Block(kDense, {0}, {1, 2})}, 13).ok());                    // bad_size
  EXPECT_FALSE(Push({Block(kDense, {0}, {1, nan, 0, 0})}, 14).ok());            // nonfinite
  EXPECT_FALSE(Push({Block(kDense, {0}, std::vector<float>(4, 0))}, 15, kJob, 0, -1).ok());
  EXPECT_FALSE(Push({Block(kDense, {0}, std::vector<float>(4, 0))}, 16, kJob, 5).ok());  // clock
  EXPECT_FALSE(Pull({}, "nojob").ok());  // unconfigured_job
  EXPECT_FALSE(Clock(kJob, 1, 7).ok());  // bad_clock
  ASSERT_TRUE(Configure("other", v1::ConsistencySpec::ASYNC, {1}).ok());
  EXPECT_FALSE(Pull({Block(kDense, {0})}, "other").ok());                 // wrong_job
  EXPECT_FALSE(CreateTable(Spec(kDense, "x", v1::DENSE, 5, kJob)).ok());  // other: conflicting

  const std::string text = Scrape();
  EXPECT_EQ(Sample(text, "ps_server_requests_total{method=\"push\"}"), 10) << text;
  EXPECT_EQ(Sample(text, "ps_server_requests_total{method=\"pull\"}"), 4);
  EXPECT_EQ(Sample(text, "ps_server_requests_total{method=\"clock\"}"), 1);
  EXPECT_EQ(Sample(text, "ps_server_requests_total{method=\"configure_job\"}"), 2);
  EXPECT_EQ(Sample(text, "ps_server_requests_total{method=\"create_table\"}"), 3);
  EXPECT_EQ(Sample(text, "ps_server_requests_total{method=\"describe_table\"}"), 0);
  EXPECT_EQ(
      Sample(text, "ps_server_request_errors_total{code=\"invalid_argument\",method=\"push\"}"), 6);
  EXPECT_EQ(
      Sample(text, "ps_server_request_errors_total{code=\"failed_precondition\",method=\"push\"}"),
      1);
  EXPECT_EQ(
      Sample(text,
             "ps_server_request_errors_total{code=\"already_exists\",method=\"create_table\"}"),
      1);
  for (const char* reason :
       {"unknown_table", "duplicate_key", "key_out_of_range", "bad_size", "nonfinite",
        "bad_lr_scale", "unconfigured_job", "wrong_job", "other"}) {
    EXPECT_EQ(
        Sample(text, absl::StrCat("ps_server_rejected_requests_total{reason=\"", reason, "\"}")), 1)
        << reason;
  }
  EXPECT_EQ(Sample(text, "ps_server_rejected_requests_total{reason=\"bad_clock\"}"), 2);
  EXPECT_EQ(Sample(text, "ps_server_rejected_requests_total{reason=\"wrong_shard\"}"), 0);

  EXPECT_EQ(Sample(text, "ps_server_pushed_keys_total{job=\"job\"}"), 5);
  EXPECT_EQ(Sample(text, "ps_server_duplicate_pushes_total{job=\"job\"}"), 1);
  EXPECT_EQ(Sample(text, "ps_server_pulled_keys_total{job=\"job\"}"), 5);
  EXPECT_EQ(Sample(text, "ps_server_pulled_keys_total{job=\"other\"}"), 0);
  EXPECT_EQ(Sample(text, "ps_server_owned_slots{job=\"job\"}"), kNumSlots);
  // dense: 8 rows of 4 floats; sparse: 100, 200, 300, 400 of 2 values + 2 adagrad floats; each
  // row 32 bytes as stored (a 16-byte header, then its floats).
  EXPECT_EQ(Sample(text, "ps_server_rows{job=\"job\",table=\"dense\"}"), 8);
  EXPECT_EQ(Sample(text, "ps_server_table_bytes{job=\"job\",table=\"dense\"}"), 8 * 32);
  EXPECT_EQ(Sample(text, "ps_server_rows{job=\"job\",table=\"sparse\"}"), 4);
  EXPECT_EQ(Sample(text, "ps_server_table_bytes{job=\"job\",table=\"sparse\"}"), 4 * 32);
  EXPECT_EQ(server_->store()->NumRows(kSparse), 4u);
  EXPECT_EQ(Sample(text, "ps_server_pull_wait_seconds_count{job=\"job\"}"), 2);
  EXPECT_EQ(Sample(text, "ps_server_waiting_pulls{job=\"job\"}"), 0);
  EXPECT_EQ(Sample(text, "ps_server_request_duration_seconds_count{method=\"push\"}"), 10);
  EXPECT_GT(Sample(text, "ps_server_request_bytes_total{direction=\"in\",method=\"push\"}"),
            3 * 4 * 4);
  EXPECT_GT(Sample(text, "ps_server_request_bytes_total{direction=\"out\",method=\"pull\"}"),
            5 * 4);
}

// A dropped job stops counting; its table series go at once, its other series once
// kKeepDroppedJobs later jobs were dropped; the drops and what they freed are counted.
TEST_F(ServerMetricsTest, DroppedJobsAreCountedAndTheirSeriesGo) {
  const auto job = [](int i) { return absl::StrCat("job-", i); };
  const auto series = [&job](const char* name, int i, const char* more = "") {
    return absl::StrCat(name, "{job=\"", job(i), "\"", more, "}");
  };
  constexpr int kJobs = ServerMetrics::kKeepDroppedJobs + 1;
  for (int i = 0; i < kJobs; ++i) {
    ASSERT_TRUE(Configure(job(i), v1::ConsistencySpec::ASYNC, {1}).ok());
    ASSERT_TRUE(CreateTable(Spec(10 + i, "sparse", v1::SPARSE, 2, job(i))).ok());
    ASSERT_TRUE(Push({Block(10 + i, {1, 2}, std::vector<float>(4, 0.1f))}, 1, job(i)).ok());
  }
  const auto drop = [this, &job](int i) {
    v1::DropJobRequest req;
    req.set_job_id(job(i));
    v1::DropJobResponse resp;
    CallContext c;
    return stub_->DropJob(&c.ctx, req, &resp);
  };
  ASSERT_TRUE(drop(0).ok());
  EXPECT_FALSE(Push({Block(10, {1}, {1, 1})}, 2, job(0)).ok());  // dropped_job
  std::string text = Scrape();
  EXPECT_TRUE(std::isnan(Sample(text, series("ps_server_rows", 0, ",table=\"sparse\""))));
  EXPECT_TRUE(std::isnan(Sample(text, series("ps_server_table_bytes", 0, ",table=\"sparse\""))));
  EXPECT_EQ(Sample(text, series("ps_server_pushed_keys_total", 0)), 2) << text;  // final count
  EXPECT_EQ(Sample(text, series("ps_server_owned_slots", 0)), 0);
  EXPECT_EQ(Sample(text, series("ps_server_rows", 1, ",table=\"sparse\"")), 2);  // untouched
  EXPECT_EQ(Sample(text, "ps_server_dropped_jobs_total"), 1);
  EXPECT_EQ(Sample(text, "ps_server_dropped_tables_total"), 1);
  EXPECT_EQ(Sample(text, "ps_server_dropped_bytes_total"), 2 * 32);  // 2 rows, adagrad
  EXPECT_EQ(Sample(text, "ps_server_requests_total{method=\"drop_job\"}"), 1);
  EXPECT_EQ(Sample(text, "ps_server_rejected_requests_total{reason=\"dropped_job\"}"), 1);

  for (int i = 1; i < kJobs; ++i) ASSERT_TRUE(drop(i).ok());
  ASSERT_TRUE(drop(0).ok());  // idempotent: not counted again
  text = Scrape();
  EXPECT_TRUE(std::isnan(Sample(text, series("ps_server_pushed_keys_total", 0))));
  EXPECT_TRUE(std::isnan(Sample(text, series("ps_server_pull_wait_seconds_count", 0))));
  for (int i = 1; i < kJobs; ++i)
    EXPECT_EQ(Sample(text, series("ps_server_pushed_keys_total", i)), 2);
  EXPECT_EQ(Sample(text, "ps_server_dropped_jobs_total"), kJobs);
  EXPECT_EQ(Sample(text, "ps_server_dropped_tables_total"), kJobs);
}

TEST_F(ServerMetricsTest, WrongShardAndOwnedSlotsFollowTheJobsShards) {
  std::vector<bool> owned(kNumSlots, false);
  for (uint32_t s = 0; s < kNumSlots; s += 2) owned[s] = true;
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC, {1}, EncodeSlotBitmap(owned)).ok());
  ASSERT_TRUE(CreateTable(Spec(kDense, "dense", v1::DENSE, 4, kJob)).ok());
  uint64_t foreign = 0, rows = 0;
  for (uint64_t key = 0; key < 8; ++key) {
    if (owned[SlotOf(kDense, key)]) {
      ++rows;
    } else {
      foreign = key;
    }
  }
  ASSERT_LT(rows, 8u) << "every key of the table landed on an owned slot";
  EXPECT_FALSE(Pull({Block(kDense, {foreign})}).ok());

  const std::string text = Scrape();
  EXPECT_EQ(Sample(text, "ps_server_owned_slots{job=\"job\"}"), kNumSlots / 2) << text;
  EXPECT_EQ(Sample(text, "ps_server_rejected_requests_total{reason=\"wrong_shard\"}"), 1);
  EXPECT_EQ(Sample(text, "ps_server_rows{job=\"job\",table=\"dense\"}"), rows);
}

TEST_F(ServerMetricsTest, CheckpointWritesAndRestoresAreCounted) {
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC, {1}).ok());
  ASSERT_TRUE(CreateTable(Spec(kDense, "dense", v1::DENSE, 4, kJob)).ok());
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/server_metrics_test_", getpid(), "/ckpt-1");
  v1::CheckpointRequest req;
  req.set_job_id(kJob);
  req.set_checkpoint_id(1);
  req.set_path(path);
  req.set_shard_epoch(1);
  v1::CheckpointResponse resp;
  {
    CallContext c;
    ASSERT_TRUE(stub_->Checkpoint(&c.ctx, req, &resp).ok());
  }
  v1::AwaitCheckpointRequest await;
  await.set_job_id(kJob);
  await.set_checkpoint_id(1);
  {
    CallContext c;
    ASSERT_TRUE(stub_->AwaitCheckpoint(&c.ctx, await, &resp).ok());
    ASSERT_TRUE(resp.done());
  }
  v1::RestoreRequest restore;
  restore.set_job_id(kJob);
  restore.mutable_order()->set_shard_epoch(1);
  restore.mutable_order()->set_checkpoint_id(1);
  restore.mutable_order()->set_rollback(true);
  v1::CheckpointShard* shard = restore.mutable_order()->add_shards();
  shard->set_path(path + "-missing");
  shard->set_slots(EncodeSlotBitmap(std::vector<bool>(kNumSlots, true)));
  {
    v1::RestoreResponse restored;
    CallContext c;
    EXPECT_EQ(stub_->Restore(&c.ctx, restore, &restored).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());

  const std::string text = Scrape();
  EXPECT_EQ(Sample(text, "ps_server_checkpoints_written_total"), 1);
  EXPECT_EQ(Sample(text, "ps_server_checkpoints_failed_total"), 0);
  EXPECT_EQ(Sample(text, "ps_server_last_checkpoint_bytes"), 8 * 4 * 4);
  EXPECT_GT(Sample(text, "ps_server_last_checkpoint_write_seconds"), 0);
  EXPECT_EQ(Sample(text, "ps_server_restores_total"), 1);
  EXPECT_EQ(Sample(text, "ps_server_restores_failed_total"), 1);
  EXPECT_EQ(Sample(text, "ps_server_requests_total{method=\"checkpoint\"}"), 1);
  EXPECT_EQ(Sample(text, "ps_server_requests_total{method=\"await_checkpoint\"}"), 1);
  EXPECT_EQ(Sample(text, "ps_server_request_errors_total{code=\"not_found\",method=\"restore\"}"),
            1);
}

TEST_F(ServerMetricsTest, PullBlockedOnTheGateIsCountedWhileItWaits) {
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::SYNC, {1, 2}).ok());
  ASSERT_TRUE(CreateTable(Spec(kDense, "dense", v1::DENSE, 4, kJob)).ok());
  ASSERT_TRUE(Clock(kJob, 1, 1).ok());
  // Worker 1 pulls at clock 1: it waits until worker 2 finishes clock 0.
  grpc::Status pulled;
  std::thread puller([&] { pulled = Pull({Block(kDense, {0})}, kJob, 1); });
  const std::string waiting = "ps_server_waiting_pulls{job=\"job\"}";
  for (int i = 0; i < 1000 && Sample(Scrape(), waiting) != 1; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(Sample(Scrape(), waiting), 1);
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_TRUE(Clock(kJob, 2, 1).ok());
  puller.join();
  ASSERT_TRUE(pulled.ok()) << pulled.error_message();

  const std::string text = Scrape();
  EXPECT_EQ(Sample(text, waiting), 0) << text;
  EXPECT_EQ(Sample(text, "ps_server_pull_wait_seconds_count{job=\"job\"}"), 1);
  EXPECT_GE(Sample(text, "ps_server_pull_wait_seconds_sum{job=\"job\"}"), 0.02);
  EXPECT_EQ(Sample(text, "ps_server_pull_wait_seconds_bucket{job=\"job\",le=\"0.001\"}"), 0);
  EXPECT_EQ(Sample(text, "ps_server_pull_wait_seconds_bucket{job=\"job\",le=\"+Inf\"}"), 1);
}

TEST_F(ServerMetricsTest, ScrapePassesPromtoolCheckMetrics) {
  const char* promtool = "/usr/bin/promtool";
  if (access(promtool, X_OK) != 0) GTEST_SKIP() << "no " << promtool;
  auto process = ProcessMetrics::Start(registry_, "server", absl::ZeroDuration());
  ASSERT_TRUE(process.ok()) << process.status();
  ASSERT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC, {1}).ok());
  ASSERT_TRUE(CreateTable(Spec(kDense, "dense", v1::DENSE, 4, kJob)).ok());
  ASSERT_TRUE(Pull({Block(kDense, {1})}).ok());
  EXPECT_FALSE(Pull({Block(99, {1})}).ok());

  const std::string dir = ::testing::TempDir();
  const std::string metrics = dir + "/server_metrics.txt";
  const std::string out = dir + "/promtool.out";
  std::ofstream(metrics) << Scrape();
  const int rc = std::system(
      absl::StrCat(promtool, " check metrics < ", metrics, " > ", out, " 2>&1").c_str());
  std::ifstream in(out);
  const std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << said;
  EXPECT_EQ(said, "") << "promtool found problems (warnings count):\n" << said;
}

// grpc.health.v1.Health/Check without its generated code: HealthCheckRequest is field 1
// (string service); the answer's field 1 is the status enum (1 SERVING, 2 NOT_SERVING).
class HealthTest : public ServerMetricsTest {
 protected:
  // The serving status of `service`, or -1 with the call's error in `error`.
  int Check(const std::string& service, std::string* error = nullptr) {
    std::string request;
    if (!service.empty()) {
      request.push_back(0x0a);
      request.push_back(static_cast<char>(service.size()));  // names here are < 128 bytes
      request += service;
    }
    grpc::Slice slice(request);
    grpc::ByteBuffer req(&slice, 1), resp;
    grpc::Status status = Call("/grpc.health.v1.Health/Check", req, &resp, /*streaming=*/false);
    if (!status.ok()) {
      if (error != nullptr) *error = status.error_message();
      return -1;
    }
    std::vector<grpc::Slice> slices;
    EXPECT_TRUE(resp.Dump(&slices).ok());
    std::string bytes;
    for (const grpc::Slice& s : slices)
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    if (bytes.empty()) return 0;  // UNKNOWN, the default, is not serialized
    EXPECT_EQ(bytes.size(), 2u);
    EXPECT_EQ(bytes[0], 0x08);
    return bytes.size() == 2 ? bytes[1] : -1;
  }

  // One request, one answer over a generic call (unary, or a stream of one message each way).
  grpc::Status Call(const std::string& method, const grpc::ByteBuffer& req, grpc::ByteBuffer* resp,
                    bool streaming) {
    grpc::GenericStub stub(channel_);
    grpc::CompletionQueue cq;
    CallContext c;
    grpc::ClientContext& ctx = c.ctx;
    grpc::Status status;
    void* tag;
    bool ok;
    if (!streaming) {
      auto call = stub.PrepareUnaryCall(&ctx, method, req, &cq);
      call->StartCall();
      call->Finish(resp, &status, reinterpret_cast<void*>(1));
      EXPECT_TRUE(cq.Next(&tag, &ok));
      return status;
    }
    auto call = stub.PrepareCall(&ctx, method, &cq);
    call->StartCall(reinterpret_cast<void*>(1));
    EXPECT_TRUE(cq.Next(&tag, &ok) && ok);
    call->Write(req, reinterpret_cast<void*>(2));
    EXPECT_TRUE(cq.Next(&tag, &ok) && ok);
    call->WritesDone(reinterpret_cast<void*>(3));
    EXPECT_TRUE(cq.Next(&tag, &ok) && ok);
    call->Read(resp, reinterpret_cast<void*>(4));
    EXPECT_TRUE(cq.Next(&tag, &ok) && ok);
    call->Finish(&status, reinterpret_cast<void*>(5));
    EXPECT_TRUE(cq.Next(&tag, &ok) && ok);
    return status;
  }
};

TEST_F(HealthTest, ServingUntilDrainedThenNotServingWhileStillAnswering) {
  EXPECT_EQ(Check(""), 1);
  EXPECT_EQ(Check("ps.v1.ParameterServer"), 1);
  std::string error;
  EXPECT_EQ(Check("no.such.Service", &error), -1);

  server_->Drain();
  EXPECT_EQ(Check(""), 2);
  EXPECT_EQ(Check("ps.v1.ParameterServer"), 2);
  // Draining only changes what health checks say: requests are still served.
  EXPECT_TRUE(Configure(kJob, v1::ConsistencySpec::ASYNC, {1}).ok());
}

TEST_F(HealthTest, ReflectionListsTheServices) {
  // ServerReflectionRequest { list_services (field 7) = "" }.
  const std::string request("\x3a\x00", 2);
  grpc::Slice slice(request);
  grpc::ByteBuffer req(&slice, 1), resp;
  grpc::Status status = Call("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", req,
                             &resp, /*streaming=*/true);
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(resp.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_NE(bytes.find("ps.v1.ParameterServer"), std::string::npos);
  EXPECT_NE(bytes.find("grpc.health.v1.Health"), std::string::npos);
}

TEST(ServerMetricsUnitTest, NoRegistryMeansNoMetricsAndTheServerStillWorks) {
  ParameterServerOptions options;
  options.listen = "127.0.0.1:0";
  auto server = ParameterServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->Drain();
  (*server)->Shutdown();
}

TEST(ServerMetricsUnitTest, ConflictingRegistrationIsAnErrorNotAnException) {
  prometheus::Registry registry;
  prometheus::BuildGauge().Name("ps_server_requests_total").Help("taken").Register(registry);
  auto metrics = ServerMetrics::Create(registry);
  ASSERT_FALSE(metrics.ok());
  EXPECT_EQ(metrics.status().code(), absl::StatusCode::kInternal) << metrics.status();
}

TEST(ServerMetricsUnitTest, RejectReasonsRoundTripThroughTheStatus) {
  for (int i = 1; i < kNumRejectReasons; ++i) {
    const auto reason = static_cast<RejectReason>(i);
    EXPECT_EQ(RejectReasonOf(Rejected(reason, absl::InvalidArgumentError("x"))), reason);
  }
  EXPECT_EQ(RejectReasonOf(absl::OkStatus()), RejectReason::kNone);
  EXPECT_EQ(RejectReasonOf(absl::DeadlineExceededError("slow")), RejectReason::kNone);
  EXPECT_EQ(RejectReasonOf(absl::InvalidArgumentError("untagged")), RejectReason::kOther);
}

}  // namespace
}  // namespace ps::server_metrics_test
