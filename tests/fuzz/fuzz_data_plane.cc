// The data-plane RPCs of ParameterService, called in process (no network) on a fresh
// TableStore per input that holds job "job" (ASYNC, workers 1 and 2; dense table 1, sparse
// table 2) and job "probe" (dense table 901). Input: up to kMaxRequests records of
// [rpc byte][serialized request field] (framing in fuzz_input.h); requests that name job
// "probe" are sent to "job" instead. Afterwards the probe job must still answer a pull with
// its untouched initial values: no request of another job may reach its rows.
//
// Pull, Push and PushPull take the path gRPC's handlers take (ParameterService::StartDataCall):
// a DataCall over the service's DataPlane, on a ByteBuffer (pushes read in place) cut into
// pieces of a size the rpc byte picks (rpc / 10 % 8: 0 one slice, k pieces of 3 << (k - 1)
// bytes), served first as on the gRPC thread that read it (may not block) and, where it stops
// there, on as on the hand-off thread. rpc / 80 == 1: the call carries job "job"'s credential
// (its scope), else none. Bytes protobuf cannot parse are sent as they are (they must be
// refused); the others are re-encoded after the probe job is renamed.
//
// Checkpoint and Restore run with no checkpoint roots, so they are validated up to the path
// check and never write or read a RocksDB (which would cost milliseconds an input).
#include <glog/logging.h>
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/packed_bytes.h"
#include "ps/v1/parameter_server.pb.h"
#include "server/data_call.h"
#include "server/parameter_service.h"
#include "server/table_store.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using ps::v1::ConsistencySpec;

constexpr int kMaxRequests = 16;
constexpr char kJob[] = "job";
constexpr char kProbe[] = "probe";
constexpr uint32_t kProbeTable = 901;
constexpr float kProbeValue = 0.25f;

// Aborts (a finding) naming the check's line when `ok` is false.
void Require(bool ok, int line = __builtin_LINE()) {
  if (ok) return;
  std::fprintf(stderr, "%s:%d: check failed\n", __FILE__, line);
  std::abort();
}

ps::TableStoreOptions StoreOptions() {
  ps::TableStoreOptions options;
  // Small caps: a request may legitimately allocate up to them, and the fuzzer's memory is
  // bounded (rss_limit_mb).
  options.max_keys_per_block = 1 << 16;
  options.max_pull_bytes = 8 << 20;
  options.max_dim = 4096;
  options.max_dense_table_bytes = 32 << 20;
  options.max_job_bytes = 16 << 20;
  return options;
}

ps::v1::TableSpec Spec(uint32_t id, const std::string& job, ps::v1::TableKind kind,
                       ps::v1::OptimizerSpec::Kind optimizer) {
  ps::v1::TableSpec spec;
  spec.set_table_id(id);
  spec.set_job_id(job);
  spec.set_kind(kind);
  spec.set_dim(kind == ps::v1::DENSE ? 4 : 2);
  if (kind == ps::v1::DENSE) {
    spec.set_num_rows(8);
    spec.mutable_initializer()->set_kind(ps::v1::InitializerSpec::CONSTANT);
    spec.mutable_initializer()->set_value(kProbeValue);
  } else {
    spec.mutable_initializer()->set_kind(ps::v1::InitializerSpec::UNIFORM);
    spec.mutable_initializer()->set_low(-1.0f);
    spec.mutable_initializer()->set_high(1.0f);
  }
  spec.mutable_optimizer()->set_kind(optimizer);
  spec.mutable_optimizer()->set_learning_rate(0.5f);
  return spec;
}

void Configure(ps::ParameterService& service, const std::string& job,
               const std::vector<uint32_t>& workers) {
  ps::v1::ConfigureJobRequest req;
  req.set_job_id(job);
  req.mutable_consistency()->set_mode(ConsistencySpec::ASYNC);
  for (uint32_t w : workers) req.add_worker_ids(w);
  req.set_membership_epoch(1);
  req.set_caller_clock(-1);
  ps::v1::ConfigureJobResponse resp;
  grpc::ServerContext ctx;
  Require(service.ConfigureJob(&ctx, &req, &resp).ok());
}

void Create(ps::ParameterService& service, const ps::v1::TableSpec& spec) {
  ps::v1::CreateTableRequest req;
  *req.mutable_spec() = spec;
  ps::v1::CreateTableResponse resp;
  grpc::ServerContext ctx;
  Require(service.CreateTable(&ctx, &req, &resp).ok());
}

void Unprobe(std::string* job) {
  if (*job == kProbe) *job = kJob;
}

// Parses `bytes` as the request of RPC `rpc` and calls its handler.
template <typename Request, typename Response, typename Handler>
void Call(const std::string& bytes, Handler handler) {
  Request req;
  if (!req.ParseFromString(bytes)) return;
  Unprobe(req.mutable_job_id());
  Response resp;
  grpc::ServerContext ctx;
  (void)handler(&ctx, &req, &resp);
}

// `bytes` as gRPC may hand them over: one slice, or pieces of `piece` bytes.
grpc::ByteBuffer Sliced(const std::string& bytes, size_t piece) {
  if (piece == 0 || bytes.empty()) {
    grpc::Slice slice(bytes);
    return grpc::ByteBuffer(&slice, 1);
  }
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    slices.emplace_back(bytes.data() + at, std::min(piece, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// The bytes of a data-plane request for the raw handlers: re-encoded with the probe job renamed
// (`unprobe`) if protobuf parses them, else as they came.
template <typename Request, typename Unprobe>
std::string RawRequest(const std::string& bytes, Unprobe unprobe) {
  Request req;
  if (!req.ParseFromString(bytes)) return bytes;
  unprobe(&req);
  return req.SerializeAsString();
}

// Serves a Pull, Push or PushPull call as gRPC's handlers do: a DataCall with the arguments
// StartDataCall gives it, served without blocking, then (where it stopped) as the hand-off
// thread serves it. The call's status.
absl::Status Serve(ps::ParameterService& service, ps::ServerMethod method,
                   const grpc::ByteBuffer& request, absl::Time deadline,
                   const std::string& job_scope, grpc::ByteBuffer* answer) {
  ps::DataCall call(service.data_plane(), method, request, answer, deadline, job_scope);
  if (!call.Serve(/*may_block=*/false)) Require(call.Serve(/*may_block=*/true));
  return call.status();
}

void Dispatch(ps::ParameterService& s, uint8_t rpc, const std::string& bytes) {
  using namespace ps::v1;  // NOLINT: the request and response types
  const int slicing = rpc / 10 % 8;
  const size_t piece = slicing == 0 ? 0 : size_t{3} << (slicing - 1);
  const std::string scope = rpc / 80 == 1 ? kJob : "";
  const absl::Time deadline = absl::Now() + absl::Milliseconds(1);
  grpc::ByteBuffer answer;
  switch (rpc % 10) {
    case 0: {
      grpc::ByteBuffer in = Sliced(
          RawRequest<PushRequest>(bytes, [](PushRequest* r) { Unprobe(r->mutable_job_id()); }),
          piece);
      (void)Serve(s, ps::ServerMethod::kPush, in, deadline, scope, &answer);
      return;
    }
    case 1: {
      grpc::ByteBuffer in = Sliced(
          RawRequest<PullRequest>(bytes, [](PullRequest* r) { Unprobe(r->mutable_job_id()); }),
          piece);
      (void)Serve(s, ps::ServerMethod::kPull, in, deadline, scope, &answer);
      return;
    }
    case 2: {
      grpc::ByteBuffer in =
          Sliced(RawRequest<PushPullRequest>(bytes,
                                             [](PushPullRequest* r) {
                                               if (r->has_push()) {
                                                 Unprobe(r->mutable_push()->mutable_job_id());
                                               }
                                             }),
                 piece);
      (void)Serve(s, ps::ServerMethod::kPushPull, in, deadline, scope, &answer);
      return;
    }
    case 3:
      return Call<ClockRequest, ClockResponse>(
          bytes, [&](auto* c, auto* q, auto* r) { return s.Clock(c, q, r); });
    case 4:
      return Call<ConfigureJobRequest, ConfigureJobResponse>(
          bytes, [&](auto* c, auto* q, auto* r) { return s.ConfigureJob(c, q, r); });
    case 5: {
      CreateTableRequest req;
      if (!req.ParseFromString(bytes)) return;
      Unprobe(req.mutable_spec()->mutable_job_id());
      CreateTableResponse resp;
      grpc::ServerContext ctx;
      (void)s.CreateTable(&ctx, &req, &resp);
      return;
    }
    case 6: {
      DescribeTableRequest req;
      if (!req.ParseFromString(bytes)) return;
      DescribeTableResponse resp;
      grpc::ServerContext ctx;
      (void)s.DescribeTable(&ctx, &req, &resp);
      return;
    }
    case 7:
      return Call<CheckpointRequest, CheckpointResponse>(
          bytes, [&](auto* c, auto* q, auto* r) { return s.Checkpoint(c, q, r); });
    case 8:
      return Call<AwaitCheckpointRequest, CheckpointResponse>(
          bytes, [&](auto* c, auto* q, auto* r) { return s.AwaitCheckpoint(c, q, r); });
    case 9: {
      RestoreRequest req;
      if (!req.ParseFromString(bytes)) return;
      Unprobe(req.mutable_job_id());
      Unprobe(req.mutable_order()->mutable_source_job_id());
      RestoreResponse resp;
      grpc::ServerContext ctx;
      (void)s.Restore(&ctx, &req, &resp);
      return;
    }
  }
}

// The probe job's pull: OK, with every value as initialized.
void CheckProbe(ps::ParameterService& service) {
  ps::v1::PullRequest req;
  req.set_job_id(kProbe);
  req.set_worker_id(1);
  ps::v1::KeyBlock* block = req.add_blocks();
  block->set_table_id(kProbeTable);
  const std::vector<uint64_t> keys = {0, 1, 2, 3, 4, 5, 6, 7};
  ps::AppendKeys(keys, block->mutable_keys());
  // As gRPC calls it: the request's bytes in, the answer's bytes out.
  grpc::ByteBuffer in = Sliced(req.SerializeAsString(), 0);
  grpc::ByteBuffer answer;
  Require(Serve(service, ps::ServerMethod::kPull, in, absl::Now() + absl::Seconds(1), "", &answer)
              .ok());
  ps::v1::PullResponse resp;
  Require(grpc::SerializationTraits<ps::v1::PullResponse>::Deserialize(&answer, &resp).ok());
  Require(resp.blocks_size() == 1);
  absl::Span<const float> values;
  Require(ps::DecodeValues(resp.blocks(0).values(), &values).ok());
  Require(values.size() == keys.size() * 4);
  for (float v : values) Require(v == kProbeValue);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // unparsable input is the point
  FLAGS_minloglevel = google::GLOG_ERROR;    // restores log at INFO: thousands a second
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ps::TableStore store(StoreOptions());
  ps::ParameterService service(&store, /*max_pull_wait=*/absl::Milliseconds(1));
  Configure(service, kJob, {1, 2});
  Configure(service, kProbe, {1});
  Create(service, Spec(1, kJob, ps::v1::DENSE, ps::v1::OptimizerSpec::ADAM));
  Create(service, Spec(2, kJob, ps::v1::SPARSE, ps::v1::OptimizerSpec::ADAGRAD));
  Create(service, Spec(kProbeTable, kProbe, ps::v1::DENSE, ps::v1::OptimizerSpec::SGD));

  ps::FuzzInput in(data, size);
  for (int i = 0; i < kMaxRequests && !in.empty(); ++i) {
    const uint8_t rpc = in.Byte();
    Dispatch(service, rpc, in.Field());
  }
  CheckProbe(service);
  service.Shutdown();
  return 0;
}
