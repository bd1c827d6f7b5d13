// The paramserver client library: what a training program uses to keep its model in parameter
// servers. Tables (dense tensors, sparse embedding rows) live on the servers, which apply a
// server-side optimizer to the gradients a program pushes; the program pulls current values.
//
//   ps::ClientOptions options;
//   options.servers = {"10.0.0.5:7100", "10.0.0.6:7100"};
//   auto client = ps::Client::Connect(options);        // absl::StatusOr<unique_ptr<Client>>
//   ps::TableConfig config;
//   config.name = "emb";
//   config.kind = ps::TableKind::kSparse;
//   config.dim = 16;
//   config.optimizer = ps::Optimizer::Adagrad(0.05f);
//   auto emb = (*client)->CreateTable(config);         // absl::StatusOr<Table>
//   (*client)->Pull(*emb, keys, absl::MakeSpan(values));  // values: keys.size() * 16 floats
//   (*client)->Push(*emb, keys, grads);
//
// Only absl types appear here (no gRPC, no protobuf): link `paramserver::client` (CMake:
// find_package(paramserver)) and include <ps/client.h>. Every call returns absl::Status; a
// server's error carries its message. Nothing here throws.
#ifndef PS_CLIENT_H_
#define PS_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ps/export.h"

namespace ps {

// A dense table is a fixed tensor of `num_rows` rows (keys 0..num_rows-1); a sparse table holds
// rows for any uint64 key, each created (with the initializer) on first touch.
enum class TableKind { kDense, kSparse };

// How a row's values start. Rows depend only on (seed, table name, key): every server creates
// the same row.
struct PS_EXPORT Initializer {
  enum class Kind { kZeros, kConstant, kUniform, kNormal };
  Kind kind = Kind::kZeros;
  float value = 0;  // kConstant
  float low = 0;    // kUniform: values in [low, high)
  float high = 0;
  float stddev = 0;  // kNormal: normal(0, stddev)
  uint64_t seed = 0;

  static Initializer Zeros() { return {}; }
  static Initializer Constant(float value);
  static Initializer Uniform(float low, float high, uint64_t seed = 0);
  static Initializer Normal(float stddev, uint64_t seed = 0);
};

// The server-side optimizer of a table. Unset fields take the server's defaults: learning rate
// 0.01, momentum 0.9, Adam's beta1 0.9, beta2 0.999, epsilon 1e-8 (Adagrad: 1e-10), Adagrad's
// initial accumulator 0.1, FTRL's l1 = l2 = 0 and beta 1, weight decay 0.
struct PS_EXPORT Optimizer {
  enum class Kind { kSgd, kMomentum, kAdagrad, kAdam, kFtrl };
  Kind kind = Kind::kSgd;
  std::optional<float> learning_rate;  // FTRL: alpha
  std::optional<float> momentum;
  std::optional<float> beta1;
  std::optional<float> beta2;
  std::optional<float> epsilon;
  std::optional<float> initial_accumulator;
  std::optional<float> l1;
  std::optional<float> l2;
  std::optional<float> ftrl_beta;
  std::optional<float> weight_decay;

  static Optimizer Sgd(float learning_rate);
  static Optimizer Momentum(float learning_rate, float momentum = 0.9f);
  static Optimizer Adagrad(float learning_rate);
  static Optimizer Adam(float learning_rate);
  static Optimizer Ftrl(float alpha, float l1 = 0, float l2 = 0);
};

// What CreateTable makes.
// How the servers store a table's values (see TableConfig::storage); pulls answer float32 either
// way, and the optimizer's state stays float32.
enum class Storage {
  kFp32,  // 4 bytes a value (default)
  kFp16,  // IEEE half: 2 bytes a value, 11 significant bits, magnitudes 6e-8..65504
  kBf16,  // bfloat16: 2 bytes a value, 8 significant bits, float32's range
};

// How a table's values travel on the wire, per direction (TableConfig::push_codec and
// pull_codec; see docs/data-plane.md#compression). kNone: float32, as without it.
enum class Codec {
  kNone,
  kFp16,  // IEEE half, 2 bytes a value (pushes and pulls)
  kBf16,  // bfloat16, 2 bytes a value (pushes and pulls)
  kTopk,  // pushes of dense tables: the `ratio` largest |values| of each block, error feedback
  kSign,  // pushes of dense tables: 1 bit a value and a scale per 256 values, error feedback
  kInt8,  // pulls: 1 byte a value and a scale (max |value| / 127) per 256 values
};
struct WireCodec {
  Codec codec = Codec::kNone;
  float ratio = 0;  // kTopk: the fraction of a block's values sent, in (0, 1]
  // kTopk: momentum correction, in [0, 1); 0: off. The worker keeps a velocity per value
  // (u = momentum * u + gradient) and accumulates it, not the raw gradient, into the residual;
  // the table's optimizer must then be plain SGD (Optimizer::Sgd).
  float momentum = 0;
  // kTopk: a row's first warmup_steps pushes from this process send a larger fraction,
  // ratio^((s + 1) / (warmup_steps + 1)) at its s-th push; 0: none.
  uint32_t warmup_steps = 0;
  // pull_codec of a kDense table: delta pulls. The client keeps a copy of the rows it pulled
  // and the servers answer only the values changed since (docs/data-plane.md#delta-pulls).
  bool delta = false;
};

// Sparse tables: which keys get a row. All zero (the default): every key on its first touch.
// A key not admitted yet pulls its initializer's values and its pushes are dropped (counted).
struct Admission {
  uint32_t min_count = 0;      // admitted at the min_count-th push (0..255; 0 or 1: the first)
  float probability = 0;       // each push admits with this probability, in (0, 1]; 0: always
  uint32_t decay_seconds = 0;  // the push counts halve this often; 0: never
};

// Sparse tables: how rows leave. All zero (the default): rows stay until the job ends.
struct Eviction {
  uint64_t max_rows = 0;  // most rows a server holds; past it the least recently used go; 0: no cap
  int64_t ttl_seconds = 0;  // rows unused this long are dropped; 0: never
};

struct TableConfig {
  std::string name;  // 1..128 characters: letters, digits, '_', '-', '.', '/'
  TableKind kind = TableKind::kSparse;
  uint32_t dim = 0;       // floats per row, >= 1
  uint64_t num_rows = 0;  // dense tables: rows (keys 0..num_rows-1); sparse: 0
  Initializer initializer;
  Optimizer optimizer;
  // The table's id on the servers. 0: TableIdFor(job_id, name), which every client of the job
  // computes alike (a job whose tables a scheduler created passes the ids it was given).
  uint32_t id = 0;
  Storage storage = Storage::kFp32;
  Admission admission;  // sparse only
  Eviction eviction;    // sparse only
  // Sparse tables with eviction.max_rows: rows past the cap go to the servers' disk tier
  // instead of being forgotten, and come back when used (docs/embedding-tables.md#disk-tier).
  // The servers need --tier_roots. The same as spec = "tier { disk: true }".
  bool disk_tier = false;
  // Compression on the wire: of the gradients pushed, and of the values pulled (kFp16, kBf16).
  WireCodec push_codec;
  WireCodec pull_codec;
  // Any setting of the table by the protocol's own names (ps.v1.TableSpec's fields in
  // proto/ps/v1/types.proto, as a job file's tables { ... } write them), in protobuf text format
  // ("tier { disk: true } eviction { max_rows: 100000 }") or as a JSON object
  // ({"tier": {"disk": true}}), merged over the fields above. Every setting is reachable here,
  // also one newer than the fields above; the name, kind, dim, rows, id, initializer and
  // optimizer are set in their own fields only. A field that does not parse or is not a setting
  // fails CreateTable with INVALID_ARGUMENT naming it. Empty (the default): none.
  std::string spec;
};

// Opt-in process-wide settings for a program that moves large tensors: nothing in the library
// calls it (nor does importing the Python package: paramserver.tune_process()); call it once,
// early in main(), if the program wants them. It keeps freed memory in the process (glibc
// otherwise returns every large request buffer to the kernel and each request faults its pages
// in again; docs/client.md) and turns off Abseil's mutex deadlock detection (a debug aid that
// Debian's Abseil leaves on), for the whole process. The daemons do the same.
PS_EXPORT void TuneProcess();

// True for the error a request of a ps::Session's client reports when it could not complete
// because the job's shard map changed (a server died): ABORTED "step interrupted: ...". The
// request had no effect or only part of it (a pull's buffer is then incomplete: never use it);
// end the step (Session::Next or NextBatch), which recovers and runs it again. Clients made
// with Client::Connect never report it.
PS_EXPORT bool IsStepInterrupted(const absl::Status& status);

// The id a table named `name` of job `job_id` gets when its config leaves the id 0: a stable
// 31-bit hash, never 0.
PS_EXPORT uint32_t TableIdFor(const std::string& job_id, const std::string& name);

// A table as the servers hold it (from CreateTable or OpenTable). Cheap to copy.
struct Table {
  uint32_t id = 0;
  std::string name;
  TableKind kind = TableKind::kSparse;
  uint32_t dim = 0;
  uint64_t num_rows = 0;  // dense only
};

// How pulls see the pushes of other workers of the job (see docs/client.md).
enum class Consistency {
  kSync,  // BSP: a clock's gradients of all workers are summed and applied once; a pull at
          // clock c waits until every worker has pushed clock c-1.
  kSsp,   // bounded staleness: pushes apply on arrival; a pull at clock c waits until every
          // worker has reached clock c - staleness.
  kAsync  // pushes apply on arrival; pulls never wait.
};

// The deadline of one data-plane request unless set otherwise, everywhere: ClientOptions,
// SessionOptions and the worker daemon's --rpc_timeout (a sync pull may wait this long for the
// slowest worker).
inline constexpr absl::Duration kDefaultRpcTimeout = absl::Seconds(120);

struct PS_EXPORT ClientOptions {
  // The parameter servers, "host:port" each, in shard-map order (slot s on servers[s % n]).
  std::vector<std::string> servers;
  // Tables and clocks are per job; every worker of a job names the same job and servers.
  std::string job_id = "default";
  uint32_t worker_id = 0;    // 0..num_workers-1
  uint32_t num_workers = 1;  // workers of the job (sync/ssp wait for all of them)
  Consistency consistency = Consistency::kAsync;
  int staleness = 0;  // kSsp: clocks a worker may run ahead of the slowest
  // Declare the job (its consistency mode and workers 0..num_workers-1) on every server at
  // Connect. Every worker may do it (the same declaration is idempotent); set false when
  // someone else (a worker daemon) has configured the job.
  bool configure_job = true;
  // How long Connect waits for every server to answer that declaration (a server still
  // starting is waited for; one that is not there fails Connect with DEADLINE_EXCEEDED).
  absl::Duration connect_timeout = absl::Seconds(10);
  // Deadline of one request (a sync or ssp pull may wait this long for slow workers).
  absl::Duration rpc_timeout = kDefaultRpcTimeout;
  // Tries again a request that failed with UNAVAILABLE this many times (a push keeps its
  // request id: the servers apply it once).
  int max_retries = 3;
  // Refuse a push whose gradients hold a NaN or an Inf (INVALID_ARGUMENT, nothing sent). Set
  // false only for servers run with --nonfinite=skip_row, which skip such rows themselves.
  bool reject_nonfinite = true;
  // Requests larger than this are cut into parts sent in parallel.
  size_t max_part_bytes = 2 << 20;
  // TCP connections per server.
  int channels_per_server = 2;

  absl::Status Validate() const;
};

// One table's part of a multi-table request. `keys` and the buffers are borrowed until the
// request is done.
struct PullOp {
  Table table;
  absl::Span<const uint64_t> keys;
  absl::Span<float> out;  // receives keys.size() * table.dim values, row by row
};
struct PushOp {
  Table table;
  absl::Span<const uint64_t> keys;
  absl::Span<const float> grads;  // keys.size() * table.dim gradients, row by row
};

// A request in flight (ps-lite's timestamp). Copyable; Wait() may be called many times and
// from any thread.
class PS_EXPORT Pending {
 public:
  Pending();
  ~Pending();
  Pending(const Pending&);
  Pending& operator=(const Pending&);
  // Blocks until every part has answered: OK, or the first error.
  absl::Status Wait() const;
  // True once Wait() would not block.
  bool Done() const;
  // Waits at most `timeout` for the request; true if it is done (Wait() then returns at once).
  bool WaitFor(absl::Duration timeout) const;

 private:
  friend class Client;
  struct Impl;
  explicit Pending(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// A connection to a job's parameter servers. Thread-safe: pulls and pushes may be issued from
// several threads and overlap; Clock() and PushPull advance this worker's clock and belong to
// one training loop. Destroying the client waits for requests in flight.
class PS_EXPORT Client {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Connect(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Creates the table on every server (idempotent for the same config; ALREADY_EXISTS if a
  // table with that id but another config exists).
  absl::StatusOr<Table> CreateTable(const TableConfig& config);
  // A table that exists on the servers: by name (its id from TableIdFor) or by id. NOT_FOUND
  // if there is none.
  absl::StatusOr<Table> OpenTable(const std::string& name);
  absl::StatusOr<Table> OpenTableById(uint32_t id);

  // Pulls the rows of `keys` into `out` (keys.size() * dim floats). Sparse rows not yet
  // touched are created with the table's initializer. A key may appear several times.
  absl::Status Pull(const Table& table, absl::Span<const uint64_t> keys, absl::Span<float> out);
  // Pushes gradients (keys.size() * dim floats); the servers apply the table's optimizer.
  // A key may appear several times: its gradients are summed.
  absl::Status Push(const Table& table, absl::Span<const uint64_t> keys,
                    absl::Span<const float> grads);
  // Asynchronous forms: the buffers must stay valid until the request is done, and a pull's
  // `out` is complete once Wait() has returned OK.
  Pending PullAsync(const Table& table, absl::Span<const uint64_t> keys, absl::Span<float> out);
  Pending PushAsync(const Table& table, absl::Span<const uint64_t> keys,
                    absl::Span<const float> grads);
  Pending PullAsync(std::vector<PullOp> ops);
  Pending PushAsync(std::vector<PushOp> ops);

  // Announces the keys of a later batch (docs/embedding-tables.md, "Prefetch"): each server
  // reads the rows of its share of them from its disk tier into RAM and keeps them there until
  // a pull reads them (or its --prefetch_pin, 30 s by default, has passed), so that the pull
  // finds them in RAM. Sent at once and answered without values; a key may appear several
  // times, and the keys are copied before PrefetchAsync returns. A table without a disk tier (a
  // dense table, a sparse one without tier.disk): checked and otherwise a no-op. Values are
  // never affected: a pull after a prefetch answers what it would have answered without one.
  Pending PrefetchAsync(const Table& table, absl::Span<const uint64_t> keys);
  absl::Status Prefetch(const Table& table, absl::Span<const uint64_t> keys);

  // One training step's round trip: pushes the gradients of the current clock, advances this
  // worker's clock, then pulls at the new clock (in sync mode: the values after every worker's
  // gradients of this clock were applied). Every server hears of the clock.
  Pending PushPullAsync(std::vector<PushOp> push, std::vector<PullOp> pull);
  absl::Status PushPull(std::vector<PushOp> push, std::vector<PullOp> pull);

  // Advances this worker's clock by one on every server (after the step's pushes; PushPull
  // does it by itself).
  absl::Status Clock();
  // This worker's clock: the number of steps it has completed.
  int64_t clock() const;
  // Multiplies the tables' learning rate for the pushes sent from now on (a schedule's factor).
  void SetLearningRateScale(float scale);

  // Cancels the requests in flight (they end CANCELLED); every later call fails with
  // FAILED_PRECONDITION "the client is closed". Idempotent.
  void Close();
  bool closed() const;

  // The options the client was made with.
  const ClientOptions& options() const;
  const std::string& job_id() const;
  uint32_t worker_id() const;
  const std::vector<std::string>& servers() const;

 private:
  friend struct ClientInternals;
  class Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ps

#endif  // PS_CLIENT_H_
