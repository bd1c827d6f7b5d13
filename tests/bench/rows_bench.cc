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
//
// With a disk tier (docs/embedding-tables.md#disk-tier): --ram_rows caps the rows in RAM
// (eviction.max_rows) and --tier_root gives the server its --tier_roots, so that every row past
// the cap is written back to disk. The lines then add the rows in RAM and on disk, the tier's
// bytes on disk, and the RAM the server grew per on-disk row since the cap was reached (bloom
// filters, SST indexes, write buffers: what a row on disk costs in RAM):
//
//   rows_bench --rows=1000000000 --dim=16 --storage=fp16 --ram_rows=100000000 \
//       --tier_root=/var/tmp/rows_bench_tier
//
// The run stops early, saying so, when the tier's filesystem has less than --min_free_gib left.
#include <glog/logging.h>
#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
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
#include "client/job_admin.h"
#include "client/rpc_client.h"
#include "common/flags_usage.h"
#include "common/status_macros.h"
#include "ps/v1/parameter_server.grpc.pb.h"
#include "tests/bench/server_fleet.h"

ABSL_FLAG(uint64_t, rows, uint64_t{20} << 20, "rows to create (new keys pulled)");
ABSL_FLAG(int, dim, 16, "floats per row");
ABSL_FLAG(std::string, optimizer, "sgd", "sgd, momentum, adagrad, adam or ftrl");
ABSL_FLAG(std::string, storage, "fp32", "the table's storage of values: fp32, fp16 or bf16");
ABSL_FLAG(uint64_t, keys_per_request, 65536, "keys per pull");
ABSL_FLAG(uint64_t, report_rows, uint64_t{10} << 20, "a progress line every this many rows");
ABSL_FLAG(std::string, server_binary, "", "the ps_server to spawn (default: beside this tool)");
ABSL_FLAG(uint64_t, ram_rows, 0, "the table's RAM cap, rows (eviction.max_rows; 0: none)");
ABSL_FLAG(std::string, tier_root, "",
          "an absolute directory for the server's disk tier (--tier_roots); the table gets "
          "tier.disk (needs --ram_rows). Removed by the server at exit");
ABSL_FLAG(uint64_t, min_free_gib, 4,
          "with --tier_root: stop early when its filesystem has less than this many GiB free");

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
  std::string tier_root;
  uint64_t min_free_bytes = 0;
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
  if (const uint64_t cap = absl::GetFlag(FLAGS_ram_rows); cap != 0) {
    o.spec.mutable_eviction()->set_max_rows(cap);
  }
  o.tier_root = absl::GetFlag(FLAGS_tier_root);
  if (!o.tier_root.empty()) {
    if (absl::GetFlag(FLAGS_ram_rows) == 0 || o.tier_root.front() != '/') {
      return absl::InvalidArgumentError("--tier_root needs --ram_rows and an absolute directory");
    }
    o.spec.mutable_tier()->set_disk(true);
    o.min_free_bytes = absl::GetFlag(FLAGS_min_free_gib) << 30;
  }
  o.server_binary = absl::GetFlag(FLAGS_server_binary);
  if (o.server_binary.empty()) {
    const std::string self(argv0);
    const size_t slash = self.rfind('/');
    o.server_binary = (slash == std::string::npos ? std::string(".") : self.substr(0, slash)) +
                      "/../../server/ps_server";
  }
  return o;
}

// The server's figures for the table (rows in RAM, rows and bytes on disk).
absl::StatusOr<v1::TableStats> Stats(const std::string& address, uint32_t table_id) {
  auto stub = v1::ParameterServer::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  v1::DescribeTableRequest req;
  req.set_table_id(table_id);
  v1::DescribeTableResponse resp;
  const grpc::Status s = stub->DescribeTable(&ctx, req, &resp);
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("DescribeTable: ", s.error_message()));
  return resp.stats();
}

absl::Status Run(const Options& o) {
  std::vector<std::string> flags;
  if (!o.tier_root.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.tier_root, ec);
    flags.push_back("--tier_roots=" + o.tier_root);
  }
  PS_ASSIGN_OR_RETURN(auto fleet, bench::ServerFleet::Spawn(o.server_binary, 1, flags));
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
  // With a tier: the RSS and rows on disk when rows first went to disk, the base of the RAM per
  // on-disk row.
  uint64_t rss_at_cap = 0;
  uint64_t disk_rows_at_cap = 0;
  auto line = [&](const char* what) -> absl::Status {
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    const uint64_t rss = ResidentBytes(server);
    absl::PrintF(
        "%-6s %11llu rows  %9.0f rows/s  server RSS %8.1f MiB  %6.1f B/row (own %llu, "
        "%.2fx)",
        what, static_cast<unsigned long long>(done), done / seconds, rss / 1048576.0,
        static_cast<double>(rss - before) / done, static_cast<unsigned long long>(own),
        static_cast<double>(rss - before) / done / own);
    if (!o.tier_root.empty()) {
      PS_ASSIGN_OR_RETURN(const v1::TableStats stats, Stats(fleet->addresses()[0], 1));
      absl::PrintF(
          "  RAM %llu rows, disk %llu rows %.1f MiB", static_cast<unsigned long long>(stats.rows()),
          static_cast<unsigned long long>(stats.disk_rows()), stats.disk_bytes() / 1048576.0);
      if (rss_at_cap == 0 && stats.disk_rows() > 0) {
        rss_at_cap = rss;
        disk_rows_at_cap = stats.disk_rows();
      } else if (rss_at_cap != 0 && stats.disk_rows() > disk_rows_at_cap) {
        absl::PrintF("  RAM per disk row %.2f B",
                     (static_cast<double>(rss) - static_cast<double>(rss_at_cap)) /
                         static_cast<double>(stats.disk_rows() - disk_rows_at_cap));
      }
    }
    absl::PrintF("\n");
    std::fflush(stdout);
    return absl::OkStatus();
  };
  // Whether the tier's filesystem still has room; false (and why, printed) when it has not.
  auto room = [&]() {
    if (o.tier_root.empty()) return true;
    std::error_code ec;
    const std::filesystem::space_info space = std::filesystem::space(o.tier_root, ec);
    if (ec || space.available >= o.min_free_bytes) return true;
    absl::PrintF("stopped: %s has %.1f GiB free (--min_free_gib=%llu)\n", o.tier_root,
                 space.available / 1073741824.0,
                 static_cast<unsigned long long>(o.min_free_bytes >> 30));
    return false;
  };
  while (done < o.rows && room()) {
    const uint64_t n = std::min(o.keys_per_request, o.rows - done);
    // Keys spread over the slots as hashed ids are (an odd multiplier: every key distinct).
    for (uint64_t i = 0; i < n; ++i) keys[i] = (done + i + 1) * 0x9E3779B97F4A7C15ull;
    PS_RETURN_IF_ERROR(
        client->Pull({TableOp{1, absl::MakeConstSpan(keys.data(), n), nullptr, out.data()}}));
    done += n;
    if (done >= next_report && done < o.rows) {
      PS_RETURN_IF_ERROR(line("after"));
      next_report += o.report_rows;
    }
  }
  return line("total");
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
