// The transport settings over real gRPC: ps_server processes on loopback started with the
// --http2_* and --tcp_* flags, clients with the same RpcClientOptions::transport, moving
// requests larger than any frame, window and read chunk involved.
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/job_admin.h"
#include "client/rpc_client.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace ps {
namespace {

using testing::LocalCluster;

constexpr char kJob[] = "transport";
constexpr uint32_t kDim = 1024;
constexpr uint64_t kRows = 3000;  // 12 MiB of values: several parts, frames and windows

// Small frames, windows and read chunks (every bound exercised on each request), or large ones.
TransportOptions Settings(bool large) {
  TransportOptions t;
  t.http2_max_frame_bytes = large ? 16777215 : 16384;
  t.http2_stream_window_bytes = large ? (64 << 20) : 65535;
  t.http2_bdp_probe = !large;
  t.http2_write_buffer_bytes = large ? (4 << 20) : 1;
  t.tcp_read_chunk_bytes = large ? (4 << 20) : 512;
  t.tcp_min_read_chunk_bytes = large ? (1 << 20) : 256;
  t.tcp_max_read_chunk_bytes = large ? (16 << 20) : 4096;
  return t;
}

// gRPC's own defaults everywhere (every field 0, BDP probing on).
TransportOptions GrpcDefaults() {
  TransportOptions t;
  t.http2_max_frame_bytes = 0;
  t.http2_stream_window_bytes = 0;
  t.http2_bdp_probe = true;
  return t;
}

std::vector<std::string> ServerFlags(const TransportOptions& t) {
  return {absl::StrCat("--http2_max_frame_bytes=", t.http2_max_frame_bytes),
          absl::StrCat("--http2_stream_window_bytes=", t.http2_stream_window_bytes),
          absl::StrCat("--http2_bdp_probe=", t.http2_bdp_probe ? "true" : "false"),
          absl::StrCat("--http2_write_buffer_bytes=", t.http2_write_buffer_bytes),
          absl::StrCat("--tcp_read_chunk_bytes=", t.tcp_read_chunk_bytes),
          absl::StrCat("--tcp_min_read_chunk_bytes=", t.tcp_min_read_chunk_bytes),
          absl::StrCat("--tcp_max_read_chunk_bytes=", t.tcp_max_read_chunk_bytes)};
}

std::unique_ptr<RpcClient> Connect(const LocalCluster& cluster, const TransportOptions& t) {
  RpcClientOptions o;
  o.servers = cluster.addresses();
  o.job_id = kJob;
  o.max_part_bytes = 8 << 20;
  o.rpc_timeout = absl::Seconds(60);
  o.transport = t;
  auto c = RpcClient::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

// Pushes a known gradient to a zero-initialized SGD table (lr 1) and pulls it back, dense and
// sparse, through one client with `client` settings against servers with `server` settings.
void PushAndPullBack(const TransportOptions& server, const TransportOptions& client) {
  auto cluster = LocalCluster::Start(2, ServerFlags(server));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::unique_ptr<RpcClient> c = Connect(*cluster, client);
  ASSERT_NE(c, nullptr);
  v1::ConsistencySpec async;
  async.set_mode(v1::ConsistencySpec::ASYNC);
  ASSERT_TRUE(JobAdmin(*c).ConfigureJob(async, {0}).ok());
  for (v1::TableKind kind : {v1::DENSE, v1::SPARSE}) {
    v1::TableSpec spec;
    spec.set_table_id(kind == v1::DENSE ? 1 : 2);
    spec.set_name(absl::StrCat("t", spec.table_id()));
    spec.set_job_id(kJob);
    spec.set_kind(kind);
    spec.set_dim(kDim);
    if (kind == v1::DENSE) spec.set_num_rows(kRows);
    spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
    spec.mutable_optimizer()->set_learning_rate(1.0f);
    ASSERT_TRUE(c->CreateTable(spec).ok());

    std::vector<uint64_t> keys;
    for (uint64_t k = 0; k < kRows; ++k) keys.push_back(kind == v1::DENSE ? k : k * 7919 + 5);
    std::vector<float> grads(kRows * kDim);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(i % 1000) - 500.0f;
    std::vector<float> before(grads.size(), NAN);  // creates the sparse rows
    ASSERT_TRUE(c->Pull({{spec.table_id(), keys, nullptr, before.data()}}).ok());
    ASSERT_TRUE(c->Push({{spec.table_id(), keys, grads.data(), nullptr}}).ok());
    std::vector<float> out(grads.size(), NAN);
    ASSERT_TRUE(c->Pull({{spec.table_id(), keys, nullptr, out.data()}}).ok());
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_EQ(out[i], before[i] - grads[i]) << "table " << spec.table_id() << " value " << i;
    }
  }
}

TEST(TransportClusterTest, LargeFramesWindowsAndReadChunksMoveRequestsIntact) {
  PushAndPullBack(Settings(/*large=*/true), Settings(/*large=*/true));
}

TEST(TransportClusterTest, SmallestFramesWindowsAndReadChunksMoveRequestsIntact) {
  PushAndPullBack(Settings(/*large=*/false), Settings(/*large=*/false));
}

TEST(TransportClusterTest, EndsWithDifferentSettingsInteroperate) {
  PushAndPullBack(Settings(/*large=*/true), GrpcDefaults());
  PushAndPullBack(GrpcDefaults(), TransportOptions());
  PushAndPullBack(TransportOptions(), Settings(/*large=*/false));
}

TEST(TransportClusterTest, ClientRefusesInvalidSettings) {
  RpcClientOptions o;
  o.servers = {"127.0.0.1:1"};
  o.transport.http2_max_frame_bytes = 100;
  auto c = RpcClient::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("http2_max_frame_bytes"), std::string::npos);
}

TEST(TransportClusterTest, ServerRefusesInvalidSettingsAtStart) {
  for (const char* flags :
       {"--tcp_min_read_chunk_bytes=65536 --tcp_max_read_chunk_bytes=4096",
        "--http2_max_frame_bytes=16777216", "--http2_stream_window_bytes=100"}) {
    // `timeout` bounds the test should the server start serving instead of refusing.
    const std::string command = absl::StrCat("timeout 20 ", PS_SERVER_BINARY,
                                             " --listen=127.0.0.1:0 ", flags, " >/dev/null 2>&1");
    const int status = std::system(command.c_str());
    ASSERT_TRUE(WIFEXITED(status)) << flags;
    EXPECT_NE(WEXITSTATUS(status), 0) << flags;
    EXPECT_NE(WEXITSTATUS(status), 124) << flags << ": the server started";
  }
}

}  // namespace
}  // namespace ps
