#include "client/rpc_client.h"

#include <grpcpp/completion_queue.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/support/channel_arguments.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_status.h"
#include "common/packed_bytes.h"
#include "common/security.h"
#include "common/status_macros.h"
#include "common/value_codec.h"

// TSan (the sanitizer build): the hand-off of a call from the thread that starts it to the gRPC
// thread that runs its completion goes through libgrpc's lock-free completion queue, which TSan
// cannot see (tests/sanitizers/tsan.supp); these mark it, so that our completion code is still
// checked against everything else.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PS_RPC_CLIENT_TSAN 1
#endif
#endif
#ifdef PS_RPC_CLIENT_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace ps {

absl::Status RpcClientOptions::Validate() const {
  if (servers.empty() && shard_map_file.empty()) {
    return absl::InvalidArgumentError("no servers given (servers or shard_map_file)");
  }
  if (job_id.empty()) return absl::InvalidArgumentError("job_id is empty");
  if (max_part_bytes < 4096) return absl::InvalidArgumentError("max_part_bytes must be >= 4096");
  if (channels_per_server < 1)
    return absl::InvalidArgumentError("channels_per_server must be >= 1");
  if (max_parts_in_flight < 1) {
    return absl::InvalidArgumentError("max_parts_in_flight must be >= 1");
  }
  if (rpc_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("rpc_timeout must be positive");
  }
  return transport.Validate();
}

// ---------------------------------------------------------------------------------------------
// RpcHandle

struct RpcHandle::State {
  // Set before the first part starts; read-only afterwards.
  ClientObserver* observer = nullptr;
  int64_t pull_clock = -1;  // requests with a pull: the clock it pulls at
  const absl::Time start = absl::Now();

  absl::Mutex mu;
  int pending ABSL_GUARDED_BY(mu) = 0;
  absl::Status status ABSL_GUARDED_BY(mu);
  int64_t min_clock ABSL_GUARDED_BY(mu) = std::numeric_limits<int64_t>::max();
  absl::Duration max_wait ABSL_GUARDED_BY(mu);
  absl::Time end ABSL_GUARDED_BY(mu);  // set with the last part's answer
  absl::Notification done;

  void Finish(const absl::Status& s, int64_t part_min_clock, absl::Duration wait) {
    bool last;
    int64_t staleness = -1;
    {
      absl::MutexLock l(&mu);
      if (status.ok() && !s.ok()) status = s;
      min_clock = std::min(min_clock, part_min_clock);
      max_wait = std::max(max_wait, wait);
      last = --pending == 0;
      if (last) end = absl::Now();
      if (last && status.ok() && pull_clock >= 0 &&
          min_clock != std::numeric_limits<int64_t>::max()) {
        staleness = std::max<int64_t>(0, pull_clock - min_clock);
      }
    }
    if (staleness >= 0 && observer != nullptr) observer->OnPullStaleness(staleness);
    if (last) done.Notify();
  }
};

absl::Status RpcHandle::Wait() const {
  if (state_ == nullptr) return absl::FailedPreconditionError("empty handle");
  if (state_->observer != nullptr && !state_->done.HasBeenNotified()) {
    const absl::Time start = absl::Now();
    state_->done.WaitForNotification();
    state_->observer->OnBlocked(absl::Now() - start);
  } else {
    state_->done.WaitForNotification();
  }
  absl::MutexLock l(&state_->mu);
  return state_->status;
}

bool RpcHandle::WaitFor(absl::Duration timeout) const {
  return state_ == nullptr || state_->done.WaitForNotificationWithTimeout(timeout);
}

bool RpcHandle::Done() const { return state_ == nullptr || state_->done.HasBeenNotified(); }

int64_t RpcHandle::min_clock() const {
  absl::MutexLock l(&state_->mu);
  return state_->min_clock;
}

absl::Duration RpcHandle::max_wait() const {
  absl::MutexLock l(&state_->mu);
  return state_->max_wait;
}

absl::Duration RpcHandle::elapsed() const {
  if (state_ == nullptr || !state_->done.HasBeenNotified()) return absl::ZeroDuration();
  absl::MutexLock l(&state_->mu);
  return state_->end - state_->start;
}

// ---------------------------------------------------------------------------------------------
// Splitting

struct RpcClient::Part {
  std::vector<Segment> segments;
};

std::vector<uint64_t> DenseKeys(uint64_t n) {
  std::vector<uint64_t> keys(n);
  for (uint64_t i = 0; i < n; ++i) keys[i] = i;
  return keys;
}

std::vector<std::vector<RpcClient::Part>> RpcClient::Split(
    const std::vector<TableOp>& ops, const std::vector<int>& dims, bool with_values,
    const std::vector<TableWire>& tables) const {
  const int n = static_cast<int>(map_.servers().size());
  // Bytes a key adds to a request: its values (push) or the values it brings back (pull), as
  // its table's codec sends them (averaged over 64 rows: topk and sign send per block). A part
  // holds at most 32x max_part_bytes of float32 whatever the codec (what a server decodes).
  std::vector<size_t> row_bytes(ops.size());
  for (size_t o = 0; o < ops.size(); ++o) {
    const size_t dim = static_cast<size_t>(dims[o]);
    row_bytes[o] = 8 + dim * sizeof(float);
    if (tables.empty()) continue;
    const v1::CodecSpec& codec = with_values ? tables[o].push_codec : tables[o].pull_codec;
    if (codec.codec() != v1::CODEC_NONE) {
      row_bytes[o] = std::max(8 + EncodedBytes(codec, dim * 64) / 64, row_bytes[o] / 32);
    }
  }
  auto key_bytes = [&](int o) { return row_bytes[o]; };
  // First pass: each key's owner, and each server's total, so that a server's request is cut
  // into equal parts (1 MiB + 1 row would otherwise be a full part and a one-row part).
  std::vector<std::vector<int>> owners(ops.size());
  std::vector<size_t> total(n, 0);
  for (size_t o = 0; o < ops.size(); ++o) {
    owners[o].resize(ops[o].keys.size());
    for (size_t i = 0; i < ops[o].keys.size(); ++i) {
      owners[o][i] = map_.OwnerOf(ops[o].table_id, ops[o].keys[i]);
      total[owners[o][i]] += key_bytes(o);
    }
  }
  std::vector<size_t> target(n);
  for (int s = 0; s < n; ++s) {
    const size_t num_parts =
        std::max<size_t>(1, (total[s] + options_.max_part_bytes - 1) / options_.max_part_bytes);
    target[s] = (total[s] + num_parts - 1) / num_parts;
  }
  std::vector<std::vector<Part>> parts(n);
  std::vector<size_t> bytes(n, 0);
  for (int o = 0; o < static_cast<int>(ops.size()); ++o) {
    std::vector<Segment*> open(n, nullptr);
    for (uint32_t i = 0; i < ops[o].keys.size(); ++i) {
      const int s = owners[o][i];
      const bool full = bytes[s] > 0 && bytes[s] + key_bytes(o) > target[s];
      if (parts[s].empty() || full) {
        parts[s].emplace_back();
        bytes[s] = 0;
        open[s] = nullptr;
      }
      if (open[s] == nullptr) {
        parts[s].back().segments.push_back(Segment{o, {}, v1::CODEC_NONE, {}});
        open[s] = &parts[s].back().segments.back();
      }
      open[s]->idx.push_back(i);
      bytes[s] += key_bytes(o);
    }
  }
  return parts;
}

// ---------------------------------------------------------------------------------------------
// One RPC (a part), with its retries.

// Starts a request's parts at most `window` at a time per server, the next when one finishes:
// parts sent all at once share the connection and all arrive at the end, so the server could not
// apply (or the client scatter) one part while the next is on the wire.
struct RpcClient::Launcher {
  absl::Mutex mu;
  std::vector<std::deque<std::shared_ptr<Call>>> queued ABSL_GUARDED_BY(mu);  // per server

  // The next queued part of `server`, or null.
  std::shared_ptr<Call> Next(int server) {
    absl::MutexLock l(&mu);
    if (queued[server].empty()) return nullptr;
    std::shared_ptr<Call> next = std::move(queued[server].front());
    queued[server].pop_front();
    return next;
  }
};

class RpcClient::Call {
  // Counts the call as live from construction until every member (the ClientContext last of
  // all) is destroyed: it is the first member, so it is destroyed last.
  class LiveToken {
   public:
    explicit LiveToken(RpcClient* c) : client_(c) {
      absl::MutexLock l(&client_->calls_mu_);
      ++client_->live_calls_;
    }
    ~LiveToken() {
      absl::MutexLock l(&client_->calls_mu_);
      --client_->live_calls_;
    }

   private:
    RpcClient* const client_;
  };
  const LiveToken live_;

 public:
  enum Kind { kPull, kPush, kPushPull };
  static constexpr const char* kMethods[] = {"/ps.v1.ParameterServer/Pull",
                                             "/ps.v1.ParameterServer/Push",
                                             "/ps.v1.ParameterServer/PushPull"};

  Call(RpcClient* client, Kind kind, int server, size_t index,
       std::shared_ptr<RpcHandle::State> state, std::vector<TableOp> ops, std::vector<int> dims)
      : live_(client),
        client_(client),
        kind_(kind),
        server_(server),
        index_(index),
        state_(std::move(state)),
        ops_(std::move(ops)),
        dims_(std::move(dims)) {}

  // The request, encoded once (a retry sends it again), and the answer.
  grpc::ByteBuffer request;
  std::vector<Segment> pull_segments;  // where the answer's blocks go

  // INVALID_ARGUMENT naming the first key whose gradient holds a NaN or an Inf.
  static absl::Status CheckFinite(const std::vector<TableOp>& ops, const std::vector<int>& dims) {
    for (size_t o = 0; o < ops.size(); ++o) {
      const TableOp& op = ops[o];
      const size_t n = op.keys.size() * static_cast<size_t>(dims[o]);
      if (NonFiniteBits(op.grads, n) != 0) {
        return NonFiniteError(op, dims[o]);
      }
    }
    return absl::OkStatus();
  }

  static absl::Status NonFiniteError(const TableOp& op, int dim) {
    for (size_t i = 0; i < op.keys.size(); ++i) {
      if (NonFiniteBits(op.grads + i * dim, dim) != 0) {
        return absl::InvalidArgumentError(absl::StrCat("push to table ", op.table_id,
                                                       ": the gradient of key ", op.keys[i],
                                                       " holds a NaN or an Inf; nothing was sent"));
      }
    }
    return absl::InvalidArgumentError("a gradient holds a NaN or an Inf; nothing was sent");
  }

  // Starts the RPC; `self` keeps this call alive until it finishes (on a gRPC thread).
  static void Start(std::shared_ptr<Call> self) {
    Call* c = self.get();
    if (!c->Begin(self)) return;
    grpc::GenericStub* stub = c->client_->DataStub(c->server_, c->index_);
    auto done = [self](grpc::Status s) {
#ifdef PS_RPC_CLIENT_TSAN
      __tsan_acquire(self.get());
#endif
      self->OnDone(self, s);
    };
#ifdef PS_RPC_CLIENT_TSAN
    __tsan_release(c);
#endif
    stub->UnaryCall(c->ctx_.get(), kMethods[c->kind_], grpc::StubOptions(), &c->request,
                    &c->response_, done);
  }

  // Runs the RPC, its retries included, on the caller's thread, which waits for the answer on
  // its own completion queue: the thread that reads the answer off the socket is the one that
  // goes on, where a call started by Start() wakes the caller from gRPC's callback thread (one
  // more thread hop per round trip). For a request of one part whose caller waits for it.
  static void RunHere(std::shared_ptr<Call> self) {
    Call* c = self.get();
    grpc::CompletionQueue* cq = ThisThreadsQueue();
    for (;;) {
      if (!c->Begin(self)) return;
      grpc::Status status;
      {
        grpc::GenericStub* stub = c->client_->DataStub(c->server_, c->index_);
        // Lives in the call's arena: destroyed before the context that owns it.
        std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader =
            stub->PrepareUnaryCall(c->ctx_.get(), kMethods[c->kind_], c->request, cq);
        reader->StartCall();
        reader->Finish(&c->response_, &status, c);
        void* tag = nullptr;
        bool ok = false;
        // The queue is this thread's and only this call is on it; Next returns when the call
        // ends (answered, failed, past its deadline or cancelled).
        if (!cq->Next(&tag, &ok) || tag != c) {
          status = grpc::Status(grpc::StatusCode::INTERNAL, "the client's completion queue failed");
        }
      }
      if (!c->Retry(status)) {
        c->Complete(status);
        return;
      }
    }
  }

  void set_launcher(std::shared_ptr<Launcher> launcher) { launcher_ = std::move(launcher); }
  // Keys this part pushes and pulls (reported to the observer when it succeeds).
  void set_num_keys(int64_t pushed, int64_t pulled) {
    pushed_keys_ = pushed;
    pulled_keys_ = pulled;
  }
  int server() const { return server_; }

  ~Call() {
    absl::MutexLock l(&client_->calls_mu_);
    client_->calls_.erase(this);
  }

  // Cancels the RPC in flight. The caller holds a reference to this call and no client lock:
  // gRPC may run the completion callback inline.
  void TryCancel() {
    absl::MutexLock l(&ctx_mu_);
    if (ctx_ != nullptr) ctx_->TryCancel();
  }

 private:
  // A retry replaces the context; ctx_mu_ keeps TryCancel off a context being replaced.
  void SetContext(std::unique_ptr<grpc::ClientContext> ctx) {
    absl::MutexLock l(&ctx_mu_);
    ctx_ = std::move(ctx);
  }

  // This thread's completion queue for RunHere (shut down and drained when the thread ends).
  static grpc::CompletionQueue* ThisThreadsQueue() {
    struct Queue {
      grpc::CompletionQueue cq;
      ~Queue() {
        cq.Shutdown();
        void* tag;
        bool ok;
        while (cq.Next(&tag, &ok)) {
        }
      }
    };
    thread_local Queue queue;
    return &queue.cq;
  }

  // Registers an attempt and gives it a fresh context. False if the client was cancelled: the
  // call is then finished (CANCELLED) instead of reaching a server.
  bool Begin(const std::shared_ptr<Call>& self) {
    {
      absl::MutexLock l(&client_->calls_mu_);
      client_->calls_.emplace(this, self);
    }
    if (client_->cancelled_.load()) {
      // Cancelled: queued parts and retries end here instead of reaching a server.
      Complete(grpc::Status(grpc::StatusCode::CANCELLED, "the client was cancelled"));
      return false;
    }
    SetContext(std::make_unique<grpc::ClientContext>());
    ctx_->set_deadline(absl::ToChronoTime(absl::Now() + client_->options_.rpc_timeout));
    ctx_->set_wait_for_ready(true);
    if (client_->cancelled_.load()) ctx_->TryCancel();  // CancelInFlight raced us
    response_.Clear();
    return true;
  }

  // True if an attempt that ended with `s` is to be sent again (a server unreachable).
  bool Retry(const grpc::Status& s) {
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE ||
        attempts_++ >= client_->options_.max_retries) {
      return false;
    }
    if (state_->observer != nullptr) state_->observer->OnRetry();
    return true;
  }

  void OnDone(std::shared_ptr<Call> self, const grpc::Status& s) {
    if (Retry(s)) {
      Start(std::move(self));
      return;
    }
    Complete(s);
  }

  // The part's end: decodes the answer, reports it, starts the next queued part of its server
  // and finishes its unit of the handle.
  void Complete(const grpc::Status& s) {
    ClientObserver* const observer = state_->observer;
    absl::Status status = FromGrpcStatus(s);
    if (!status.ok()) {
      status = WithPrefix(status, absl::StrCat("server ", client_->map_.servers()[server_]));
    }
    int64_t min_clock = std::numeric_limits<int64_t>::max();
    absl::Duration wait;
    if (status.ok() && kind_ != kPush) {
      int64_t wait_micros = 0;
      status = DecodePullResponse(&response_, ops_, dims_, pull_segments, &client_->pull_cache_,
                                  &min_clock, &wait_micros);
      wait = absl::Microseconds(wait_micros);
    }
    response_.Clear();
    if (status.ok() && observer != nullptr) {
      if (pushed_keys_ > 0) observer->OnPushAccepted(pushed_keys_);
      if (pulled_keys_ > 0) observer->OnPullAnswered(pulled_keys_);
    }
    if (launcher_ != nullptr) {
      // Queued parts hold the launcher; the last one to leave the queue breaks the cycle.
      std::shared_ptr<Call> next = launcher_->Next(server_);
      launcher_.reset();
      if (next != nullptr) Start(std::move(next));
    }
    state_->Finish(status, min_clock, wait);
  }

  RpcClient* const client_;
  const Kind kind_;
  const int server_;
  const size_t index_;
  std::shared_ptr<RpcHandle::State> state_;
  const std::vector<TableOp> ops_;  // pull ops (kPull, kPushPull)
  const std::vector<int> dims_;
  absl::Mutex ctx_mu_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::shared_ptr<Launcher> launcher_;  // set while parts of its server wait in the queue
  grpc::ByteBuffer response_;
  int attempts_ = 0;
  int64_t pushed_keys_ = 0;
  int64_t pulled_keys_ = 0;
};

// ---------------------------------------------------------------------------------------------
// RpcClient

absl::StatusOr<std::unique_ptr<RpcClient>> RpcClient::Connect(RpcClientOptions options) {
  PS_RETURN_IF_ERROR(options.Validate());
  ShardMap map;
  if (!options.shard_map_file.empty()) {
    PS_ASSIGN_OR_RETURN(map, ShardMap::FromFile(options.shard_map_file));
  } else {
    map = ShardMap::RoundRobin(options.servers, options.shard_epoch);
  }
  if (!options.slot_owners.empty()) {
    PS_ASSIGN_OR_RETURN(
        map, ShardMap::FromOwners(options.servers, options.slot_owners, options.shard_epoch));
  }
  return std::unique_ptr<RpcClient>(new RpcClient(std::move(options), std::move(map)));
}

RpcClient::RpcClient(RpcClientOptions options, ShardMap map)
    : options_(std::move(options)),
      map_(std::move(map)),
      next_request_id_(static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()))) {
  for (const std::string& address : map_.servers()) {
    std::vector<std::unique_ptr<v1::ParameterServer::Stub>> channels;
    std::vector<std::unique_ptr<grpc::GenericStub>> data;
    for (int c = 0; c < options_.channels_per_server; ++c) {
      grpc::ChannelArguments args;
      args.SetMaxReceiveMessageSize(-1);
      args.SetMaxSendMessageSize(-1);
      // A distinct channel per index: separate TCP connections, not one shared subchannel.
      args.SetInt("ps.channel_index", c);
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      ApplyTransportOptions(options_.transport, &args);
      std::shared_ptr<grpc::Channel> channel = DialChannel(address, args);
      channels.push_back(v1::ParameterServer::NewStub(channel));
      data.push_back(std::make_unique<grpc::GenericStub>(channel));
    }
    stubs_.push_back(std::move(channels));
    data_stubs_.push_back(std::move(data));
  }
}

RpcClient::~RpcClient() {
  absl::MutexLock l(&calls_mu_);
  calls_mu_.Await(absl::Condition(
      +[](int* live) { return *live == 0; }, &live_calls_));
}

grpc::GenericStub* RpcClient::DataStub(int server, size_t part) {
  return data_stubs_[server][part % data_stubs_[server].size()].get();
}

void RpcClient::CancelInFlight() {
  cancelled_ = true;
  std::vector<std::shared_ptr<Call>> calls;
  {
    absl::MutexLock l(&calls_mu_);
    for (auto& [raw, weak] : calls_) {
      if (auto call = weak.lock()) calls.push_back(std::move(call));
    }
  }
  for (auto& call : calls) call->TryCancel();
}

absl::Status RpcClient::CreateTable(const v1::TableSpec& spec) {
  v1::CreateTableRequest req;
  *req.mutable_spec() = spec;
  PS_RETURN_IF_ERROR(ForEachServer(
      options_.rpc_timeout, [&](int, v1::ParameterServer::Stub* stub, grpc::ClientContext* ctx) {
        v1::CreateTableResponse resp;
        return stub->CreateTable(ctx, req, &resp);
      }));
  return Remember(spec);
}

absl::Status RpcClient::Remember(const v1::TableSpec& spec) {
  for (const v1::CodecSpec* c : {&spec.push_codec(), &spec.pull_codec()}) {
    if (!v1::ValueCodec_IsValid(c->codec())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "table ", spec.table_id(), " ('", spec.name(), "') sends its values as ",
          CodecName(c->codec()), ", which this client does not know: use a newer client"));
    }
  }
  TableWire wire;
  wire.dim = static_cast<int>(spec.dim());
  wire.num_rows = spec.num_rows();
  wire.push_codec = spec.push_codec();
  wire.pull_codec = spec.pull_codec();
  absl::MutexLock l(&dims_mu_);
  dims_[spec.table_id()] = std::move(wire);
  return absl::OkStatus();
}

absl::StatusOr<v1::TableSpec> RpcClient::DescribeTable(uint32_t table_id) {
  v1::DescribeTableRequest req;
  req.set_table_id(table_id);
  v1::DescribeTableResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  ctx.set_wait_for_ready(true);
  PS_RETURN_IF_ERROR(FromGrpcStatus(admin_stub(0)->DescribeTable(&ctx, req, &resp)));
  PS_RETURN_IF_ERROR(Remember(resp.spec()));
  return resp.spec();
}

absl::Status RpcClient::ResolveDims(const std::vector<TableOp>& ops, std::vector<int>* dims,
                                    std::vector<TableWire>* tables) {
  dims->resize(ops.size());
  if (tables != nullptr) tables->resize(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    for (int attempt = 0;; ++attempt) {
      {
        absl::MutexLock l(&dims_mu_);
        auto it = dims_.find(ops[i].table_id);
        if (it != dims_.end()) {
          (*dims)[i] = it->second.dim;
          if (tables != nullptr) (*tables)[i] = it->second;
          break;
        }
      }
      if (attempt > 0) return absl::InternalError("a described table was not remembered");
      PS_RETURN_IF_ERROR(DescribeTable(ops[i].table_id).status());
    }
  }
  return absl::OkStatus();
}

void RpcClient::EncodeSegments(const std::vector<TableOp>& ops, const std::vector<int>& dims,
                               const std::vector<TableWire>& tables, bool push,
                               std::vector<std::vector<Part>>* parts) {
  for (std::vector<Part>& server : *parts) {
    for (Part& part : server) {
      for (Segment& seg : part.segments) {
        const TableWire& t = tables[seg.op];
        if (!push) {
          seg.codec = t.pull_codec.codec();
          if (t.pull_codec.delta()) {
            seg.delta = true;
            seg.num_rows = t.num_rows;
            seg.since = pull_cache_.Since(ops[seg.op], seg, dims[seg.op], t.num_rows);
          }
        } else if (t.push_codec.codec() != v1::CODEC_NONE) {
          encoder_.Encode(t.push_codec, ops[seg.op], dims[seg.op], t.num_rows, &seg);
        }
      }
    }
  }
}

namespace {
RpcHandle FailedHandle(const absl::Status& s) {
  auto state = std::make_shared<RpcHandle::State>();
  {
    absl::MutexLock l(&state->mu);  // not shared yet, but pending is guarded by mu
    state->pending = 1;
  }
  state->Finish(s, 0, absl::ZeroDuration());
  return RpcHandle(std::move(state));
}
}  // namespace

RpcHandle RpcClient::StartRequest(std::vector<std::shared_ptr<Call>> calls,
                                  std::shared_ptr<RpcHandle::State> state, size_t window,
                                  int borrowed, bool caller_waits) {
  if (calls.empty()) return FailedHandle(absl::OkStatus());
  {
    absl::MutexLock l(&state->mu);
    state->pending = static_cast<int>(calls.size()) + borrowed;
  }
  if (caller_waits && calls.size() == 1) {
    const absl::Time start = absl::Now();
    Call::RunHere(std::move(calls[0]));
    if (state->observer != nullptr) state->observer->OnBlocked(absl::Now() - start);
    return RpcHandle(std::move(state));
  }
  Launch(std::move(calls), window);
  return RpcHandle(std::move(state));
}

void RpcClient::Launch(std::vector<std::shared_ptr<Call>> calls, size_t window) {
  auto launcher = std::make_shared<Launcher>();
  std::vector<std::shared_ptr<Call>> now;
  {
    absl::MutexLock l(&launcher->mu);
    launcher->queued.resize(stubs_.size());
    std::vector<size_t> started(stubs_.size(), 0);
    for (auto& c : calls) {
      const int server = c->server();
      c->set_launcher(launcher);
      if (started[server] < window) {
        ++started[server];
        now.push_back(std::move(c));
      } else {
        launcher->queued[server].push_back(std::move(c));
      }
    }
  }
  for (auto& c : now) Call::Start(std::move(c));
}

namespace {
int64_t NumKeys(const std::vector<KeySegment>& segments) {
  int64_t n = 0;
  for (const KeySegment& seg : segments) n += static_cast<int64_t>(seg.idx.size());
  return n;
}

// Finishes one unit of `state` (counted in its pending parts) when gRPC lets go of the caller's
// gradients that a request borrowed: the handle is not done before.
std::function<void()> ReleaseUnit(const std::shared_ptr<RpcHandle::State>& state) {
  return [state] {
    state->Finish(absl::OkStatus(), std::numeric_limits<int64_t>::max(), absl::ZeroDuration());
  };
}
}  // namespace

RequestHeader RpcClient::Header(int64_t clock) {
  RequestHeader h;
  h.job_id = options_.job_id;
  h.worker_id = options_.worker_id;
  h.clock = clock;
  h.shard_epoch = map_.epoch();
  h.lr_scale = lr_scale_.load();
  return h;
}

RpcHandle RpcClient::StartPull(std::vector<TableOp> ops, bool caller_waits) {
  std::vector<int> dims;
  std::vector<TableWire> tables;
  absl::Status s = ResolveDims(ops, &dims, &tables);
  if (!s.ok()) return FailedHandle(s);
  auto parts = Split(ops, dims, /*with_values=*/false, tables);
  EncodeSegments(ops, dims, tables, /*push=*/false, &parts);
  std::vector<std::shared_ptr<Call>> calls;
  auto state = std::make_shared<RpcHandle::State>();
  state->observer = observer_.load();
  state->pull_clock = clock_.load();
  const RequestHeader header = Header(clock_.load());
  for (int server = 0; server < static_cast<int>(parts.size()); ++server) {
    for (size_t p = 0; p < parts[server].size(); ++p) {
      auto call = std::make_shared<Call>(this, Call::kPull, server, p, state, ops, dims);
      wire::MessageBuilder b(nullptr);  // borrows nothing: keys are copied
      EncodePullRequest(header, ops, dims, parts[server][p].segments, &b);
      call->request = b.Finish();
      call->set_num_keys(0, NumKeys(parts[server][p].segments));
      call->pull_segments = std::move(parts[server][p].segments);
      calls.push_back(std::move(call));
    }
  }
  return StartRequest(std::move(calls), std::move(state), options_.max_parts_in_flight, 0,
                      caller_waits);
}

RpcHandle RpcClient::StartPrefetch(std::vector<TableOp> ops) {
  std::vector<int> dims;
  absl::Status s = ResolveDims(ops, &dims);
  if (!s.ok()) return FailedHandle(s);
  // Parts cut as a pull's of float32 values would be (a prefetch carries keys only): at most
  // max_part_bytes / 12 keys each, under the server's DataPlane::kMaxPrefetchKeys.
  auto parts = Split(ops, dims, /*with_values=*/false, {});
  std::vector<std::shared_ptr<Call>> calls;
  auto state = std::make_shared<RpcHandle::State>();
  state->observer = observer_.load();
  RequestHeader header = Header(clock_.load());
  header.prefetch = true;
  for (int server = 0; server < static_cast<int>(parts.size()); ++server) {
    for (size_t p = 0; p < parts[server].size(); ++p) {
      // No pull segments: the answer holds no block.
      auto call = std::make_shared<Call>(this, Call::kPull, server, p, state, ops, dims);
      wire::MessageBuilder b(nullptr);  // borrows nothing: keys are copied
      EncodePullRequest(header, ops, dims, parts[server][p].segments, &b);
      call->request = b.Finish();
      calls.push_back(std::move(call));
    }
  }
  return StartRequest(std::move(calls), std::move(state), options_.max_parts_in_flight, 0,
                      /*caller_waits=*/false);
}

RpcHandle RpcClient::StartPush(std::vector<TableOp> ops, bool caller_waits, bool resend) {
  std::vector<int> dims;
  std::vector<TableWire> tables;
  absl::Status s = ResolveDims(ops, &dims, &tables);
  if (!s.ok()) return FailedHandle(s);
  for (const TableOp& op : ops) {
    if (op.grads == nullptr && !op.keys.empty()) {
      return FailedHandle(absl::InvalidArgumentError(
          absl::StrCat("push to table ", op.table_id, " has no gradients")));
    }
  }
  if (options_.reject_nonfinite) {
    s = Call::CheckFinite(ops, dims);
    if (!s.ok()) return FailedHandle(s);
  }
  auto parts = Split(ops, dims, /*with_values=*/true, tables);
  EncodeSegments(ops, dims, tables, /*push=*/true, &parts);
  std::vector<std::shared_ptr<Call>> calls;
  auto state = std::make_shared<RpcHandle::State>();
  state->observer = observer_.load();
  RequestHeader header = Header(clock_.load());
  int borrowed = 0;
  const std::vector<Segment> none;
  for (int server = 0; server < static_cast<int>(parts.size()); ++server) {
    // A re-send reaches every server (an empty part where it has no keys there): each one that
    // took slots over waits for every owing worker's.
    const size_t n = resend ? std::max<size_t>(parts[server].size(), 1) : parts[server].size();
    header.resend_parts = resend ? static_cast<uint32_t>(n) : 0;
    for (size_t p = 0; p < n; ++p) {
      const std::vector<Segment>& segments =
          p < parts[server].size() ? parts[server][p].segments : none;
      auto call =
          std::make_shared<Call>(this, Call::kPush, server, p, state, std::vector<TableOp>(), dims);
      header.request_id = next_request_id_++;
      wire::MessageBuilder b(ReleaseUnit(state));
      EncodePushRequest(header, ops, dims, segments, &b);
      borrowed += b.borrowed() ? 1 : 0;
      call->request = b.Finish();
      call->set_num_keys(NumKeys(segments), 0);
      calls.push_back(std::move(call));
    }
  }
  return StartRequest(std::move(calls), std::move(state), options_.max_parts_in_flight, borrowed,
                      caller_waits);
}

RpcHandle RpcClient::StartPushPull(std::vector<TableOp> push_ops, std::vector<TableOp> pull_ops,
                                   bool caller_waits) {
  std::vector<int> push_dims, pull_dims;
  std::vector<TableWire> push_tables, pull_tables;
  absl::Status s = ResolveDims(push_ops, &push_dims, &push_tables);
  if (s.ok()) s = ResolveDims(pull_ops, &pull_dims, &pull_tables);
  if (s.ok() && options_.reject_nonfinite) s = Call::CheckFinite(push_ops, push_dims);
  if (!s.ok()) return FailedHandle(s);
  auto push_parts = Split(push_ops, push_dims, true, push_tables);
  auto pull_parts = Split(pull_ops, pull_dims, false, pull_tables);
  EncodeSegments(push_ops, push_dims, push_tables, /*push=*/true, &push_parts);
  EncodeSegments(pull_ops, pull_dims, pull_tables, /*push=*/false, &pull_parts);
  // The clock advances once every part is built (a refused push leaves it where it was).
  const int64_t clock = clock_.load();
  std::vector<std::shared_ptr<Call>> calls;
  auto state = std::make_shared<RpcHandle::State>();
  state->observer = observer_.load();
  state->pull_clock = pull_ops.empty() ? -1 : clock + 1;
  RequestHeader header = Header(clock);
  const std::vector<Segment> none;
  int borrowed = 0;
  for (int server = 0; server < static_cast<int>(push_parts.size()); ++server) {
    // Every server hears of the clock: at least one part each.
    const size_t n =
        std::max<size_t>({push_parts[server].size(), pull_parts[server].size(), size_t{1}});
    for (size_t p = 0; p < n; ++p) {
      auto call =
          std::make_shared<Call>(this, Call::kPushPull, server, p, state, pull_ops, pull_dims);
      const std::vector<Segment>& pushed =
          p < push_parts[server].size() ? push_parts[server][p].segments : none;
      if (p < pull_parts[server].size()) {
        call->pull_segments = std::move(pull_parts[server][p].segments);
      }
      header.request_id = next_request_id_++;
      wire::MessageBuilder b(ReleaseUnit(state));
      EncodePushPullRequest(header, static_cast<uint32_t>(n), push_ops, push_dims, pushed, pull_ops,
                            pull_dims, call->pull_segments, &b);
      borrowed += b.borrowed() ? 1 : 0;
      call->request = b.Finish();
      call->set_num_keys(NumKeys(pushed), NumKeys(call->pull_segments));
      calls.push_back(std::move(call));
    }
  }
  clock_.fetch_add(1);
  {
    absl::MutexLock l(&last_mu_);
    last_push_.ops = push_ops;
    last_push_.dims = push_dims;
    last_push_.clock = clock;
    last_push_.lr_scale = header.lr_scale;
    last_push_state_ = state;
  }
  // All parts at once: a PushPull part's pull may wait for the clock to advance, which needs
  // every part of this worker to have arrived.
  const size_t all = calls.size();
  return StartRequest(std::move(calls), std::move(state), all, borrowed, caller_waits);
}

std::optional<RpcClient::FailedPush> RpcClient::FailedPushPull() const {
  absl::MutexLock l(&last_mu_);
  if (last_push_state_ == nullptr) return std::nullopt;
  const RpcHandle handle(last_push_state_);
  if (!handle.Done() || handle.Wait().ok()) return std::nullopt;
  return last_push_;
}

absl::Status RpcClient::Clock() {
  v1::ClockRequest req;
  req.set_job_id(options_.job_id);
  req.set_worker_id(options_.worker_id);
  req.set_clock(clock_.load() + 1);
  const absl::Time start = absl::Now();
  absl::Status s = ForEachServer(
      options_.rpc_timeout, [&](int, v1::ParameterServer::Stub* stub, grpc::ClientContext* ctx) {
        v1::ClockResponse resp;
        return stub->Clock(ctx, req, &resp);
      });
  if (ClientObserver* observer = observer_.load(); observer != nullptr) {
    observer->OnBlocked(absl::Now() - start);
  }
  PS_RETURN_IF_ERROR(s);
  clock_.fetch_add(1);
  return absl::OkStatus();
}

}  // namespace ps
