// ps_bench: db_bench-style throughput and latency of ps::RpcClient against real ps_server
// processes (so every figure includes loopback gRPC), next to raw loopback TCP moving the same
// payloads.
//
//   ps_bench --workloads=push_dense,pull_sparse --sizes=4K,1M --servers=2 --clients=2
//
// Prints one line per (workload, size, servers, clients): GB/s of values moved (1 GB = 1e9
// bytes; a pushpull counts its payload both ways, and its keys too), keys/s, ops/s and the
// p50 / p99 latency of one request. Benchmarks report figures; nothing here asserts on speed.
// This file is the tool's main: the flags fill BenchOptions, as in the daemons' main.cc.

#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/job_admin.h"
#include "client/rpc_client.h"
#include "common/flags_usage.h"
#include "common/process_tuning.h"
#include "common/status_macros.h"
#include "common/transport_flags.h"
#include "common/transport_options.h"
#include "tests/bench/server_fleet.h"
#include "tests/bench/tcp_loopback.h"

ABSL_FLAG(
    std::string, workloads,
    "push_dense,pull_dense,pushpull_dense,pull_sparse,push_sparse,py_push_dense,py_pull_dense",
    "comma list of: push_dense, pull_dense, pushpull_dense, pull_sparse, push_sparse, "
    "py_push_dense, py_pull_dense (the last two: one client of the Python binding, through "
    "--python_script; skipped with a note when the binding cannot be imported)");
ABSL_FLAG(std::string, python, "/usr/bin/python3", "the interpreter of the py_* workloads");
ABSL_FLAG(std::string, python_path, "",
          "PYTHONPATH for the py_* workloads (default: <ps_bench's dir>/../../python, where the "
          "build puts the paramserver package)");
ABSL_FLAG(std::string, python_script, PS_BENCH_PY_SCRIPT, "the py_* workloads' script");
ABSL_FLAG(std::string, sizes, "4K,1M,16M,64M",
          "comma list of payload sizes: bytes of values per request (K, M, G: powers of 1024)");
ABSL_FLAG(int, servers, 1, "ps_server processes to spawn (with --addresses: the list's length)");
ABSL_FLAG(int, clients, 1, "client threads, each with its own ps::RpcClient and worker id");
ABSL_FLAG(double, seconds, 2.0, "measured seconds per (workload, size), after one warm-up request");
ABSL_FLAG(int64_t, min_ops, 1, "each client also issues at least this many measured requests");
ABSL_FLAG(bool, spawn, true,
          "start --servers ps_server processes on 127.0.0.1 (port 0) and stop them at exit");
ABSL_FLAG(std::string, addresses, "",
          "host:port,... of running servers in shard-map order; overrides --spawn. They must "
          "run with --num_servers=<count> and --server_index=<position>");
ABSL_FLAG(std::string, server_binary, "",
          "ps_server to spawn (default: <ps_bench's dir>/../../server/ps_server)");
ABSL_FLAG(bool, tcp_reference, true,
          "print tcp_loopback lines: one raw TCP stream over 127.0.0.1 moving the same sizes "
          "(1 MiB writes, a 1-byte acknowledgement per request)");
ABSL_FLAG(bool, iperf, false, "also run iperf3 -l 1M over 127.0.0.1 when iperf3 is on PATH");
ABSL_FLAG(int, iperf_seconds, 3, "iperf3 -t, seconds");
ABSL_FLAG(int, dense_dim, 1024, "floats per dense row (a smaller payload is one row of size/4)");
ABSL_FLAG(int, sparse_dim, 64, "floats per sparse row");
ABSL_FLAG(int, sparse_key_bits, 22,
          "sparse keys come from [0, 2^bits), never repeated within one request");
ABSL_FLAG(int64_t, max_part_bytes, ps::RpcClientOptions().max_part_bytes,
          "ps::RpcClientOptions::max_part_bytes");
ABSL_FLAG(int, channels_per_server, ps::RpcClientOptions().channels_per_server,
          "ps::RpcClientOptions::channels_per_server");
ABSL_FLAG(int, max_parts_in_flight, ps::RpcClientOptions().max_parts_in_flight,
          "ps::RpcClientOptions::max_parts_in_flight");
ABSL_FLAG(absl::Duration, rpc_timeout, absl::Seconds(60), "deadline of one RPC");
ABSL_FLAG(std::string, job_id, "", "job id (default: ps_bench_<pid>_<unix time>, fresh per run)");
ABSL_FLAG(uint32_t, table_id_base, 0,
          "first table id (default: random, so runs against long-lived servers never collide)");

namespace ps {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr size_t kMaxSizes = 32;             // table ids base .. base+31 are dense tables
constexpr uint32_t kSparseTableOffset = 63;  // table id base+63 is the sparse table

// ---------------------------------------------------------------------------------------------
// Options

enum class Workload {
  kPushDense,
  kPullDense,
  kPushPullDense,
  kPullSparse,
  kPushSparse,
  kPyPushDense,  // the Python binding (tests/bench/ps_bench_py.py), one client
  kPyPullDense,
};

struct WorkloadName {
  Workload workload;
  const char* name;
};
constexpr WorkloadName kWorkloads[] = {
    {Workload::kPushDense, "push_dense"},         {Workload::kPullDense, "pull_dense"},
    {Workload::kPushPullDense, "pushpull_dense"}, {Workload::kPullSparse, "pull_sparse"},
    {Workload::kPushSparse, "push_sparse"},       {Workload::kPyPushDense, "py_push_dense"},
    {Workload::kPyPullDense, "py_pull_dense"},
};

const char* NameOf(Workload w) {
  for (const WorkloadName& n : kWorkloads) {
    if (n.workload == w) return n.name;
  }
  return "?";
}

bool IsSparse(Workload w) { return w == Workload::kPullSparse || w == Workload::kPushSparse; }
bool IsPython(Workload w) { return w == Workload::kPyPushDense || w == Workload::kPyPullDense; }

struct BenchOptions {
  std::vector<Workload> workloads;
  std::vector<size_t> sizes;  // bytes of values per request
  int servers = 1;
  int clients = 1;
  absl::Duration duration = absl::Seconds(2);  // measured time per (workload, size)
  int64_t min_ops = 1;                         // measured requests per client, at least
  std::vector<std::string> addresses;          // running servers; empty: spawn `servers` of them
  std::string server_binary;
  bool tcp_reference = true;
  bool iperf = false;
  int iperf_seconds = 3;
  int dense_dim = 1024;  // floats per dense row
  int sparse_dim = 64;   // floats per sparse row
  int sparse_key_bits = 22;
  size_t max_part_bytes = RpcClientOptions().max_part_bytes;
  int channels_per_server = RpcClientOptions().channels_per_server;
  int max_parts_in_flight = RpcClientOptions().max_parts_in_flight;
  absl::Duration rpc_timeout = absl::Seconds(60);
  TransportOptions transport;  // both ends: the clients' channels and spawned servers' flags
  std::string job_id;
  uint32_t table_id_base = 0;
  std::string python;  // the py_* workloads: interpreter, PYTHONPATH, script
  std::string python_path;
  std::string python_script;

  absl::Status Validate() const;
};

// Floats per row of the dense table for `size` bytes per request.
int DenseDim(const BenchOptions& o, size_t size) {
  return static_cast<int>(std::min<size_t>(o.dense_dim, size / sizeof(float)));
}

absl::Status BenchOptions::Validate() const {
  if (workloads.empty()) return absl::InvalidArgumentError("--workloads is empty");
  if (sizes.empty() || sizes.size() > kMaxSizes) {
    return absl::InvalidArgumentError(absl::StrCat("--sizes needs 1..", kMaxSizes, " sizes"));
  }
  if (servers < 1 || clients < 1) {
    return absl::InvalidArgumentError("--servers and --clients must be >= 1");
  }
  if (duration < absl::ZeroDuration() || min_ops < 1) {
    return absl::InvalidArgumentError("--seconds must be >= 0 and --min_ops >= 1");
  }
  if (dense_dim < 1 || sparse_dim < 1 || sparse_key_bits < 8 || sparse_key_bits > 62) {
    return absl::InvalidArgumentError(
        "--dense_dim and --sparse_dim must be >= 1, --sparse_key_bits in 8..62");
  }
  for (size_t size : sizes) {
    const size_t row = static_cast<size_t>(DenseDim(*this, size)) * sizeof(float);
    if (row == 0 || size % row != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("size ", size, " must be a positive multiple of 4 and of the dense row (",
                       dense_dim * sizeof(float), " bytes) when larger than it"));
    }
    const size_t sparse_keys = size / (sparse_dim * sizeof(float));
    if (sparse_keys < 1 || sparse_keys > (size_t{1} << sparse_key_bits)) {
      return absl::InvalidArgumentError(absl::StrCat("size ", size, " holds ", sparse_keys,
                                                     " sparse rows of dim ", sparse_dim,
                                                     "; need 1..2^--sparse_key_bits"));
    }
  }
  PS_RETURN_IF_ERROR(transport.Validate());
  if (addresses.empty() && server_binary.empty()) {
    return absl::InvalidArgumentError("no ps_server binary found: pass --server_binary");
  }
  return absl::OkStatus();
}

// "4K" -> 4096; K, M, G are powers of 1024.
absl::StatusOr<size_t> ParseSize(absl::string_view text) {
  uint64_t scale = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K':
      case 'k':
        scale = uint64_t{1} << 10;
        break;
      case 'M':
      case 'm':
        scale = uint64_t{1} << 20;
        break;
      case 'G':
      case 'g':
        scale = uint64_t{1} << 30;
        break;
      default:
        break;
    }
  }
  if (scale != 1) text.remove_suffix(1);
  uint64_t n = 0;
  if (!absl::SimpleAtoi(text, &n) || n == 0 || n > (uint64_t{1} << 40) / scale) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad size '", text, "' (e.g. 4K, 1M, 64M; at most 1T)"));
  }
  return static_cast<size_t>(n * scale);
}

std::string FormatSize(size_t bytes) {
  if (bytes % (size_t{1} << 30) == 0) return absl::StrCat(bytes >> 30, "G");
  if (bytes % (size_t{1} << 20) == 0) return absl::StrCat(bytes >> 20, "M");
  if (bytes % (size_t{1} << 10) == 0) return absl::StrCat(bytes >> 10, "K");
  return absl::StrCat(bytes);
}

// The directory of the running binary, from /proc/self/exe.
std::string ExeDir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string path(buf, n);
  return path.substr(0, path.rfind('/'));
}

absl::StatusOr<BenchOptions> OptionsFromFlags() {
  BenchOptions o;
  const std::string workloads = absl::GetFlag(FLAGS_workloads);
  for (absl::string_view w : absl::StrSplit(workloads, ',', absl::SkipEmpty())) {
    auto it = std::find_if(std::begin(kWorkloads), std::end(kWorkloads),
                           [&](const WorkloadName& n) { return w == n.name; });
    if (it == std::end(kWorkloads)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown workload '", w, "'"));
    }
    o.workloads.push_back(it->workload);
  }
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',', absl::SkipEmpty())) {
    PS_ASSIGN_OR_RETURN(size_t size, ParseSize(s));
    o.sizes.push_back(size);
  }
  o.addresses = absl::StrSplit(absl::GetFlag(FLAGS_addresses), ',', absl::SkipEmpty());
  o.servers =
      o.addresses.empty() ? absl::GetFlag(FLAGS_servers) : static_cast<int>(o.addresses.size());
  if (o.addresses.empty() && !absl::GetFlag(FLAGS_spawn)) {
    return absl::InvalidArgumentError("--spawn=false needs --addresses");
  }
  o.clients = absl::GetFlag(FLAGS_clients);
  o.duration = absl::Seconds(absl::GetFlag(FLAGS_seconds));
  o.min_ops = absl::GetFlag(FLAGS_min_ops);
  o.server_binary = absl::GetFlag(FLAGS_server_binary);
  if (o.server_binary.empty()) o.server_binary = ExeDir() + "/../../server/ps_server";
  o.tcp_reference = absl::GetFlag(FLAGS_tcp_reference);
  o.iperf = absl::GetFlag(FLAGS_iperf);
  o.iperf_seconds = absl::GetFlag(FLAGS_iperf_seconds);
  o.dense_dim = absl::GetFlag(FLAGS_dense_dim);
  o.sparse_dim = absl::GetFlag(FLAGS_sparse_dim);
  o.sparse_key_bits = absl::GetFlag(FLAGS_sparse_key_bits);
  o.max_part_bytes = static_cast<size_t>(std::max<int64_t>(0, absl::GetFlag(FLAGS_max_part_bytes)));
  o.channels_per_server = absl::GetFlag(FLAGS_channels_per_server);
  o.max_parts_in_flight = absl::GetFlag(FLAGS_max_parts_in_flight);
  o.rpc_timeout = absl::GetFlag(FLAGS_rpc_timeout);
  o.transport = TransportOptionsFromFlags();
  o.job_id = absl::GetFlag(FLAGS_job_id);
  if (o.job_id.empty()) {
    o.job_id = absl::StrFormat("ps_bench_%d_%d", getpid(), absl::ToUnixSeconds(absl::Now()));
  }
  o.python = absl::GetFlag(FLAGS_python);
  o.python_path = absl::GetFlag(FLAGS_python_path);
  if (o.python_path.empty()) o.python_path = ExeDir() + "/../../python";
  o.python_script = absl::GetFlag(FLAGS_python_script);
  o.table_id_base = absl::GetFlag(FLAGS_table_id_base);
  if (o.table_id_base == 0) {
    std::random_device rd;
    o.table_id_base = ((rd() % (1u << 24)) + 1) * 64;  // 64 ids per run, below 2^31
  }
  PS_RETURN_IF_ERROR(o.Validate());
  return o;
}

// ---------------------------------------------------------------------------------------------
// Figures

// One printed line.
struct Measurement {
  std::string workload;
  size_t size = 0;
  std::string servers = "-";  // "-" for the TCP references
  int clients = 1;
  double bytes = 0;  // bytes of values moved
  double keys = -1;  // keys moved; < 0: not applicable
  int64_t ops = 0;
  double seconds = 0;
  std::vector<double> latencies_us;  // one per request
};

// Nearest-rank percentile (0 < p <= 1); reorders `v`.
double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t k = static_cast<size_t>(std::ceil(p * v.size()));
  k = std::min(std::max<size_t>(k, 1), v.size()) - 1;
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

void PrintRow(const std::string& workload, const std::string& size, const std::string& servers,
              const std::string& clients, const std::string& gbps, const std::string& keys,
              const std::string& ops_per_s, const std::string& p50, const std::string& p99,
              const std::string& ops) {
  absl::PrintF("%-16s %5s %7s %7s %8s %13s %10s %10s %10s %7s\n", workload, size, servers, clients,
               gbps, keys, ops_per_s, p50, p99, ops);
  std::fflush(stdout);
}

void PrintHeader() {
  PrintRow("workload", "size", "servers", "clients", "GB/s", "keys/s", "ops/s", "p50_us", "p99_us",
           "ops");
}

void PrintMeasurement(Measurement& m) {
  const double s = std::max(m.seconds, 1e-9);
  const double p50 = Percentile(m.latencies_us, 0.50);
  const double p99 = Percentile(m.latencies_us, 0.99);
  PrintRow(m.workload, FormatSize(m.size), m.servers, absl::StrCat(m.clients),
           absl::StrFormat("%.3f", m.bytes / s / 1e9),
           m.keys < 0 ? std::string("-") : absl::StrFormat("%.0f", m.keys / s),
           absl::StrFormat("%.1f", m.ops / s), absl::StrFormat("%.1f", p50),
           absl::StrFormat("%.1f", p99), absl::StrCat(m.ops));
}

double MicrosSince(SteadyClock::time_point t0) {
  return std::chrono::duration<double, std::micro>(SteadyClock::now() - t0).count();
}

// ---------------------------------------------------------------------------------------------
// TCP references

// The full path of `name` on $PATH, or "".
std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

absl::Status RunTcpReferences(const BenchOptions& o) {
  if (o.tcp_reference) {
    for (size_t size : o.sizes) {
      PS_ASSIGN_OR_RETURN(bench::LoopbackRun run,
                          bench::RunTcpLoopback(size, o.duration, o.min_ops));
      Measurement m;
      m.workload = "tcp_loopback";
      m.size = size;
      m.bytes = static_cast<double>(size) * run.ops;
      m.ops = run.ops;
      m.seconds = run.seconds;
      m.latencies_us = std::move(run.latencies_us);
      PrintMeasurement(m);
    }
  }
  if (o.iperf) {
    const std::string iperf3 = FindOnPath("iperf3");
    if (iperf3.empty()) {
      LOG(WARNING) << "--iperf: iperf3 is not on PATH; skipped";
      return absl::OkStatus();
    }
    PS_ASSIGN_OR_RETURN(double bytes_per_s, bench::RunIperf3(iperf3, o.iperf_seconds));
    PrintRow("iperf3", "1M", "-", "1", absl::StrFormat("%.3f", bytes_per_s / 1e9), "-", "-", "-",
             "-", "-");
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// The ps workloads

// A bijection on [0, 2^bits): consecutive inputs give distinct, scattered keys.
uint64_t ScatterKey(uint64_t i, int bits) {
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  uint64_t x = (i * 0x9e3779b97f4a7c15ULL) & mask;  // odd multiplier: a bijection mod 2^bits
  x ^= x >> (bits / 2 + 1);                         // xorshift: a bijection on `bits` bits
  return (x * 0xbf58476d1ce4e5b9ULL) & mask;
}

// One benchmark client: its own ps::RpcClient and buffers, allocated (and touched) once.
struct BenchClient {
  std::unique_ptr<RpcClient> client;
  std::vector<float> grads;           // pushed by every push
  std::vector<float> out;             // receives every pull
  std::vector<uint64_t> sparse_keys;  // refilled before each sparse request, untimed
  uint64_t next_sparse = 0;           // position in the ScatterKey sequence
};

// A request of one workload and size for one client: `prepare` runs untimed before each
// `issue`, which is timed.
struct Request {
  std::function<void()> prepare;
  std::function<absl::Status()> issue;
  double bytes = 0;  // values moved per request
  double keys = 0;   // keys moved per request
};

// Per-client results of one run.
struct ClientRun {
  absl::Status status;
  int64_t ops = 0;
  std::vector<double> latencies_us;
  SteadyClock::time_point finish;
};

// Thread-compatible: SetUp() once, then Run() from one thread (it starts the client threads).
class Bench {
 public:
  // `options` must outlive this.
  Bench(const BenchOptions& options, std::vector<std::string> addresses)
      : options_(options), addresses_(std::move(addresses)) {}

  // Connects the clients, configures the job (ASYNC) and creates the tables.
  absl::Status SetUp();
  // Runs one workload at sizes[size_index] on every client at once.
  absl::StatusOr<Measurement> Run(Workload w, size_t size_index);
  // Runs a py_* workload: one Python client in a child process. NOT_FOUND when the binding
  // cannot be imported there (the caller notes it and goes on).
  absl::StatusOr<Measurement> RunPython(Workload w, size_t size_index);

 private:
  uint32_t DenseTableId(size_t size_index) const {
    return options_.table_id_base + static_cast<uint32_t>(size_index);
  }
  uint32_t SparseTableId() const { return options_.table_id_base + kSparseTableOffset; }
  Request MakeRequest(Workload w, size_t size_index, BenchClient& c);
  void RunClient(const Request& request, absl::BlockingCounter* warmed,
                 const absl::Notification* go, const SteadyClock::time_point* end,
                 ClientRun* run) const;

  const BenchOptions& options_;
  const std::vector<std::string> addresses_;
  std::vector<BenchClient> clients_;
  std::vector<std::vector<uint64_t>> dense_keys_;  // by size index: 0..rows-1
};

absl::Status Bench::SetUp() {
  size_t max_size = 0;
  for (size_t s : options_.sizes) max_size = std::max(max_size, s);
  clients_.resize(options_.clients);
  std::vector<uint32_t> worker_ids;
  for (int i = 0; i < options_.clients; ++i) {
    RpcClientOptions co;
    co.servers = addresses_;
    co.job_id = options_.job_id;
    co.worker_id = static_cast<uint32_t>(i);
    co.max_part_bytes = options_.max_part_bytes;
    co.channels_per_server = options_.channels_per_server;
    co.max_parts_in_flight = options_.max_parts_in_flight;
    co.rpc_timeout = options_.rpc_timeout;
    co.transport = options_.transport;
    PS_ASSIGN_OR_RETURN(clients_[i].client, RpcClient::Connect(std::move(co)));
    // Allocated and written once, so no request pays first-touch page faults of its buffers.
    clients_[i].grads.assign(max_size / sizeof(float), 1e-3f);
    clients_[i].out.assign(max_size / sizeof(float), 0.0f);
    clients_[i].sparse_keys.reserve(max_size / (options_.sparse_dim * sizeof(float)));
    clients_[i].next_sparse = static_cast<uint64_t>(i) << (options_.sparse_key_bits - 4);
    worker_ids.push_back(static_cast<uint32_t>(i));
  }
  RpcClient& admin = *clients_[0].client;
  v1::ConsistencySpec consistency;
  consistency.set_mode(v1::ConsistencySpec::ASYNC);  // pulls never wait on other workers
  PS_RETURN_IF_ERROR(JobAdmin(admin).ConfigureJob(consistency, worker_ids));
  for (size_t i = 0; i < options_.sizes.size(); ++i) {
    const int dim = DenseDim(options_, options_.sizes[i]);
    v1::TableSpec spec;
    spec.set_table_id(DenseTableId(i));
    spec.set_name(absl::StrCat("bench_dense_", FormatSize(options_.sizes[i])));
    spec.set_job_id(options_.job_id);
    spec.set_kind(v1::DENSE);
    spec.set_dim(dim);
    spec.set_num_rows(options_.sizes[i] / (dim * sizeof(float)));
    PS_RETURN_IF_ERROR(admin.CreateTable(spec));
    dense_keys_.push_back(DenseKeys(spec.num_rows()));
  }
  v1::TableSpec sparse;
  sparse.set_table_id(SparseTableId());
  sparse.set_name("bench_sparse");
  sparse.set_job_id(options_.job_id);
  sparse.set_kind(v1::SPARSE);
  sparse.set_dim(options_.sparse_dim);
  return admin.CreateTable(sparse);
}

Request Bench::MakeRequest(Workload w, size_t size_index, BenchClient& c) {
  const size_t size = options_.sizes[size_index];
  RpcClient* client = c.client.get();
  Request r;
  r.bytes = static_cast<double>(size);
  if (IsSparse(w)) {
    const size_t n = size / (options_.sparse_dim * sizeof(float));
    r.keys = static_cast<double>(n);
    r.prepare = [this, &c, n] {
      c.sparse_keys.clear();
      for (size_t i = 0; i < n; ++i) {
        c.sparse_keys.push_back(ScatterKey(c.next_sparse++, options_.sparse_key_bits));
      }
    };
    // `sparse_keys` was reserved to the largest request in SetUp(), so its data() never moves;
    // prepare() refills its first n keys.
    TableOp op{SparseTableId(), absl::MakeConstSpan(c.sparse_keys.data(), n), nullptr, nullptr};
    if (w == Workload::kPushSparse) {
      op.grads = c.grads.data();
      r.issue = [client, op] { return client->Push({op}); };
    } else {
      op.out = c.out.data();
      r.issue = [client, op] { return client->Pull({op}); };
    }
    return r;
  }
  const std::vector<uint64_t>& keys = dense_keys_[size_index];
  r.keys = static_cast<double>(keys.size());
  r.prepare = [] {};
  const TableOp push{DenseTableId(size_index), keys, c.grads.data(), nullptr};
  const TableOp pull{DenseTableId(size_index), keys, nullptr, c.out.data()};
  switch (w) {
    case Workload::kPushDense:
      r.issue = [client, push] { return client->Push({push}); };
      break;
    case Workload::kPullDense:
      r.issue = [client, pull] { return client->Pull({pull}); };
      break;
    default:  // kPushPullDense: the payload goes both ways
      r.bytes *= 2;
      r.keys *= 2;
      r.issue = [client, push, pull] { return client->PushPull({push}, {pull}); };
      break;
  }
  return r;
}

void Bench::RunClient(const Request& request, absl::BlockingCounter* warmed,
                      const absl::Notification* go, const SteadyClock::time_point* end,
                      ClientRun* run) const {
  run->latencies_us.reserve(size_t{1} << 16);  // no reallocation between most requests
  request.prepare();
  run->status = request.issue();  // warm-up: connections, table dims, allocator
  warmed->DecrementCount();
  go->WaitForNotification();
  while (run->status.ok() && (SteadyClock::now() < *end || run->ops < options_.min_ops)) {
    request.prepare();
    const auto t0 = SteadyClock::now();
    run->status = request.issue();
    run->latencies_us.push_back(MicrosSince(t0));
    ++run->ops;
  }
  run->finish = SteadyClock::now();
}

absl::StatusOr<Measurement> Bench::Run(Workload w, size_t size_index) {
  const int n = options_.clients;
  std::vector<Request> requests;
  for (BenchClient& c : clients_) requests.push_back(MakeRequest(w, size_index, c));
  std::vector<ClientRun> runs(n);
  absl::BlockingCounter warmed(n);
  absl::Notification go;
  SteadyClock::time_point start, end;
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([this, &requests, &warmed, &go, &end, &runs, i] {
      RunClient(requests[i], &warmed, &go, &end, &runs[i]);
    });
  }
  warmed.Wait();
  start = SteadyClock::now();
  end = start + absl::ToChronoNanoseconds(options_.duration);
  go.Notify();
  for (std::thread& t : threads) t.join();

  Measurement m;
  m.workload = NameOf(w);
  m.size = options_.sizes[size_index];
  m.servers = absl::StrCat(options_.servers);
  m.clients = n;
  auto finish = start;
  for (ClientRun& r : runs) {
    if (!r.status.ok()) {
      return absl::Status(r.status.code(), absl::StrCat(m.workload, " ", FormatSize(m.size), ": ",
                                                        r.status.message()));
    }
    m.ops += r.ops;
    m.latencies_us.insert(m.latencies_us.end(), r.latencies_us.begin(), r.latencies_us.end());
    finish = std::max(finish, r.finish);
  }
  m.seconds = std::chrono::duration<double>(finish - start).count();
  m.bytes = requests[0].bytes * m.ops;
  m.keys = requests[0].keys * m.ops;
  return m;
}

absl::StatusOr<Measurement> Bench::RunPython(Workload w, size_t size_index) {
  const std::string servers = absl::StrJoin(addresses_, ",");
  const std::string command = absl::StrFormat(
      "PYTHONPATH='%s' '%s' '%s' --servers=%s --job_id=%s --worker_id=0 --table_id=%d "
      "--op=%s --seconds=%f --min_ops=%d --max_part_bytes=%d --channels_per_server=%d 2>&1",
      options_.python_path, options_.python, options_.python_script, servers, options_.job_id,
      DenseTableId(size_index), w == Workload::kPyPushDense ? "push" : "pull",
      absl::ToDoubleSeconds(options_.duration), options_.min_ops, options_.max_part_bytes,
      options_.channels_per_server);
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError(absl::StrCat("cannot run ", options_.python));
  std::string output;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) output.append(buf, n);
  const int status = pclose(pipe);
  Measurement m;
  m.workload = NameOf(w);
  m.size = options_.sizes[size_index];
  m.servers = absl::StrCat(options_.servers);
  m.clients = 1;
  std::vector<absl::string_view> lines = absl::StrSplit(output, '\n', absl::SkipEmpty());
  if (status != 0 || lines.empty() || !absl::StartsWith(lines[0], "ops=") ||
      std::sscanf(std::string(lines[0]).c_str(), "ops=%ld seconds=%lf", &m.ops, &m.seconds) != 2) {
    const bool no_binding = absl::StrContains(output, "No module named 'paramserver'") ||
                            absl::StrContains(output, "No module named 'numpy'") ||
                            absl::StrContains(output, "not found");
    const std::string tail(output.substr(output.size() > 600 ? output.size() - 600 : 0));
    return absl::Status(no_binding ? absl::StatusCode::kNotFound : absl::StatusCode::kInternal,
                        absl::StrCat(m.workload, ": ", options_.python_script, " failed: ", tail));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    double v;
    if (absl::SimpleAtod(lines[i], &v)) m.latencies_us.push_back(v);
  }
  m.bytes = static_cast<double>(m.size) * m.ops;
  m.keys = static_cast<double>(dense_keys_[size_index].size()) * m.ops;
  return m;
}

absl::Status RunAll(const BenchOptions& o) {
  std::unique_ptr<bench::ServerFleet> fleet;
  std::vector<std::string> addresses = o.addresses;
  if (addresses.empty()) {
    // Spawned before any gRPC thread exists (fork in a single-threaded process).
    PS_ASSIGN_OR_RETURN(fleet, bench::ServerFleet::Spawn(o.server_binary, o.servers,
                                                         TransportServerFlags(o.transport)));
    addresses = fleet->addresses();
  }
  PrintHeader();
  PS_RETURN_IF_ERROR(RunTcpReferences(o));
  Bench bench(o, addresses);
  PS_RETURN_IF_ERROR(bench.SetUp());
  for (Workload w : o.workloads) {
    for (size_t i = 0; i < o.sizes.size(); ++i) {
      if (IsPython(w)) {
        auto m = bench.RunPython(w, i);
        if (absl::IsNotFound(m.status())) {
          absl::PrintF("%-16s skipped: the Python binding is not importable (%s)\n", NameOf(w),
                       o.python_path);
          break;
        }
        PS_RETURN_IF_ERROR(m.status());
        PrintMeasurement(*m);
        continue;
      }
      PS_ASSIGN_OR_RETURN(Measurement m, bench.Run(w, i));
      PrintMeasurement(m);
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  ps::SetUsage(
      "db_bench-style benchmark of ps::RpcClient against ps_server processes over loopback gRPC.\n"
      "Example: ps_bench --workloads=push_dense,pull_sparse --sizes=4K,1M --servers=2 "
      "--clients=2",
      __FILE__);
  absl::ParseCommandLine(argc, argv);
  ps::TuneProcessForServing();
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  signal(SIGPIPE, SIG_IGN);  // a dead peer is an error status, not a killed benchmark

  auto options = ps::OptionsFromFlags();
  if (!options.ok()) {
    absl::FPrintF(stderr, "ps_bench: %s\n", options.status().ToString());
    return 2;
  }
  const absl::Status s = ps::RunAll(*options);
  if (!s.ok()) {
    absl::FPrintF(stderr, "ps_bench: %s\n", s.ToString());
    return 1;
  }
  return 0;
}
