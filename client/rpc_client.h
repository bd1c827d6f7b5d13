// ps::RpcClient: the data-plane engine under the public client library (<ps/client.h>) and the
// worker daemon: routing by shard map, requests cut into parts sent in parallel, retries, clocks.
// The repository's own (it exposes gRPC and protobuf types); programs use ps::Client instead.
// Job administration (ConfigureJob, checkpoints, restore orders) is in job_admin.h.
#ifndef PS_CLIENT_RPC_CLIENT_H_
#define PS_CLIENT_RPC_CLIENT_H_

#include <grpcpp/generic/generic_stub.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/data_plane_wire.h"
#include "client/pull_cache.h"
#include "client/push_encoder.h"
#include "common/grpc_status.h"
#include "common/shard_map.h"
#include "common/transport_options.h"
#include "ps/client.h"  // kDefaultRpcTimeout
#include "ps/v1/parameter_server.grpc.pb.h"

namespace ps {

struct RpcClientOptions {
  // Server addresses in shard-map order (slot s lives on servers[s % n]), or a shard map file.
  std::vector<std::string> servers;
  std::string shard_map_file;
  // The scheduler's map: slot s lives on servers[slot_owners[s]] (kNumSlots entries; empty:
  // round-robin), with its epoch (sent with every request; servers refuse older ones).
  std::vector<uint32_t> slot_owners;
  uint64_t shard_epoch = 1;
  std::string job_id = "default";
  uint32_t worker_id = 0;
  // Requests larger than this are cut into parts sent in parallel (keeps every gRPC message
  // small, whatever the tensor size).
  size_t max_part_bytes = 2 << 20;
  // TCP connections per server; parts are spread over them.
  int channels_per_server = 2;
  // Parts of one Pull or Push in flight per server; the next starts when one finishes.
  // (PushPull sends all its parts at once: their pulls may wait for the whole push.)
  int max_parts_in_flight = 2;
  // Deadline of one RPC (a sync/ssp pull may wait this long for slow workers).
  absl::Duration rpc_timeout = kDefaultRpcTimeout;
  // Retries of an RPC that failed with UNAVAILABLE (pushes keep their request id: applied once).
  int max_retries = 3;
  // Refuse a push whose gradients hold a NaN or an Inf before any part is sent (servers refuse
  // such parts too, but only their own: the others would be applied). The same default as
  // ClientOptions; off for servers run with --nonfinite=skip_row, and in the worker daemon's
  // clients, which cannot know the servers' policy and leave it to them.
  bool reject_nonfinite = true;
  // HTTP/2 and TCP settings of the data channels (docs/operations.md, "Transport settings").
  TransportOptions transport;

  absl::Status Validate() const;
};

// Sees what a RpcClient does on the wire, e.g. to export metrics. Called on gRPC's callback
// threads and the caller's: implementations must be thread-safe, cheap, and must not call back
// into the client.
class ClientObserver {
 public:
  virtual ~ClientObserver() = default;
  // A part of a push (or push-pull) the servers answered OK, with the keys it pushed.
  virtual void OnPushAccepted(int64_t keys) = 0;
  // A part of a pull (or push-pull) the servers answered OK, with the keys it pulled.
  virtual void OnPullAnswered(int64_t keys) = 0;
  // A request with a pull succeeded: the clock it pulled at minus the smallest min_clock the
  // servers reported (how far the slowest worker lags; 0 in sync mode).
  virtual void OnPullStaleness(int64_t clocks) = 0;
  // An RPC is tried again (it failed with UNAVAILABLE).
  virtual void OnRetry() = 0;
  // The caller was blocked this long on requests in flight (RpcHandle::Wait(), Clock()).
  virtual void OnBlocked(absl::Duration blocked) = 0;
};

// One table's part of a request. `keys` and the buffers are borrowed until the handle is done.
struct TableOp {
  uint32_t table_id = 0;
  absl::Span<const uint64_t> keys;
  const float* grads = nullptr;  // push: keys.size() * dim gradients
  float* out = nullptr;          // pull: receives keys.size() * dim values
};

// A request in flight (like ps-lite's timestamp). Copyable; Wait() may be called many times.
class RpcHandle {
 public:
  struct State;
  RpcHandle() = default;
  explicit RpcHandle(std::shared_ptr<State> state) : state_(std::move(state)) {}
  // Blocks until every part has answered; the first error, if any.
  absl::Status Wait() const;
  bool Done() const;
  // Waits at most `timeout`; true if done.
  bool WaitFor(absl::Duration timeout) const;
  // After Wait(): the smallest min_clock the servers reported, and the longest pull wait.
  int64_t min_clock() const;
  absl::Duration max_wait() const;
  // Once done: the time from the request's start to its last answer, however long the caller
  // waited for it (an overlapping worker compares it with the time it was blocked). Zero before.
  absl::Duration elapsed() const;

 private:
  std::shared_ptr<State> state_;
};

// Thread-compatible for the clock (one training loop drives it); the async calls themselves may
// overlap: several handles can be in flight at once. Destroying the client waits for calls in
// flight.
class RpcClient {
 public:
  static absl::StatusOr<std::unique_ptr<RpcClient>> Connect(RpcClientOptions options);
  ~RpcClient();

  // Creates a table on every server (idempotent for the same spec).
  absl::Status CreateTable(const v1::TableSpec& spec);
  // Looks a table up (cached): its spec as the servers hold it.
  absl::StatusOr<v1::TableSpec> DescribeTable(uint32_t table_id);

  RpcHandle PullAsync(std::vector<TableOp> ops) { return StartPull(std::move(ops), false); }
  RpcHandle PushAsync(std::vector<TableOp> ops) { return StartPush(std::move(ops), false); }
  // Pushes the gradients of the current clock, advances the clock, pulls at the new clock: one
  // round trip per part. Every server is told of the clock, also those with no keys.
  RpcHandle PushPullAsync(std::vector<TableOp> push_ops, std::vector<TableOp> pull_ops) {
    return StartPushPull(std::move(push_ops), std::move(pull_ops), false);
  }

  // The requests, started; `caller_waits`: the caller waits for the handle at once, and a
  // request of one part then runs on this thread (done when these return).
  RpcHandle StartPull(std::vector<TableOp> ops, bool caller_waits);
  // A prefetch (PullRequest.prefetch): each server reads the rows of its share of the keys
  // from its disk tier into RAM and pins them until a pull reads them; no values come back
  // (the ops' `out` is not used). The keys are copied before this returns.
  RpcHandle StartPrefetch(std::vector<TableOp> ops);
  // `resend`: a failover's re-sent push (PushRequest.resend_parts, client/push_resend.h): every
  // server gets at least one part, each saying how many its server gets.
  RpcHandle StartPush(std::vector<TableOp> ops, bool caller_waits, bool resend = false);
  RpcHandle StartPushPull(std::vector<TableOp> push_ops, std::vector<TableOp> pull_ops,
                          bool caller_waits);

  // The same, waited for. A request of one part (one server, at most max_part_bytes) runs on
  // the calling thread, which reads the answer itself: one thread hop less than an async call.
  absl::Status Pull(std::vector<TableOp> ops) { return StartPull(std::move(ops), true).Wait(); }
  absl::Status Push(std::vector<TableOp> ops) { return StartPush(std::move(ops), true).Wait(); }
  absl::Status PushPull(std::vector<TableOp> push_ops, std::vector<TableOp> pull_ops) {
    return StartPushPull(std::move(push_ops), std::move(pull_ops), true).Wait();
  }
  // Advances this worker's clock by one on every server.
  absl::Status Clock();
  // Forgets the residuals of the tables pushed with TOPK or SIGN (error feedback), and TOPK's
  // velocities (momentum correction): for a job rolled back to a checkpoint, whose replayed
  // steps would otherwise be pushed twice.
  void ResetResiduals() { encoder_.Reset(); }
  // Sum of |residual| of a table pushed with TOPK or SIGN (tests).
  double ResidualL1(uint32_t table_id) { return encoder_.ResidualL1(table_id); }
  // Multiplies the tables' learning rate for the pushes sent from now on (a schedule's factor).
  void SetLearningRateScale(float scale) { lr_scale_.store(scale); }
  // Sets the local clock (a worker that joins a running job adopts the servers' clock for it).
  void SetClock(int64_t clock) { clock_.store(clock); }
  // Reports requests started from now on to `observer` (null: none). Call while no request is
  // in flight; `observer` must outlive the client or be replaced first.
  void set_observer(ClientObserver* observer) { observer_.store(observer); }
  // Cancels every call in flight, queued parts and every later call (their handles finish with
  // CANCELLED): the client is done. Thread-safe: stops a job whose pulls wait on workers that
  // are gone.
  void CancelInFlight();
  bool cancelled() const { return cancelled_.load(); }

  // The push of the last PushPull started, if it failed (or was cancelled): its ops (borrowed
  // from the caller, as when it was sent: read them before the buffers are reused), their
  // tables' dims, its clock and learning-rate factor. nullopt if it succeeded, is still in
  // flight, or there was none.
  struct FailedPush {
    std::vector<TableOp> ops;
    std::vector<int> dims;
    int64_t clock = 0;
    float lr_scale = 1.0f;
  };
  std::optional<FailedPush> FailedPushPull() const;

  int64_t clock() const { return clock_.load(); }
  const RpcClientOptions& options() const { return options_; }
  int num_servers() const { return static_cast<int>(stubs_.size()); }
  // The stub of server `server`'s first channel (calls that are not data-plane parts).
  v1::ParameterServer::Stub* admin_stub(int server) { return stubs_[server][0].get(); }
  // Runs `rpc(server_index, stub, ctx)` against every server in turn, each with a context
  // whose deadline is `timeout` and that waits for the server to be ready; the first error
  // (converted by FromGrpcStatus) wins.
  template <typename Fn>
  absl::Status ForEachServer(absl::Duration timeout, Fn rpc);
  uint32_t worker_id() const { return options_.worker_id; }
  const std::string& job_id() const { return options_.job_id; }
  const ShardMap& shard_map() const { return map_; }

 private:
  using Segment = KeySegment;
  struct Part;
  struct Launcher;
  class Call;
  // Starts the calls of one request, at most `window` per server at a time.
  void Launch(std::vector<std::shared_ptr<Call>> calls, size_t window);
  // The handle of a request of `calls` (done at once, OK, when there are none), launched.
  // `borrowed`: requests among them that borrow the caller's gradients; each counts as one more
  // unit of the handle, finished when gRPC lets go of them. With `caller_waits`, a request of
  // one call runs on this thread (Call::RunHere) and is done when this returns.
  RpcHandle StartRequest(std::vector<std::shared_ptr<Call>> calls,
                         std::shared_ptr<RpcHandle::State> state, size_t window, int borrowed,
                         bool caller_waits);
  // The header of a request at `clock` (request_id left 0).
  RequestHeader Header(int64_t clock);
  explicit RpcClient(RpcClientOptions options, ShardMap map);

  // What the client needs of a table to send and read its values.
  struct TableWire {
    int dim = 0;
    uint64_t num_rows = 0;
    v1::CodecSpec push_codec, pull_codec;
  };
  // Remembers a table's spec; INVALID_ARGUMENT if its codecs are unknown to this client.
  absl::Status Remember(const v1::TableSpec& spec);
  // Returns dims (and, with `tables`, the wire settings) for the ops' tables, describing unknown
  // ones.
  absl::Status ResolveDims(const std::vector<TableOp>& ops, std::vector<int>* dims,
                           std::vector<TableWire>* tables = nullptr);
  // Encodes the push blocks of tables with a push_codec and marks the pull blocks of tables
  // with a pull_codec (their answers are decoded).
  void EncodeSegments(const std::vector<TableOp>& ops, const std::vector<int>& dims,
                      const std::vector<TableWire>& tables, bool push,
                      std::vector<std::vector<Part>>* parts);
  // Groups keys by owning server and cuts them into parts of at most max_part_bytes, as the
  // tables' codecs send them (`tables`: the ops' tables; empty: float32).
  std::vector<std::vector<Part>> Split(const std::vector<TableOp>& ops,
                                       const std::vector<int>& dims, bool with_values,
                                       const std::vector<TableWire>& tables) const;
  // The channel of `part` to `server`, for the data-plane calls (hand-encoded messages).
  grpc::GenericStub* DataStub(int server, size_t part);

  const RpcClientOptions options_;
  const ShardMap map_;
  std::vector<std::vector<std::unique_ptr<v1::ParameterServer::Stub>>> stubs_;  // [server][channel]
  std::vector<std::vector<std::unique_ptr<grpc::GenericStub>>> data_stubs_;     // the same channels
  // Calls in flight. The destructor waits for them: destroying a channel while one of its
  // callbacks still runs (and then frees its ClientContext) corrupts gRPC's call refcounts.
  absl::Mutex calls_mu_;
  int live_calls_ ABSL_GUARDED_BY(calls_mu_) = 0;
  absl::flat_hash_map<Call*, std::weak_ptr<Call>> calls_ ABSL_GUARDED_BY(calls_mu_);
  std::atomic<int64_t> clock_{0};
  std::atomic<float> lr_scale_{1.0f};
  std::atomic<bool> cancelled_{false};
  std::atomic<ClientObserver*> observer_{nullptr};
  std::atomic<uint64_t> next_request_id_;
  // The last PushPull started (FailedPushPull).
  mutable absl::Mutex last_mu_;
  FailedPush last_push_ ABSL_GUARDED_BY(last_mu_);
  std::shared_ptr<RpcHandle::State> last_push_state_ ABSL_GUARDED_BY(last_mu_);
  absl::Mutex dims_mu_;
  absl::flat_hash_map<uint32_t, TableWire> dims_ ABSL_GUARDED_BY(dims_mu_);
  PushEncoder encoder_;
  PullCache pull_cache_;  // rows of tables with delta pulls
};

template <typename Fn>
absl::Status RpcClient::ForEachServer(absl::Duration timeout, Fn rpc) {
  for (int i = 0; i < num_servers(); ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    ctx.set_wait_for_ready(true);
    grpc::Status s = rpc(i, admin_stub(i), &ctx);
    if (!s.ok()) return FromGrpcStatus(s);
  }
  return absl::OkStatus();
}

// Keys 0..n-1 (a whole dense table).
std::vector<uint64_t> DenseKeys(uint64_t n);

}  // namespace ps

#endif  // PS_CLIENT_RPC_CLIENT_H_
