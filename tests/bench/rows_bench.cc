// rows_bench: how many sparse rows one ps_server holds, and how fast it creates them, through
// gRPC as a job would: spawns a ps_server, creates a sparse table (dim, optimizer, storage),
// pulls --rows keys never seen (each pull creates and initializes its rows), and reads the
// server's resident memory (VmRSS) as it goes.
//
//   rows_bench --rows=104857600 --dim=16 --storage=fp16      # 100M rows of dim 16 in fp16
//
// Prints a progress line every --report_rows rows (rows, rows/s, the server's RSS) and a last
// line: rows/s over the whole run and the RSS grown per row against the row's own bytes (8-byte
// key, values as stored, optimizer state). Benchmarks report figures; nothing here asserts.
#include <glog/logging.h>
#include <sys/types.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/flags_usage.h"
#include "common/status_macros.h"
#include "tests/bench/server_fleet.h"
#include "client/job_admin.h"
#include "client/rpc_client.h"

ABSL_FLAG(uint64_t, rows, uint64_t{20} << 20, "rows to create (new keys pulled)");
ABSL_FLAG(int, dim, 16, "floats per row");
ABSL_FLAG(std::string, optimizer, "sgd", "sgd, momentum, adagrad, adam or ftrl");
ABSL_FLAG(std::string, storage, "fp32", "the table's storage of values: fp32, fp16 or bf16");
ABSL_FLAG(uint64_t, keys_per_request, 65536, "keys per pull");
ABSL_FLAG(uint64_t, report_rows, uint64_t{10} << 20, "a progress line every this many rows");
ABSL_FLAG(std::string, server_binary, "", "the ps_server to spawn (default: beside this tool)");

namespace ps {
namespace {

// VmRSS of process `pid`, bytes; 0 if it cannot be read.
uint64_t ResidentBytes(pid_t pid) {
  std::FILE* f = std::fopen(absl::StrCat("/proc/", pid, "/status").c_str(), "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kib = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned long long v = 0;
    if (std::sscanf(line, "VmRSS: %llu kB", &v) == 1) kib = v;
  }
  std::fclose(f);
  return kib << 10;
}

struct Options {
  uint64_t rows = 0;
  uint64_t keys_per_request = 0;
  uint64_t report_rows = 0;
  v1::TableSpec spec;
  std::string server_binary;
};

absl::StatusOr<Options> OptionsFromFlags(const char* argv0) {
  Options o;
  o.rows = absl::GetFlag(FLAGS_rows);
  o.keys_per_request = absl::GetFlag(FLAGS_keys_per_request);
  o.report_rows = std::max<uint64_t>(absl::GetFlag(FLAGS_report_rows), 1);
  const int dim = absl::GetFlag(FLAGS_dim);
  if (o.rows == 0 || o.keys_per_request == 0 || dim < 1 || dim > 65536) {
    return absl::InvalidArgumentError("--rows and --keys_per_request must be > 0, --dim 1..65536");
  }
  v1::OptimizerSpec::Kind optimizer;
  if (!v1::OptimizerSpec::Kind_Parse(absl::AsciiStrToUpper(absl::GetFlag(FLAGS_optimizer)),
                                     &optimizer)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--optimizer: unknown '", absl::GetFlag(FLAGS_optimizer), "'"));
  }
  v1::TableSpec::Storage storage;
  if (!v1::TableSpec::Storage_Parse(absl::AsciiStrToUpper(absl::GetFlag(FLAGS_storage)),
                                    &storage)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--storage: unknown '", absl::GetFlag(FLAGS_storage), "' (fp32, fp16, bf16)"));
  }
  o.spec.set_table_id(1);
  o.spec.set_name("rows_bench");
  o.spec.set_job_id("rows_bench");
  o.spec.set_kind(v1::SPARSE);
  o.spec.set_dim(static_cast<uint32_t>(dim));
  o.spec.set_storage(storage);
  o.spec.mutable_initializer()->set_kind(v1::InitializerSpec::UNIFORM);
  o.spec.mutable_initializer()->set_low(-0.01f);
  o.spec.mutable_initializer()->set_high(0.01f);
  o.spec.mutable_optimizer()->set_kind(optimizer);
  o.server_binary = absl::GetFlag(FLAGS_server_binary);
  if (o.server_binary.empty()) {
    const std::string self(argv0);
    const size_t slash = self.rfind('/');
    o.server_binary = (slash == std::string::npos ? std::string(".") : self.substr(0, slash)) +
                      "/../../server/ps_server";
  }
  return o;
}

absl::Status Run(const Options& o) {
  PS_ASSIGN_OR_RETURN(auto fleet, bench::ServerFleet::Spawn(o.server_binary, 1));
  const pid_t server = fleet->pids()[0];
  RpcClientOptions co;
  co.servers = fleet->addresses();
  co.job_id = o.spec.job_id();
  co.rpc_timeout = absl::Seconds(120);
  PS_ASSIGN_OR_RETURN(auto client, RpcClient::Connect(std::move(co)));
  v1::ConsistencySpec consistency;
  consistency.set_mode(v1::ConsistencySpec::ASYNC);  // pulls never wait on other workers
  PS_RETURN_IF_ERROR(JobAdmin(*client).ConfigureJob(consistency, {0}));
  PS_RETURN_IF_ERROR(client->CreateTable(o.spec));
  const uint64_t before = ResidentBytes(server);
  const int state = o.spec.optimizer().kind() == v1::OptimizerSpec::SGD ? 0
                    : o.spec.optimizer().kind() == v1::OptimizerSpec::ADAM ||
                            o.spec.optimizer().kind() == v1::OptimizerSpec::FTRL
                        ? 2
                        : 1;
  const uint64_t own = sizeof(uint64_t) +
                       o.spec.dim() * (o.spec.storage() == v1::TableSpec::FP32 ? 4 : 2) +
                       o.spec.dim() * state * sizeof(float);
  absl::PrintF("rows_bench: %llu rows of dim %d, %s, %s, %llu keys a pull; server RSS %.1f MiB\n",
               static_cast<unsigned long long>(o.rows), o.spec.dim(),
               v1::OptimizerSpec::Kind_Name(o.spec.optimizer().kind()),
               v1::TableSpec::Storage_Name(o.spec.storage()),
               static_cast<unsigned long long>(o.keys_per_request), before / 1048576.0);
  std::vector<uint64_t> keys(o.keys_per_request);
  std::vector<float> out(o.keys_per_request * o.spec.dim());
  const absl::Time start = absl::Now();
  uint64_t done = 0;
  uint64_t next_report = o.report_rows;
  auto line = [&](const char* what) {
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    const uint64_t rss = ResidentBytes(server);
    absl::PrintF(
        "%-6s %11llu rows  %9.0f rows/s  server RSS %8.1f MiB  %6.1f B/row (own %llu, "
        "%.2fx)\n",
        what, static_cast<unsigned long long>(done), done / seconds, rss / 1048576.0,
        static_cast<double>(rss - before) / done, static_cast<unsigned long long>(own),
        static_cast<double>(rss - before) / done / own);
    std::fflush(stdout);
  };
  while (done < o.rows) {
    const uint64_t n = std::min(o.keys_per_request, o.rows - done);
    // Keys spread over the slots as hashed ids are (an odd multiplier: every key distinct).
    for (uint64_t i = 0; i < n; ++i) keys[i] = (done + i + 1) * 0x9E3779B97F4A7C15ull;
    PS_RETURN_IF_ERROR(
        client->Pull({TableOp{1, absl::MakeConstSpan(keys.data(), n), nullptr, out.data()}}));
    done += n;
    if (done >= next_report && done < o.rows) {
      line("after");
      next_report += o.report_rows;
    }
  }
  line("total");
  return absl::OkStatus();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  ps::SetUsage(
      "Rows one ps_server holds and creates per second, through gRPC: spawns a ps_server, pulls\n"
      "--rows new keys of a sparse table and reads the server's resident memory as it goes.\n"
      "Example: rows_bench --rows=104857600 --dim=16 --storage=fp16",
      __FILE__);
  absl::ParseCommandLine(argc, argv);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  auto options = ps::OptionsFromFlags(argv[0]);
  if (!options.ok()) {
    absl::FPrintF(stderr, "rows_bench: %s\n", options.status().ToString());
    return 2;
  }
  const absl::Status s = ps::Run(*options);
  if (!s.ok()) {
    absl::FPrintF(stderr, "rows_bench: %s\n", s.ToString());
    return 1;
  }
  return 0;
}
