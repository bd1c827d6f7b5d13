// The public client library (include/ps/client.h) over the data-plane engine (RpcClient):
// converts the public types to the protocol's, and validates every argument (sizes, key
// ranges, names, a closed client) before anything reaches the wire.
#include "ps/client.h"

#include <atomic>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/base/call_once.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/client_internal.h"
#include "client/job_admin.h"
#include "client/rpc_client.h"
#include "client/table_spec.h"
#include "common/grpc_status.h"
#include "common/printable.h"
#include "common/process_tuning.h"
#include "common/status_macros.h"
#include "common/table_features.h"

namespace ps {
namespace {

Table FromProto(const v1::TableSpec& spec) {
  Table t;
  t.id = spec.table_id();
  t.name = spec.name();
  t.kind = spec.kind() == v1::DENSE ? TableKind::kDense : TableKind::kSparse;
  t.dim = spec.dim();
  t.num_rows = spec.num_rows();
  return t;
}

v1::ConsistencySpec ToProto(Consistency mode, int staleness) {
  v1::ConsistencySpec p;
  switch (mode) {
    case Consistency::kSync:
      p.set_mode(v1::ConsistencySpec::SYNC);
      break;
    case Consistency::kSsp:
      p.set_mode(v1::ConsistencySpec::SSP);
      p.set_staleness(staleness);
      break;
    case Consistency::kAsync:
      p.set_mode(v1::ConsistencySpec::ASYNC);
      break;
  }
  return p;
}

const char* KindName(TableKind kind) { return kind == TableKind::kDense ? "dense" : "sparse"; }

// If a key appears more than once in `keys`: the distinct keys in order of first appearance
// into `unique`, and each key's index among them into `slot`; true. False (nothing written)
// when the keys are distinct, which strictly increasing keys (a dense table's) show at once.
bool Deduplicate(absl::Span<const uint64_t> keys, std::vector<uint64_t>* unique,
                 std::vector<uint32_t>* slot) {
  bool increasing = true;
  for (size_t i = 1; i < keys.size() && increasing; ++i) increasing = keys[i - 1] < keys[i];
  if (increasing) return false;
  absl::flat_hash_map<uint64_t, uint32_t> index;
  index.reserve(keys.size());
  slot->resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto [it, fresh] = index.try_emplace(keys[i], static_cast<uint32_t>(unique->size()));
    if (fresh) unique->push_back(keys[i]);
    (*slot)[i] = it->second;
  }
  if (unique->size() == keys.size()) {
    unique->clear();
    slot->clear();
    return false;
  }
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Value types

Initializer Initializer::Constant(float value) {
  Initializer i;
  i.kind = Kind::kConstant;
  i.value = value;
  return i;
}

Initializer Initializer::Uniform(float low, float high, uint64_t seed) {
  Initializer i;
  i.kind = Kind::kUniform;
  i.low = low;
  i.high = high;
  i.seed = seed;
  return i;
}

Initializer Initializer::Normal(float stddev, uint64_t seed) {
  Initializer i;
  i.kind = Kind::kNormal;
  i.stddev = stddev;
  i.seed = seed;
  return i;
}

Optimizer Optimizer::Sgd(float learning_rate) {
  Optimizer o;
  o.learning_rate = learning_rate;
  return o;
}

Optimizer Optimizer::Momentum(float learning_rate, float momentum) {
  Optimizer o;
  o.kind = Kind::kMomentum;
  o.learning_rate = learning_rate;
  o.momentum = momentum;
  return o;
}

Optimizer Optimizer::Adagrad(float learning_rate) {
  Optimizer o;
  o.kind = Kind::kAdagrad;
  o.learning_rate = learning_rate;
  return o;
}

Optimizer Optimizer::Adam(float learning_rate) {
  Optimizer o;
  o.kind = Kind::kAdam;
  o.learning_rate = learning_rate;
  return o;
}

Optimizer Optimizer::Ftrl(float alpha, float l1, float l2) {
  Optimizer o;
  o.kind = Kind::kFtrl;
  o.learning_rate = alpha;
  o.l1 = l1;
  o.l2 = l2;
  return o;
}

void TuneProcess() { TuneProcessForServing(); }

namespace {
// The payload that marks a step's interruption (an ABORTED from a server is not one).
constexpr char kStepInterruptedPayload[] = "type.paramserver.dev/ps.StepInterrupted";
}  // namespace

absl::Status StepInterruptedError(const absl::Status& cause) {
  absl::Status s = absl::AbortedError(absl::StrCat(
      "step interrupted: ", absl::StatusCodeToString(cause.code()), ": ", cause.message(),
      "; the step is skipped (a pull's buffer is incomplete) and run again after recovery"));
  s.SetPayload(kStepInterruptedPayload, absl::Cord("1"));
  return s;
}

bool IsStepInterrupted(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAborted &&
         status.GetPayload(kStepInterruptedPayload).has_value();
}

uint32_t TableIdFor(const std::string& job_id, const std::string& name) {
  // FNV-1a over "job_id\0name", folded to 31 bits.
  uint64_t h = 14695981039346656037ull;
  auto mix = [&h](unsigned char c) {
    h ^= c;
    h *= 1099511628211ull;
  };
  for (char c : job_id) mix(static_cast<unsigned char>(c));
  mix(0);
  for (char c : name) mix(static_cast<unsigned char>(c));
  const uint32_t id = static_cast<uint32_t>((h ^ (h >> 31)) & 0x7fffffffu);
  return id == 0 ? 1 : id;
}

absl::Status ClientOptions::Validate() const {
  if (servers.empty()) return absl::InvalidArgumentError("no servers given");
  for (const std::string& s : servers) {
    if (s.empty()) return absl::InvalidArgumentError("a server address is empty");
  }
  PS_RETURN_IF_ERROR(CheckJobId(job_id));
  if (num_workers < 1) return absl::InvalidArgumentError("num_workers must be >= 1");
  if (worker_id >= num_workers) {
    return absl::InvalidArgumentError(absl::StrCat("worker_id ", worker_id, " is not in 0..",
                                                   num_workers - 1, " (num_workers ", num_workers,
                                                   ")"));
  }
  if (staleness < 0) return absl::InvalidArgumentError("staleness must be >= 0");
  if (rpc_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("rpc_timeout must be positive");
  }
  if (connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("connect_timeout must be positive");
  }
  if (max_retries < 0) return absl::InvalidArgumentError("max_retries must be >= 0");
  if (max_part_bytes < 4096) return absl::InvalidArgumentError("max_part_bytes must be >= 4096");
  if (channels_per_server < 1) {
    return absl::InvalidArgumentError("channels_per_server must be >= 1");
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Pending

struct Pending::Impl {
  Impl() = default;
  explicit Impl(absl::Status s) : early(std::move(s)) {}
  absl::Status early;  // a request refused before it was sent
  RpcHandle handle;
  bool started = false;
  std::shared_ptr<RpcClient> engine;  // kept while the request lives (a Session swaps them)
  std::shared_ptr<SessionLink> link;  // a Session's client: it takes the failures of lost servers
  uint64_t generation = 0;            // link->generation() when the request was sent
  // What the library made for the request: deduplicated keys, summed gradients, a pull's unique
  // rows. They live as long as the request.
  std::vector<std::vector<uint64_t>> keys;
  std::vector<std::vector<float>> values;
  // Copies deduplicated pulls' rows into the callers' buffers, once, after success.
  std::vector<std::function<void()>> scatters;
  absl::once_flag scattered;
};

Pending::Pending() = default;
Pending::~Pending() = default;
Pending::Pending(const Pending&) = default;
Pending& Pending::operator=(const Pending&) = default;
Pending::Pending(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

absl::Status Pending::Wait() const {
  if (impl_ == nullptr) return absl::FailedPreconditionError("this Pending holds no request");
  if (!impl_->started) return impl_->early;
  absl::Status s = impl_->handle.Wait();
  if (!s.ok() && impl_->link != nullptr) {
    // Sent before the session's latest recovery: its step was cut short already.
    if (impl_->generation != impl_->link->generation()) return StepInterruptedError(s);
    // A lost server: the step is cut short (a pull's buffers are incomplete).
    if (impl_->link->Absorb(s)) return StepInterruptedError(s);
  }
  if (s.ok() && !impl_->scatters.empty()) {
    absl::call_once(impl_->scattered, [this] {
      for (auto& scatter : impl_->scatters) scatter();
    });
  }
  return s;
}

bool Pending::WaitFor(absl::Duration timeout) const {
  if (impl_ == nullptr || !impl_->started) return true;
  return impl_->handle.WaitFor(timeout);
}

bool Pending::Done() const { return impl_ == nullptr || !impl_->started || impl_->handle.Done(); }

// ---------------------------------------------------------------------------------------------
// Client

class Client::Impl {
 public:
  Impl(ClientOptions options, std::shared_ptr<RpcClient> rpc,
       std::shared_ptr<SessionLink> link = nullptr)
      : options_(std::move(options)), rpc_(std::move(rpc)), link_(std::move(link)) {}

  const ClientOptions& options() const { return options_; }
  // The engine requests go to (a Session swaps it on a new shard map).
  std::shared_ptr<RpcClient> engine() const {
    absl::MutexLock l(&mu_);
    return rpc_;
  }
  RpcClient& rpc() { return *engine(); }
  std::shared_ptr<RpcClient> Swap(std::shared_ptr<RpcClient> engine) {
    std::shared_ptr<RpcClient> old;
    {
      absl::MutexLock l(&mu_);
      old = std::move(rpc_);
      rpc_ = std::move(engine);
    }
    if (old != nullptr) old->CancelInFlight();
    return old;
  }
  const std::shared_ptr<SessionLink>& link() const { return link_; }
  bool closed() const { return closed_.load(); }
  void Close() {
    closed_ = true;
    engine()->CancelInFlight();
  }

  absl::Status CheckOpen() const {
    if (closed_.load()) return absl::FailedPreconditionError("the client is closed");
    return absl::OkStatus();
  }

  // A pull, push or push-pull request, sent. `caller_waits`: the caller waits for it at once
  // (then a request of one part runs on the caller's thread: RpcClient::StartPull).
  std::shared_ptr<Pending::Impl> Pull(std::vector<PullOp> ops, bool caller_waits) {
    auto pending = std::make_shared<Pending::Impl>();
    std::vector<TableOp> rpc_ops;
    pending->early = CheckOpen();
    if (pending->early.ok()) pending->early = ToPullOps(ops, pending.get(), &rpc_ops);
    Start(pending.get(),
          [&](RpcClient& rpc) { return rpc.StartPull(std::move(rpc_ops), caller_waits); });
    return pending;
  }
  std::shared_ptr<Pending::Impl> Push(std::vector<PushOp> ops, bool caller_waits) {
    auto pending = std::make_shared<Pending::Impl>();
    std::vector<TableOp> rpc_ops;
    pending->early = CheckOpen();
    if (pending->early.ok()) pending->early = ToPushOps(ops, pending.get(), &rpc_ops);
    Start(pending.get(),
          [&](RpcClient& rpc) { return rpc.StartPush(std::move(rpc_ops), caller_waits); });
    return pending;
  }
  std::shared_ptr<Pending::Impl> PushPull(std::vector<PushOp> push, std::vector<PullOp> pull,
                                          bool caller_waits) {
    auto pending = std::make_shared<Pending::Impl>();
    std::vector<TableOp> push_ops, pull_ops;
    pending->early = CheckOpen();
    if (pending->early.ok()) pending->early = ToPushOps(push, pending.get(), &push_ops);
    if (pending->early.ok()) pending->early = ToPullOps(pull, pending.get(), &pull_ops);
    Start(pending.get(), [&](RpcClient& rpc) {
      return rpc.StartPushPull(std::move(push_ops), std::move(pull_ops), caller_waits);
    });
    return pending;
  }

  // A prefetch (RpcClient::StartPrefetch), sent; its keys are copied before this returns.
  std::shared_ptr<Pending::Impl> Prefetch(const Table& table, absl::Span<const uint64_t> keys) {
    auto pending = std::make_shared<Pending::Impl>();
    pending->early = CheckOpen();
    if (pending->early.ok()) {
      pending->early = CheckOp("prefetch", table, keys, keys.size() * size_t{table.dim});
    }
    std::vector<TableOp> ops(1);
    ops[0].table_id = table.id;
    ops[0].keys = keys;
    std::vector<uint64_t> unique;
    std::vector<uint32_t> slot;
    if (pending->early.ok() && Deduplicate(keys, &unique, &slot)) {  // servers refuse repeats
      pending->keys.push_back(std::move(unique));
      ops[0].keys = pending->keys.back();
    }
    Start(pending.get(), [&](RpcClient& rpc) { return rpc.StartPrefetch(std::move(ops)); });
    return pending;
  }

  // Sends a request (unless refused early, or not sent in an interrupted step of a Session).
  template <typename Send>
  void Start(Pending::Impl* pending, Send send) {
    pending->link = link_;
    if (!pending->early.ok()) return;
    if (link_ != nullptr) pending->generation = link_->generation();
    if (link_ != nullptr && link_->interrupted()) {  // not sent: the step is cut short
      pending->early = link_->InterruptedStatus();
      return;
    }
    pending->engine = engine();
    pending->handle = send(*pending->engine);
    pending->started = true;
  }

  // The table as the servers hold it, from the cache or the servers (a Session's client: the
  // job's declared tables only).
  absl::StatusOr<Table> Lookup(uint32_t id) {
    {
      absl::MutexLock l(&mu_);
      auto it = tables_.find(id);
      if (it != tables_.end()) return it->second;
    }
    if (link_ != nullptr) {
      PS_ASSIGN_OR_RETURN(v1::TableSpec declared, link_->DeclaredTableById(id));
      return Remember(declared);
    }
    auto spec = engine()->DescribeTable(id);
    if (!spec.ok()) {
      if (absl::IsNotFound(spec.status())) {
        return absl::NotFoundError(absl::StrCat("no table with id ", id, " on the servers"));
      }
      return spec.status();
    }
    return Remember(*spec);
  }

  Table Remember(const v1::TableSpec& spec) {
    Table t = FromProto(spec);
    absl::MutexLock l(&mu_);
    tables_[t.id] = t;
    return t;
  }

  // Checks one op against the table as the servers hold it: its shape, the buffer's size, and
  // (dense tables) every key in range.
  absl::Status CheckOp(const char* verb, const Table& table, absl::Span<const uint64_t> keys,
                       size_t values) {
    PS_ASSIGN_OR_RETURN(Table known, Lookup(table.id));
    const std::string name = absl::StrCat("table '", known.name, "'");
    if (known.dim != table.dim || known.kind != table.kind || known.num_rows != table.num_rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          verb, ": ", name, " is a ", KindName(known.kind), " table of dim ", known.dim,
          " on the servers; the Table passed says ", KindName(table.kind), " of dim ", table.dim));
    }
    const size_t want = keys.size() * static_cast<size_t>(known.dim);
    if (values != want) {
      return absl::InvalidArgumentError(absl::StrCat(verb, " ", name, ": ", keys.size(),
                                                     " keys of dim ", known.dim, " need ", want,
                                                     " floats; the buffer holds ", values));
    }
    if (known.kind == TableKind::kDense) {
      for (uint64_t k : keys) {
        if (k >= known.num_rows) {
          return absl::InvalidArgumentError(absl::StrCat(verb, " ", name, ": key ", k,
                                                         " is out of range for a dense table of ",
                                                         known.num_rows, " rows"));
        }
      }
    }
    return absl::OkStatus();
  }

  // The protocol's ops for `ops`, into `out`; a pull with repeated keys pulls each key once
  // into a buffer of `pending`'s and copies the rows out when the request succeeded.
  absl::Status ToPullOps(const std::vector<PullOp>& ops, Pending::Impl* pending,
                         std::vector<TableOp>* out) {
    for (const PullOp& op : ops) {
      PS_RETURN_IF_ERROR(CheckOp("pull", op.table, op.keys, op.out.size()));
      TableOp t;
      t.table_id = op.table.id;
      t.keys = op.keys;
      t.out = op.out.data();
      std::vector<uint64_t> unique;
      std::vector<uint32_t> slot;
      if (Deduplicate(op.keys, &unique, &slot)) {
        const size_t dim = op.table.dim;
        pending->keys.push_back(std::move(unique));
        pending->values.emplace_back(pending->keys.back().size() * dim);
        t.keys = pending->keys.back();
        t.out = pending->values.back().data();
        pending->scatters.push_back(
            [rows = t.out, slot = std::move(slot), out = op.out.data(), dim] {
              for (size_t i = 0; i < slot.size(); ++i) {
                std::memcpy(out + i * dim, rows + slot[i] * dim, dim * sizeof(float));
              }
            });
      }
      out->push_back(t);
    }
    return absl::OkStatus();
  }

  // The protocol's ops for `ops`, into `out`; a push with repeated keys sends each key once
  // with the sum of its gradients (in a buffer of `pending`'s).
  absl::Status ToPushOps(const std::vector<PushOp>& ops, Pending::Impl* pending,
                         std::vector<TableOp>* out) {
    for (const PushOp& op : ops) {
      PS_RETURN_IF_ERROR(CheckOp("push", op.table, op.keys, op.grads.size()));
      TableOp t;
      t.table_id = op.table.id;
      t.keys = op.keys;
      t.grads = op.grads.data();
      std::vector<uint64_t> unique;
      std::vector<uint32_t> slot;
      if (Deduplicate(op.keys, &unique, &slot)) {
        const size_t dim = op.table.dim;
        std::vector<float> sums(unique.size() * dim, 0.0f);
        for (size_t i = 0; i < slot.size(); ++i) {
          const float* g = op.grads.data() + i * dim;
          float* dst = sums.data() + slot[i] * dim;
          for (size_t d = 0; d < dim; ++d) dst[d] += g[d];
        }
        pending->keys.push_back(std::move(unique));
        pending->values.push_back(std::move(sums));
        t.keys = pending->keys.back();
        t.grads = pending->values.back().data();
      }
      out->push_back(t);
    }
    return absl::OkStatus();
  }

 private:
  const ClientOptions options_;
  std::shared_ptr<RpcClient> rpc_ ABSL_GUARDED_BY(mu_);
  const std::shared_ptr<SessionLink> link_;
  std::atomic<bool> closed_{false};
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint32_t, Table> tables_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  PS_RETURN_IF_ERROR(options.Validate());
  RpcClientOptions ro;
  ro.servers = options.servers;
  ro.job_id = options.job_id;
  ro.worker_id = options.worker_id;
  ro.rpc_timeout = options.rpc_timeout;
  ro.max_retries = options.max_retries;
  ro.max_part_bytes = options.max_part_bytes;
  ro.reject_nonfinite = options.reject_nonfinite;
  ro.channels_per_server = options.channels_per_server;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<RpcClient> rpc, RpcClient::Connect(std::move(ro)));
  if (options.configure_job) {
    std::vector<uint32_t> workers;
    for (uint32_t w = 0; w < options.num_workers; ++w) workers.push_back(w);
    absl::Status s = JobAdmin(*rpc, options.connect_timeout)
                         .ConfigureJob(ToProto(options.consistency, options.staleness), workers,
                                       /*membership_epoch=*/1);
    if (!s.ok()) {
      return WithPrefix(s, absl::StrCat("declaring job '", options.job_id, "' on the servers"));
    }
  }
  return std::unique_ptr<Client>(
      new Client(std::make_unique<Impl>(std::move(options), std::move(rpc))));
}

struct ClientInternals {
  static std::shared_ptr<Client> Make(ClientOptions options, std::shared_ptr<RpcClient> engine,
                                      std::shared_ptr<SessionLink> link) {
    return std::shared_ptr<Client>(new Client(
        std::make_unique<Client::Impl>(std::move(options), std::move(engine), std::move(link))));
  }
  static Client::Impl& ImplOf(Client& client) { return *client.impl_; }
};

std::shared_ptr<Client> MakeSessionClient(ClientOptions options, std::shared_ptr<RpcClient> engine,
                                          std::shared_ptr<SessionLink> link) {
  return ClientInternals::Make(std::move(options), std::move(engine), std::move(link));
}

std::shared_ptr<RpcClient> SwapEngine(Client& client, std::shared_ptr<RpcClient> engine) {
  return ClientInternals::ImplOf(client).Swap(std::move(engine));
}

std::shared_ptr<RpcClient> EngineOf(Client& client) {
  return ClientInternals::ImplOf(client).engine();
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

absl::StatusOr<Table> Client::CreateTable(const TableConfig& config) {
  PS_RETURN_IF_ERROR(impl_->CheckOpen());
  PS_RETURN_IF_ERROR(CheckName("table name", config.name, 1));
  if (config.dim == 0) {
    return absl::InvalidArgumentError(absl::StrCat("table '", config.name, "': dim must be >= 1"));
  }
  if (config.kind == TableKind::kDense && config.num_rows == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("table '", config.name, "': a dense table needs num_rows >= 1"));
  }
  if (config.kind == TableKind::kSparse && config.num_rows != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table '", config.name, "': num_rows is for dense tables (a sparse table grows)"));
  }
  if (impl_->link() != nullptr) {
    // A program job's tables are the job file's: this finds the declared one, and checks its
    // shape against the program's (the job file's initializer and optimizer apply).
    PS_ASSIGN_OR_RETURN(v1::TableSpec declared, impl_->link()->DeclaredTable(config.name));
    Table t = FromProto(declared);
    if (t.kind != config.kind || t.dim != config.dim || t.num_rows != config.num_rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", config.name, "' is declared in the job file as ", KindName(t.kind), " of dim ",
          t.dim, t.kind == TableKind::kDense ? absl::StrCat(" x ", t.num_rows, " rows") : "",
          "; the program asks for ", KindName(config.kind), " of dim ", config.dim,
          config.kind == TableKind::kDense ? absl::StrCat(" x ", config.num_rows, " rows") : ""));
    }
    absl::Status s = CheckDeclaredSettings(config, declared);
    if (!s.ok()) return WithPrefix(s, absl::StrCat("table '", config.name, "'"));
    return impl_->Remember(declared);
  }
  absl::StatusOr<v1::TableSpec> spec = TableSpecOf(config, impl_->options().job_id);
  // The servers check the same; this names the table and fails before any server is asked.
  absl::Status s = spec.status();
  if (s.ok()) s = ValidateTableFeatures(*spec);
  if (!s.ok()) return WithPrefix(s, absl::StrCat("table '", config.name, "'"));
  s = impl_->rpc().CreateTable(*spec);
  if (!s.ok()) return WithPrefix(s, absl::StrCat("creating table '", config.name, "'"));
  return impl_->Remember(*spec);
}

absl::StatusOr<Table> Client::OpenTable(const std::string& name) {
  PS_RETURN_IF_ERROR(impl_->CheckOpen());
  PS_RETURN_IF_ERROR(CheckName("table name", name, 1));
  if (impl_->link() != nullptr) {
    PS_ASSIGN_OR_RETURN(v1::TableSpec declared, impl_->link()->DeclaredTable(name));
    return impl_->Remember(declared);
  }
  const uint32_t id = TableIdFor(impl_->options().job_id, name);
  auto table = impl_->Lookup(id);
  if (absl::IsNotFound(table.status()) || (table.ok() && table->name != name)) {
    return absl::NotFoundError(absl::StrCat("no table named '", name, "' in job '",
                                            impl_->options().job_id, "' on the servers"));
  }
  return table;
}

absl::StatusOr<Table> Client::OpenTableById(uint32_t id) {
  PS_RETURN_IF_ERROR(impl_->CheckOpen());
  return impl_->Lookup(id);
}

Pending Client::PullAsync(std::vector<PullOp> ops) {
  return Pending(impl_->Pull(std::move(ops), /*caller_waits=*/false));
}

Pending Client::PushAsync(std::vector<PushOp> ops) {
  return Pending(impl_->Push(std::move(ops), /*caller_waits=*/false));
}

Pending Client::PrefetchAsync(const Table& table, absl::Span<const uint64_t> keys) {
  return Pending(impl_->Prefetch(table, keys));
}

absl::Status Client::Prefetch(const Table& table, absl::Span<const uint64_t> keys) {
  return PrefetchAsync(table, keys).Wait();
}

Pending Client::PullAsync(const Table& table, absl::Span<const uint64_t> keys,
                          absl::Span<float> out) {
  return PullAsync(std::vector<PullOp>{PullOp{table, keys, out}});
}

Pending Client::PushAsync(const Table& table, absl::Span<const uint64_t> keys,
                          absl::Span<const float> grads) {
  return PushAsync(std::vector<PushOp>{PushOp{table, keys, grads}});
}

absl::Status Client::Pull(const Table& table, absl::Span<const uint64_t> keys,
                          absl::Span<float> out) {
  return Pending(impl_->Pull({PullOp{table, keys, out}}, /*caller_waits=*/true)).Wait();
}

absl::Status Client::Push(const Table& table, absl::Span<const uint64_t> keys,
                          absl::Span<const float> grads) {
  return Pending(impl_->Push({PushOp{table, keys, grads}}, /*caller_waits=*/true)).Wait();
}

Pending Client::PushPullAsync(std::vector<PushOp> push, std::vector<PullOp> pull) {
  return Pending(impl_->PushPull(std::move(push), std::move(pull), /*caller_waits=*/false));
}

absl::Status Client::PushPull(std::vector<PushOp> push, std::vector<PullOp> pull) {
  return Pending(impl_->PushPull(std::move(push), std::move(pull), /*caller_waits=*/true)).Wait();
}

absl::Status Client::Clock() {
  PS_RETURN_IF_ERROR(impl_->CheckOpen());
  const std::shared_ptr<SessionLink>& link = impl_->link();
  if (link != nullptr && link->interrupted()) return link->InterruptedStatus();
  absl::Status s = impl_->engine()->Clock();
  if (!s.ok() && link != nullptr && link->Absorb(s)) return link->InterruptedStatus();
  return s;
}

int64_t Client::clock() const { return impl_->rpc().clock(); }
void Client::SetLearningRateScale(float scale) { impl_->rpc().SetLearningRateScale(scale); }
void Client::Close() { impl_->Close(); }
bool Client::closed() const { return impl_->closed(); }
const ClientOptions& Client::options() const { return impl_->options(); }
const std::string& Client::job_id() const { return impl_->options().job_id; }
uint32_t Client::worker_id() const { return impl_->options().worker_id; }
const std::vector<std::string>& Client::servers() const { return impl_->options().servers; }

}  // namespace ps
