// checkpoint_bench: throughput of a server's checkpoint path, in process (no gRPC):
//   snapshot  TableStore::Snapshot (the rows copied; what a sync job's training waits for)
//   write     WriteCheckpoint of that copy (RocksDB, synced)
//   restore   ReadCheckpointSlots (checksums verified) + TableStore::LoadSlots into a fresh store
//
//   checkpoint_bench --rows=1048576 --dim=256 --optimizer=sgd --dir=/data/bench
//
// Prints one line per phase with bytes of rows (values + optimizer state; 1 MB = 1e6 bytes),
// seconds and MB/s, then the checkpoint's size on disk, and checks that the restored rows are
// bit-identical to the source's (a digest over every row). Benchmarks report figures; nothing
// here asserts on speed.
//
// With --ram_rows (sparse tables): the table gets a disk tier under --dir (eviction.max_rows =
// --ram_rows, tier.disk), so that every row past the cap is on disk when the checkpoint is
// taken. Each run also prints the process's peak resident memory (VmHWM, reset before the
// phase) over the snapshot and the write, and over the restore, against its RSS before them.
//
//   checkpoint_bench --kind=sparse --rows=4000000 --dim=16 --ram_rows=100000 --dir=/var/tmp/cb
#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
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
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "server/checkpoint_io.h"
#include "server/internal/crc32c.h"
#include "server/table_store.h"

ABSL_FLAG(uint64_t, rows, uint64_t{1} << 20, "rows of the table");
ABSL_FLAG(int, dim, 256, "floats per row (values; optimizer state comes on top)");
ABSL_FLAG(std::string, kind, "dense", "table kind: dense or sparse");
ABSL_FLAG(std::string, optimizer, "sgd",
          "sgd (no state), momentum / adagrad (1 float per value), adam / ftrl (2)");
ABSL_FLAG(int, updates, 1,
          "gradient rounds applied to every row before the checkpoint (fills optimizer state)");
ABSL_FLAG(std::string, dir, "",
          "directory for the checkpoint (removed at exit unless --keep); default: a new "
          "directory under the system's temporary directory");
ABSL_FLAG(std::string, method, "sst",
          "how rows are written: sst (SST files + ingest), batch "
          "(WriteBatch per slot, no WAL, then flush), or both");
ABSL_FLAG(int, file_mb, 256, "sst: MiB per SST file");
ABSL_FLAG(bool, keep, false, "keep the checkpoint directory");
ABSL_FLAG(uint64_t, ram_rows, 0,
          "sparse tables: a disk tier under --dir with this RAM cap (eviction.max_rows); 0: none");

namespace ps {
namespace {

struct BenchOptions {
  uint64_t rows = 0;
  int dim = 0;
  v1::TableKind kind = v1::DENSE;
  v1::OptimizerSpec::Kind optimizer = v1::OptimizerSpec::SGD;
  int updates = 0;
  std::string dir;
  std::vector<CheckpointWriteOptions::Method> methods;
  uint64_t file_bytes = 0;
  bool keep = false;
  uint64_t ram_rows = 0;  // with a disk tier (sparse)
};

absl::StatusOr<BenchOptions> OptionsFromFlags() {
  BenchOptions o;
  o.rows = absl::GetFlag(FLAGS_rows);
  o.dim = absl::GetFlag(FLAGS_dim);
  o.updates = absl::GetFlag(FLAGS_updates);
  o.keep = absl::GetFlag(FLAGS_keep);
  o.file_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_file_mb)) << 20;
  if (o.rows == 0 || o.dim <= 0 || o.updates < 0 || o.file_bytes == 0) {
    return absl::InvalidArgumentError("--rows, --dim and --file_mb must be > 0, --updates >= 0");
  }
  const std::string kind = absl::GetFlag(FLAGS_kind);
  if (kind != "dense" && kind != "sparse") {
    return absl::InvalidArgumentError("--kind must be dense or sparse");
  }
  o.kind = kind == "dense" ? v1::DENSE : v1::SPARSE;
  o.ram_rows = absl::GetFlag(FLAGS_ram_rows);
  if (o.ram_rows != 0 && o.kind != v1::SPARSE) {
    return absl::InvalidArgumentError("--ram_rows needs --kind=sparse");
  }
  std::string optimizer = absl::AsciiStrToUpper(absl::GetFlag(FLAGS_optimizer));
  if (!v1::OptimizerSpec::Kind_Parse(optimizer, &o.optimizer)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--optimizer ", absl::GetFlag(FLAGS_optimizer), " is unknown"));
  }
  const std::string method = absl::GetFlag(FLAGS_method);
  if (method == "sst" || method == "both") {
    o.methods.push_back(CheckpointWriteOptions::Method::kSstIngest);
  }
  if (method == "batch" || method == "both") {
    o.methods.push_back(CheckpointWriteOptions::Method::kWriteBatch);
  }
  if (o.methods.empty()) return absl::InvalidArgumentError("--method must be sst, batch or both");
  o.dir = absl::GetFlag(FLAGS_dir);
  if (o.dir.empty()) {
    o.dir = (std::filesystem::temp_directory_path() / absl::StrCat("checkpoint_bench_", getpid()))
                .string();
  }
  return o;
}

constexpr char kJob[] = "bench";
constexpr uint32_t kTable = 1;

v1::TableSpec Spec(const BenchOptions& o) {
  v1::TableSpec spec;
  spec.set_table_id(kTable);
  spec.set_name("table");
  spec.set_job_id(kJob);
  spec.set_kind(o.kind);
  spec.set_dim(static_cast<uint32_t>(o.dim));
  if (o.kind == v1::DENSE) spec.set_num_rows(o.rows);
  spec.mutable_initializer()->set_kind(v1::InitializerSpec::UNIFORM);
  spec.mutable_initializer()->set_low(-0.1f);
  spec.mutable_initializer()->set_high(0.1f);
  spec.mutable_optimizer()->set_kind(o.optimizer);
  if (o.ram_rows != 0) {
    spec.mutable_eviction()->set_max_rows(o.ram_rows);
    spec.mutable_tier()->set_disk(true);
  }
  return spec;
}

// `name`'s figure in /proc/self/status ("VmRSS", "VmHWM"), bytes; 0 if it cannot be read.
uint64_t ProcStatusBytes(const std::string& name) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    unsigned long long kib = 0;
    if (line.rfind(name + ":", 0) == 0 &&
        std::sscanf(line.c_str() + name.size() + 1, "%llu", &kib) == 1) {
      return kib << 10;
    }
  }
  return 0;
}

// Starts the peak resident memory (VmHWM) over from the RSS now (Linux: clear_refs 5).
void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// `tier`: the directory of its disk tier (tables with --ram_rows).
std::unique_ptr<TableStore> NewStore(const BenchOptions& o, const std::string& tier) {
  TableStoreOptions options;
  if (o.ram_rows != 0) {
    options.tier.dir = absl::StrCat(o.dir, "/", tier);
    options.tier.min_free_bytes = 0;
  }
  options.max_dense_table_bytes = uint64_t{1} << 40;
  auto store = std::make_unique<TableStore>(options);
  const absl::Status s = store->CreateTable(Spec(o));
  CHECK(s.ok()) << s;  // start-up of a tool
  return store;
}

// Creates every row (sparse) and applies `updates` gradient rounds, in blocks of keys.
absl::Status Fill(const BenchOptions& o, TableStore& store) {
  constexpr uint64_t kBlock = 4096;
  std::vector<float> grad(kBlock * o.dim);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = 1e-3f * static_cast<float>(i % 97) - 0.05f;
  const int rounds = std::max(o.updates, o.kind == v1::SPARSE ? 1 : 0);
  for (int round = 0; round < rounds; ++round) {
    for (uint64_t first = 0; first < o.rows; first += kBlock) {
      v1::KeyBlock block;
      block.set_table_id(kTable);
      const uint64_t n = std::min(kBlock, o.rows - first);
      std::vector<uint64_t> keys(n);
      for (uint64_t i = 0; i < n; ++i) keys[i] = first + i;
      block.set_keys(reinterpret_cast<const char*>(keys.data()), n * sizeof(uint64_t));
      if (round < o.updates) {
        block.set_values(reinterpret_cast<const char*>(grad.data()), n * o.dim * sizeof(float));
      }
      TableStore::BlockView view;
      PS_RETURN_IF_ERROR(store.Resolve(kJob, block, round < o.updates, &view));
      if (round < o.updates) {
        PS_RETURN_IF_ERROR(store.Apply(view));
      } else {
        std::string ignored;
        PS_RETURN_IF_ERROR(store.Pull(view, &ignored));
      }
    }
  }
  return absl::OkStatus();
}

// Order-independent digest of every row: the sum of each row's CRC-32C over key, update
// count and floats.
uint64_t Digest(const TableStore& store) {
  uint64_t sum = 0;
  store.ForEachRow(kTable, [&](uint64_t key, int64_t updates, absl::Span<const float> row) {
    uint32_t crc = Crc32c(&key, sizeof(key));
    crc = Crc32cExtend(crc, &updates, sizeof(updates));
    sum += Crc32cExtend(crc, row.data(), row.size() * sizeof(float));
  });
  return sum;
}

void Report(const char* phase, uint64_t bytes, double seconds) {
  absl::PrintF("%-22s: %9.1f MB in %7.3f s = %8.1f MB/s\n", phase, bytes / 1e6, seconds,
               bytes / 1e6 / seconds);
}

const char* MethodName(CheckpointWriteOptions::Method m) {
  return m == CheckpointWriteOptions::Method::kSstIngest ? "sst" : "batch";
}

absl::Status Run(const BenchOptions& o) {
  absl::PrintF(
      "checkpoint_bench: %s table of %d rows x %d dims, optimizer %s, %d update(s); "
      "checkpoints under %s\n",
      o.kind == v1::DENSE ? "dense" : "sparse", o.rows, o.dim,
      v1::OptimizerSpec::Kind_Name(o.optimizer), o.updates, o.dir);
  std::unique_ptr<TableStore> source = NewStore(o, "tier-source");
  PS_RETURN_IF_ERROR(Fill(o, *source));
  const uint64_t digest = Digest(*source);

  for (CheckpointWriteOptions::Method method : o.methods) {
    const std::string path = absl::StrCat(o.dir, "/ckpt-", MethodName(method), "/server-0");
    const uint64_t rss_before = ProcStatusBytes("VmRSS");
    ResetPeakRss();
    absl::Time start = absl::Now();
    auto snapshot = std::make_unique<JobSnapshot>(source->Snapshot(kJob));
    const double snapshot_s = absl::ToDoubleSeconds(absl::Now() - start);
    const uint64_t bytes = snapshot->bytes;
    Report("snapshot", bytes, snapshot_s);

    CheckpointWriteOptions write;
    write.method = method;
    write.target_file_bytes = o.file_bytes;
    v1::CheckpointShardMeta meta;
    meta.set_checkpoint_id(1);
    PS_ASSIGN_OR_RETURN(const CheckpointWriteStats stats,
                        WriteCheckpoint(*snapshot, path, meta, write));
    snapshot.reset();
    const uint64_t peak = ProcStatusBytes("VmHWM");
    Report(absl::StrCat("write (", MethodName(method), ")").c_str(), bytes, stats.seconds);
    Report("snapshot + write", bytes, snapshot_s + stats.seconds);
    absl::PrintF("%-22s: %9.1f MB (%.3f x the row bytes)\n", "on disk", stats.disk_bytes / 1e6,
                 static_cast<double>(stats.disk_bytes) / bytes);
    if (o.ram_rows != 0) {
      const v1::TableStats table = *source->Stats(kTable);
      absl::PrintF("%-22s: %d in RAM, %d on disk\n", "rows", table.rows(), table.disk_rows());
    }
    absl::PrintF("%-22s: %9.1f MB peak (RSS before: %.1f MB; peak - before: %.1f MB)\n",
                 "RSS, snapshot + write", peak / 1e6, rss_before / 1e6,
                 (static_cast<double>(peak) - static_cast<double>(rss_before)) / 1e6);

    // Restore into a fresh store: read everything (verified), then load.
    std::unique_ptr<TableStore> target = NewStore(o, absl::StrCat("tier-", MethodName(method)));
    v1::CheckpointShard shard;
    shard.set_path(path);
    shard.set_slots(EncodeSlotBitmap(std::vector<bool>(kNumSlots, true)));
    const uint64_t rss_before_restore = ProcStatusBytes("VmRSS");
    ResetPeakRss();
    start = absl::Now();
    PS_ASSIGN_OR_RETURN(
        CheckpointRows rows,
        ReadCheckpointSlots({shard}, std::vector<bool>(kNumSlots, true), target->JobTables(kJob)));
    const double read_s = absl::ToDoubleSeconds(absl::Now() - start);
    start = absl::Now();
    PS_RETURN_IF_ERROR(target->LoadSlots(kJob, std::vector<bool>(kNumSlots, true), rows.rows));
    const double load_s = absl::ToDoubleSeconds(absl::Now() - start);
    Report("read + verify", rows.bytes, read_s);
    Report("load", rows.bytes, load_s);
    Report("restore (read + load)", rows.bytes, read_s + load_s);
    rows = CheckpointRows();  // freed before the digest pass
    const uint64_t restore_peak = ProcStatusBytes("VmHWM");
    absl::PrintF(
        "%-22s: %9.1f MB peak (RSS before: %.1f MB; peak - before: %.1f MB)\n", "RSS, restore",
        restore_peak / 1e6, rss_before_restore / 1e6,
        (static_cast<double>(restore_peak) - static_cast<double>(rss_before_restore)) / 1e6);
    const bool same = Digest(*target) == digest;
    absl::PrintF("%-22s: %s\n", "restored rows", same ? "bit-identical" : "DIFFERENT");
    if (!same) return absl::DataLossError("the restored rows differ from the source's");
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  ps::SetUsage(
      "Throughput of checkpoint snapshot, write (RocksDB) and restore (read + verify + load).\n"
      "Example: checkpoint_bench --rows=1048576 --dim=256 --optimizer=sgd --dir=/data/bench",
      __FILE__);
  absl::ParseCommandLine(argc, argv);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  auto options = ps::OptionsFromFlags();
  if (!options.ok()) {
    absl::FPrintF(stderr, "checkpoint_bench: %s\n", options.status().ToString());
    return 2;
  }
  std::error_code ec;
  if (std::filesystem::exists(options->dir + "/ckpt-sst", ec) ||
      std::filesystem::exists(options->dir + "/ckpt-batch", ec)) {
    absl::FPrintF(stderr, "checkpoint_bench: %s already holds a checkpoint_bench run\n",
                  options->dir);
    return 2;
  }
  const absl::Status s = ps::Run(*options);
  if (!options->keep) {
    std::filesystem::remove_all(options->dir + "/ckpt-sst", ec);
    std::filesystem::remove_all(options->dir + "/ckpt-batch", ec);
    std::filesystem::remove(options->dir, ec);  // only if it is now empty
  }
  if (!s.ok()) {
    absl::FPrintF(stderr, "checkpoint_bench: %s\n", s.ToString());
    return 1;
  }
  return 0;
}
