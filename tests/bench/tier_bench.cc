// tier_bench: keys/s of a sparse table with a disk tier (TableSpec.tier) on a skewed workload,
// in process (no gRPC), against the same table uncapped in RAM and against a per-key RocksDB
// baseline, in the same run:
//   ram       the table uncapped: every row in RAM
//   tier      the table capped at --ram_fraction of its rows, the rest on the disk tier
//   tier+pf   the same, the next batch's keys prefetched (TableStore::Prefetch) on a second
//             thread while the current batch is pulled and pushed
//   per-key   no RAM rows: each key read with its own Get and written back with its own Put
//             (the disk tier's RocksDB, one key per call): offloading one key at a time
// With --wire, the same through one in-process ps_server and ps::Client over loopback gRPC:
//   wire-ram  the table uncapped
//   wire      capped, with a disk tier
//   wire+pf   the same, the next batch's keys announced (Client::PrefetchAsync: the server
//             reads their rows from disk on its own threads) once the current batch is pulled,
//             while the step computes (--compute), and waited for after its push
// Every workload first creates all --rows rows (a push of each key), then runs batches of
// --keys_per_request keys drawn from a Zipf distribution (rank r with probability ~ 1/r^alpha,
// ranks scattered over the keys by a hash), each batch pulled then pushed (sgd), for --seconds
// (with --compute, a sleep between each batch's pull and push stands for a training step's
// compute, which a prefetch overlaps). One line per alpha and workload: keys/s (a key pulled
// and pushed counts once), the share of the RAM table's keys/s, p50 / p99 of the pulls'
// latency, and the RAM hit rate.
//
//   tier_bench --rows=1000000 --dim=16 --alphas=0.9,1.05,1.2 --dir=/var/tmp/tier_bench
//
// The tier's directory is removed at the end. Benchmarks report figures; nothing here asserts.
#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/flags_usage.h"
#include "common/packed_bytes.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "ps/client.h"
#include "server/disk_tier.h"
#include "server/parameter_server.h"
#include "server/table_store.h"

ABSL_FLAG(uint64_t, rows, 1000000, "rows of the table (keys 0..rows-1 scattered)");
ABSL_FLAG(uint32_t, dim, 16, "floats per row");
ABSL_FLAG(std::string, storage, "fp16", "the table's storage: fp32 or fp16");
ABSL_FLAG(double, ram_fraction, 0.1, "the RAM cap (eviction.max_rows) as a share of --rows");
ABSL_FLAG(std::string, alphas, "0.9,1.05,1.2", "Zipf exponents, comma-separated");
ABSL_FLAG(uint64_t, keys_per_request, 1024,
          "keys drawn per batch (1024 x dim 16 x 4 bytes = a 64 KiB pull answer before dedup)");
ABSL_FLAG(double, seconds, 3.0, "seconds of each workload's measured phase");
ABSL_FLAG(std::string, dir, "/var/tmp/tier_bench", "the disk tier's directory (removed after)");
ABSL_FLAG(bool, per_key, true, "also run the per-key RocksDB baseline");
ABSL_FLAG(uint64_t, block_cache_mb, 32, "the tier's block cache, MiB (DiskTier::Options)");
ABSL_FLAG(uint64_t, block_kb, 8, "the tier's SST block size, KiB (DiskTier::Options)");
ABSL_FLAG(absl::Duration, compute, absl::ZeroDuration(),
          "a training step's compute, simulated by a sleep between each batch's pull and its "
          "push (what a prefetch overlaps with); 0: none, the data plane alone");
ABSL_FLAG(bool, wire, true,
          "also run the workloads through an in-process ps_server over loopback gRPC (wire-ram, "
          "wire, wire+pf: the next batch prefetched with Client::PrefetchAsync)");

namespace ps {
namespace {

constexpr char kJob[] = "bench";

// Zipf ranks by inversion of the precomputed CDF; a rank's key is a fixed scramble of it.
class Zipf {
 public:
  Zipf(uint64_t n, double alpha) : cdf_(n) {
    double sum = 0;
    for (uint64_t i = 0; i < n; ++i) {
      sum += 1.0 / std::pow(static_cast<double>(i + 1), alpha);
      cdf_[i] = sum;
    }
    for (double& c : cdf_) c /= sum;
  }
  uint64_t Key(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    const uint64_t rank = std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
    return Scramble(std::min<uint64_t>(rank, cdf_.size() - 1));
  }
  uint64_t Scramble(uint64_t rank) const {  // a bijection of [0, n) would do; any spread does
    uint64_t x = rank * 0x9e3779b97f4a7c15ULL;
    x ^= x >> 29;
    return x;
  }

 private:
  std::vector<double> cdf_;
};

std::vector<uint64_t> Batch(const Zipf& zipf, std::mt19937_64& rng, uint64_t n) {
  std::vector<uint64_t> keys;
  absl::flat_hash_set<uint64_t> seen;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t k = zipf.Key(rng);
    if (seen.insert(k).second) keys.push_back(k);
  }
  return keys;
}

v1::TableSpec Spec(uint64_t max_rows, bool tier) {
  v1::TableSpec spec;
  spec.set_table_id(1);
  spec.set_name("emb");
  spec.set_job_id(kJob);
  spec.set_kind(v1::SPARSE);
  spec.set_dim(absl::GetFlag(FLAGS_dim));
  spec.set_storage(absl::GetFlag(FLAGS_storage) == "fp16" ? v1::TableSpec::FP16
                                                          : v1::TableSpec::FP32);
  spec.mutable_initializer()->set_kind(v1::InitializerSpec::UNIFORM);
  spec.mutable_initializer()->set_low(-0.01f);
  spec.mutable_initializer()->set_high(0.01f);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(0.01f);
  if (max_rows != 0) spec.mutable_eviction()->set_max_rows(max_rows);
  if (tier) spec.mutable_tier()->set_disk(true);
  return spec;
}

struct Result {
  double keys_per_second = 0;
  double p50_us = 0;
  double p99_us = 0;
  double ram_hit = -1;  // -1: not a tiered table
};

// Pulls then pushes `keys` (the view's block); the pull's latency to `pull_us`.
absl::Status PullPush(TableStore& store, const std::vector<uint64_t>& keys,
                      std::vector<double>* pull_us, absl::Duration compute = absl::ZeroDuration()) {
  const uint32_t dim = absl::GetFlag(FLAGS_dim);
  v1::KeyBlock block;
  block.set_table_id(1);
  AppendKeys(keys, block.mutable_keys());
  TableStore::BlockView view;
  PS_RETURN_IF_ERROR(store.Resolve(kJob, block, false, &view));
  std::string values;
  const absl::Time start = absl::Now();
  PS_RETURN_IF_ERROR(store.Pull(view, &values));
  pull_us->push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
  absl::SleepFor(compute);
  std::vector<float> grads(keys.size() * dim, 0.001f);
  AppendValues(grads.data(), grads.size(), block.mutable_values());
  TableStore::BlockView push;
  PS_RETURN_IF_ERROR(store.Resolve(kJob, block, true, &push));
  return store.Apply(push);
}

absl::Status Prefetch(TableStore& store, const std::vector<uint64_t>& keys) {
  v1::KeyBlock block;
  block.set_table_id(1);
  AppendKeys(keys, block.mutable_keys());
  TableStore::BlockView view;
  PS_RETURN_IF_ERROR(store.Resolve(kJob, block, false, &view));
  return store.Prefetch(view);
}

void Percentiles(std::vector<double> us, Result* r) {
  if (us.empty()) return;
  std::sort(us.begin(), us.end());
  r->p50_us = us[us.size() / 2];
  r->p99_us = us[std::min(us.size() - 1, us.size() * 99 / 100)];
}

absl::StatusOr<Result> RunStore(const Zipf& zipf, bool tier, bool prefetch) {
  const uint64_t rows = absl::GetFlag(FLAGS_rows);
  TableStoreOptions options;
  options.max_job_bytes = uint64_t{64} << 30;
  if (tier) {
    options.tier.dir = absl::GetFlag(FLAGS_dir) + "/store";
    options.tier.block_cache_bytes = absl::GetFlag(FLAGS_block_cache_mb) << 20;
    options.tier.block_bytes = absl::GetFlag(FLAGS_block_kb) << 10;
  }
  TableStore store(options);
  const uint64_t cap = tier ? std::max<uint64_t>(1, rows * absl::GetFlag(FLAGS_ram_fraction)) : 0;
  PS_RETURN_IF_ERROR(store.CreateTable(Spec(cap, tier)));
  std::vector<double> ignored;
  for (uint64_t at = 0; at < rows; at += 4096) {  // every row created (most go to disk)
    std::vector<uint64_t> keys;
    for (uint64_t r = at; r < std::min(rows, at + 4096); ++r) keys.push_back(zipf.Scramble(r));
    PS_RETURN_IF_ERROR(PullPush(store, keys, &ignored));
  }
  std::mt19937_64 rng(1);
  const uint64_t per_request = absl::GetFlag(FLAGS_keys_per_request);
  std::vector<uint64_t> next = Batch(zipf, rng, per_request);
  std::vector<double> pull_us;
  PS_ASSIGN_OR_RETURN(const v1::TableStats before, store.Stats(1));
  uint64_t keys_done = 0;
  const absl::Time start = absl::Now();
  const absl::Duration run = absl::Seconds(absl::GetFlag(FLAGS_seconds));
  while (absl::Now() - start < run) {
    const std::vector<uint64_t> keys = std::move(next);
    next = Batch(zipf, rng, per_request);
    absl::Status fetched;
    std::thread ahead;
    if (prefetch) ahead = std::thread([&] { fetched = Prefetch(store, next); });
    absl::Status done = PullPush(store, keys, &pull_us, absl::GetFlag(FLAGS_compute));
    if (ahead.joinable()) ahead.join();
    PS_RETURN_IF_ERROR(done);
    PS_RETURN_IF_ERROR(fetched);
    keys_done += keys.size();
  }
  Result r;
  r.keys_per_second = keys_done / absl::ToDoubleSeconds(absl::Now() - start);
  Percentiles(std::move(pull_us), &r);
  if (tier) {
    PS_ASSIGN_OR_RETURN(const v1::TableStats after, store.Stats(1));
    const double hits = after.ram_hits() - before.ram_hits();
    const double looked = hits + (after.disk_lookups() - before.disk_lookups());
    r.ram_hit = looked > 0 ? hits / looked : 1.0;
  }
  return r;
}

// The workload through a ps_server over loopback gRPC: the table capped with a disk tier
// (`tier`) or uncapped; `prefetch`: the next batch announced before the current one is pulled.
absl::StatusOr<Result> RunWire(const Zipf& zipf, bool tier, bool prefetch) {
  const uint64_t rows = absl::GetFlag(FLAGS_rows);
  const uint32_t dim = absl::GetFlag(FLAGS_dim);
  ParameterServerOptions options;
  options.listen = "127.0.0.1:0";
  options.max_job_bytes = uint64_t{64} << 30;
  if (tier) options.tier_dir = absl::GetFlag(FLAGS_dir) + "/wire";
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ParameterServer> server, ParameterServer::Start(options));
  ClientOptions client_options;
  client_options.servers = {absl::StrCat("127.0.0.1:", server->port())};
  client_options.job_id = kJob;
  client_options.rpc_timeout = absl::Seconds(120);
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(client_options));
  TableConfig config;
  config.name = "emb";
  config.kind = TableKind::kSparse;
  config.dim = dim;
  config.storage = absl::GetFlag(FLAGS_storage) == "fp16" ? Storage::kFp16 : Storage::kFp32;
  config.initializer = Initializer::Uniform(-0.01f, 0.01f);
  config.optimizer = Optimizer::Sgd(0.01f);
  if (tier) {
    config.eviction.max_rows = std::max<uint64_t>(1, rows * absl::GetFlag(FLAGS_ram_fraction));
    config.disk_tier = true;
  }
  PS_ASSIGN_OR_RETURN(const Table table, client->CreateTable(config));
  std::vector<float> values, grads;
  // Pulls `keys` (its latency to `pull_us`, if any), runs `between` (the step's compute), and
  // pushes them.
  auto pull_push = [&](const std::vector<uint64_t>& keys, std::vector<double>* pull_us,
                       absl::FunctionRef<void()> between) {
    values.resize(keys.size() * dim);
    grads.assign(keys.size() * dim, 0.001f);
    const absl::Time start = absl::Now();
    PS_RETURN_IF_ERROR(client->Pull(table, keys, absl::MakeSpan(values)));
    if (pull_us != nullptr) pull_us->push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
    between();
    return client->Push(table, keys, grads);
  };
  for (uint64_t at = 0; at < rows; at += 4096) {  // every row created (most go to disk)
    std::vector<uint64_t> keys;
    for (uint64_t r = at; r < std::min(rows, at + 4096); ++r) keys.push_back(zipf.Scramble(r));
    PS_RETURN_IF_ERROR(pull_push(keys, nullptr, [] {}));
  }
  std::mt19937_64 rng(1);
  const uint64_t per_request = absl::GetFlag(FLAGS_keys_per_request);
  std::vector<uint64_t> next = Batch(zipf, rng, per_request);
  std::vector<double> pull_us;
  PS_ASSIGN_OR_RETURN(const v1::TableStats before, server->store()->Stats(table.id));
  uint64_t keys_done = 0;
  const absl::Time start = absl::Now();
  const absl::Duration run = absl::Seconds(absl::GetFlag(FLAGS_seconds));
  while (absl::Now() - start < run) {
    const std::vector<uint64_t> keys = std::move(next);
    next = Batch(zipf, rng, per_request);
    // The next batch announced once this one is pulled, while the step computes.
    Pending ahead;
    PS_RETURN_IF_ERROR(pull_push(keys, &pull_us, [&] {
      if (prefetch) ahead = client->PrefetchAsync(table, next);  // copies the keys
      absl::SleepFor(absl::GetFlag(FLAGS_compute));
    }));
    if (prefetch) PS_RETURN_IF_ERROR(ahead.Wait());
    keys_done += keys.size();
  }
  Result r;
  r.keys_per_second = keys_done / absl::ToDoubleSeconds(absl::Now() - start);
  Percentiles(std::move(pull_us), &r);
  if (tier) {
    PS_ASSIGN_OR_RETURN(const v1::TableStats after, server->store()->Stats(table.id));
    const double hits = after.ram_hits() - before.ram_hits();
    const double looked = hits + (after.disk_lookups() - before.disk_lookups());
    r.ram_hit = looked > 0 ? hits / looked : 1.0;
  }
  client.reset();
  server->Shutdown();
  return r;
}

// One RocksDB Get and one Put per key (the rows as the tier stores them), no RAM rows.
absl::StatusOr<Result> RunPerKey(const Zipf& zipf) {
  const uint64_t rows = absl::GetFlag(FLAGS_rows);
  const uint32_t dim = absl::GetFlag(FLAGS_dim);
  const size_t row_bytes = 8 + dim * (absl::GetFlag(FLAGS_storage) == "fp16" ? 2 : 4);
  DiskTier::Options options;
  options.dir = absl::GetFlag(FLAGS_dir) + "/per_key";
  options.block_cache_bytes = absl::GetFlag(FLAGS_block_cache_mb) << 20;
  options.block_bytes = absl::GetFlag(FLAGS_block_kb) << 10;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<DiskTier> db, DiskTier::Open(options));
  const std::string prefix = DiskTier::TablePrefix(kJob, 1);
  const std::string initial(row_bytes, '\0');
  for (uint64_t at = 0; at < rows; at += 4096) {
    std::vector<DiskTier::Write> batch;
    for (uint64_t r = at; r < std::min(rows, at + 4096); ++r) {
      const uint64_t key = zipf.Scramble(r);
      batch.push_back({SlotOf(1, key), key, initial});
    }
    PS_RETURN_IF_ERROR(db->Apply(prefix, batch, {}));
  }
  std::mt19937_64 rng(1);
  const uint64_t per_request = absl::GetFlag(FLAGS_keys_per_request);
  std::vector<double> pull_us;
  std::vector<std::string> values;
  std::vector<bool> found;
  uint64_t keys_done = 0;
  const absl::Time start = absl::Now();
  const absl::Duration run = absl::Seconds(absl::GetFlag(FLAGS_seconds));
  while (absl::Now() - start < run) {
    const std::vector<uint64_t> keys = Batch(zipf, rng, per_request);
    const absl::Time pull_start = absl::Now();
    std::vector<std::string> rows_read(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      PS_RETURN_IF_ERROR(db->MultiGet(prefix, SlotOf(1, keys[i]), absl::MakeConstSpan(&keys[i], 1),
                                      &values, &found));
      rows_read[i] = found[0] ? values[0] : initial;
    }
    pull_us.push_back(absl::ToDoubleMicroseconds(absl::Now() - pull_start));
    for (size_t i = 0; i < keys.size(); ++i) {
      rows_read[i][8] ^= 1;  // an update
      const DiskTier::Row row{keys[i], std::move(rows_read[i])};
      PS_RETURN_IF_ERROR(db->Put(prefix, SlotOf(1, keys[i]), absl::MakeConstSpan(&row, 1)));
    }
    keys_done += keys.size();
  }
  Result r;
  r.keys_per_second = keys_done / absl::ToDoubleSeconds(absl::Now() - start);
  Percentiles(std::move(pull_us), &r);
  r.ram_hit = 0;
  return r;
}

void Print(double alpha, const char* name, const Result& r, double ram_keys_per_second) {
  std::printf("alpha %-5.2f %-8s %12.0f keys/s  %6.1f%% of ram  pull p50 %8.0f us  p99 %8.0f us",
              alpha, name, r.keys_per_second, 100.0 * r.keys_per_second / ram_keys_per_second,
              r.p50_us, r.p99_us);
  if (r.ram_hit >= 0) std::printf("  ram hits %5.1f%%", 100.0 * r.ram_hit);
  std::printf("\n");
  std::fflush(stdout);
}

int Run() {
  std::vector<double> alphas;
  for (absl::string_view a : absl::StrSplit(absl::GetFlag(FLAGS_alphas), ',', absl::SkipEmpty())) {
    double v;
    if (!absl::SimpleAtod(a, &v) || v <= 0) {
      std::fprintf(stderr, "tier_bench: bad --alphas entry '%s'\n", std::string(a).c_str());
      return 2;
    }
    alphas.push_back(v);
  }
  std::printf(
      "rows %llu, dim %u %s, RAM cap %.0f%% of the rows, %llu keys drawn per batch, "
      "compute %s a batch\n",
      static_cast<unsigned long long>(absl::GetFlag(FLAGS_rows)), absl::GetFlag(FLAGS_dim),
      absl::GetFlag(FLAGS_storage).c_str(), 100 * absl::GetFlag(FLAGS_ram_fraction),
      static_cast<unsigned long long>(absl::GetFlag(FLAGS_keys_per_request)),
      absl::FormatDuration(absl::GetFlag(FLAGS_compute)).c_str());
  int rc = 0;
  for (double alpha : alphas) {
    const Zipf zipf(absl::GetFlag(FLAGS_rows), alpha);
    auto ram = RunStore(zipf, false, false);
    auto tier = RunStore(zipf, true, false);
    auto tier_pf = RunStore(zipf, true, true);
    for (const auto* r : {&ram, &tier, &tier_pf}) {
      if (!r->ok()) {
        std::fprintf(stderr, "tier_bench: %s\n", r->status().ToString().c_str());
        rc = 1;
      }
    }
    if (rc != 0) break;
    Print(alpha, "ram", *ram, ram->keys_per_second);
    Print(alpha, "tier", *tier, ram->keys_per_second);
    Print(alpha, "tier+pf", *tier_pf, ram->keys_per_second);
    if (absl::GetFlag(FLAGS_per_key)) {
      auto per_key = RunPerKey(zipf);
      if (!per_key.ok()) {
        std::fprintf(stderr, "tier_bench: %s\n", per_key.status().ToString().c_str());
        rc = 1;
        break;
      }
      Print(alpha, "per-key", *per_key, ram->keys_per_second);
    }
    if (absl::GetFlag(FLAGS_wire)) {
      auto wire_ram = RunWire(zipf, false, false);
      auto wire = RunWire(zipf, true, false);
      auto wire_pf = RunWire(zipf, true, true);
      for (const auto* r : {&wire_ram, &wire, &wire_pf}) {
        if (!r->ok()) {
          std::fprintf(stderr, "tier_bench: %s\n", r->status().ToString().c_str());
          rc = 1;
        }
      }
      if (rc != 0) break;
      // Their share is of the wire-ram line's keys/s.
      Print(alpha, "wire-ram", *wire_ram, wire_ram->keys_per_second);
      Print(alpha, "wire", *wire, wire_ram->keys_per_second);
      Print(alpha, "wire+pf", *wire_pf, wire_ram->keys_per_second);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(absl::GetFlag(FLAGS_dir), ec);
  return rc;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  ps::SetUsage(
      "Keys/s of a sparse table with a disk tier on a Zipf workload, against the table in RAM "
      "and a per-key RocksDB baseline.\n"
      "Example: tier_bench --rows=1000000 --dim=16 --alphas=0.9,1.05,1.2",
      __FILE__);
  absl::ParseCommandLine(argc, argv);
  return ps::Run();
}
