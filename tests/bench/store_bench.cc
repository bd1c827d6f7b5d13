// store_bench: keys/s of a server's sparse row path alone, in process (no gRPC, no client):
//   create  pulls of keys never seen (each creates and initializes its row)
//   memory  after create: the process's resident memory grown per row (VmRSS), against the
//           row's own bytes (8-byte key, values as stored, optimizer state)
//   pull    pulls of random existing rows (the answer assembled from the rows)
//   push    pushes of gradients to random existing rows (the optimizer applied to each)
//   mem-read, mem-update (unless --nomemory_floor)
//           the rows of pull and push touched in the same random order in one plain array of
//           rows of the same size, each fetched 4 rows ahead: no lookup, no lock, no request.
//           What the memory alone allows; the store's lines over these are the share of the
//           time its row path adds. (mem-update changes the values only, as sgd does.)
//   mem-read 2t, mem-update 2t (unless --nomemory_floor)
//           the same on two threads at once, each on its own half of the rows; keys/s of both
//           summed. Over mem-read and mem-update: what a second core adds to the memory's floor.
//
//   store_bench --dims=8,64,256 --rows=1048576 --keys_per_request=4096 --seconds=1
//
// One line per dim and phase: keys/s and the row bytes moved per second (values; 1 GB = 1e9
// bytes). This is the ceiling a sparse pull or push through ps_bench can reach on one server
// thread; ps_bench's figures add the wire and the client. Compare lines of one run only.
// Benchmarks report figures; nothing here asserts on speed.
#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/flags_usage.h"
#include "common/process_tuning.h"
#include "common/status_macros.h"
#include "server/optimizer.h"
#include "server/table_store.h"

ABSL_FLAG(std::string, dims, "8,64,256", "floats per row, comma-separated: one table each");
ABSL_FLAG(uint64_t, rows, uint64_t{1} << 20,
          "rows created (a multiple of --keys_per_request; then pulled and pushed at random)");
ABSL_FLAG(uint64_t, keys_per_request, 4096, "keys per pull or push (4096 x dim 64 = 1 MiB)");
ABSL_FLAG(double, seconds, 1.0, "seconds of each of the pull and push phases");
ABSL_FLAG(bool, huge_pages, false,
          "the rows on transparent huge pages (ps_server --huge_pages; the kernel may refuse)");
ABSL_FLAG(bool, memory_floor, true,
          "also print the mem-read and mem-update lines, on one thread and on two (2t)");
ABSL_FLAG(std::string, storage, "fp32", "the table's storage of values: fp32, fp16 or bf16");
ABSL_FLAG(std::string, optimizer, "sgd",
          "the table's optimizer: sgd (no state), momentum / adagrad (1 float per value), "
          "adam / ftrl (2)");

namespace ps {
namespace {

struct BenchOptions {
  std::vector<int> dims;
  uint64_t rows = 0;
  uint64_t keys_per_request = 0;
  double seconds = 0;
  v1::OptimizerSpec::Kind optimizer = v1::OptimizerSpec::SGD;
  v1::TableSpec::Storage storage = v1::TableSpec::FP32;
  bool huge_pages = false;
  bool memory_floor = true;
};

absl::StatusOr<BenchOptions> OptionsFromFlags() {
  BenchOptions o;
  for (absl::string_view d : absl::StrSplit(absl::GetFlag(FLAGS_dims), ',', absl::SkipEmpty())) {
    int dim = 0;
    if (!absl::SimpleAtoi(d, &dim) || dim < 1 || dim > 65536) {
      return absl::InvalidArgumentError(absl::StrCat("--dims: '", d, "' is not in 1..65536"));
    }
    o.dims.push_back(dim);
  }
  if (o.dims.empty()) return absl::InvalidArgumentError("--dims names no dim");
  o.rows = absl::GetFlag(FLAGS_rows);
  o.keys_per_request = absl::GetFlag(FLAGS_keys_per_request);
  o.seconds = absl::GetFlag(FLAGS_seconds);
  o.huge_pages = absl::GetFlag(FLAGS_huge_pages);
  o.memory_floor = absl::GetFlag(FLAGS_memory_floor);
  if (o.keys_per_request == 0 || o.rows < o.keys_per_request || !(o.seconds > 0)) {
    return absl::InvalidArgumentError(
        "--keys_per_request and --seconds must be > 0, --rows at least --keys_per_request");
  }
  std::string name = absl::AsciiStrToUpper(absl::GetFlag(FLAGS_optimizer));
  if (!v1::OptimizerSpec::Kind_Parse(name, &o.optimizer)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--optimizer: unknown '", absl::GetFlag(FLAGS_optimizer), "'"));
  }
  if (!v1::TableSpec::Storage_Parse(absl::AsciiStrToUpper(absl::GetFlag(FLAGS_storage)),
                                    &o.storage)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--storage: unknown '", absl::GetFlag(FLAGS_storage), "' (fp32, fp16, bf16)"));
  }
  return o;
}

constexpr char kJob[] = "bench";

// The process's resident memory (VmRSS), bytes; 0 if it cannot be read.
uint64_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long pages = 0, resident = 0;
  const int got = std::fscanf(f, "%llu %llu", &pages, &resident);
  std::fclose(f);
  return got == 2 ? resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

v1::TableSpec Spec(uint32_t id, int dim, v1::OptimizerSpec::Kind optimizer,
                   v1::TableSpec::Storage storage) {
  v1::TableSpec spec;
  spec.set_table_id(id);
  spec.set_name(absl::StrCat("dim", dim));
  spec.set_job_id(kJob);
  spec.set_kind(v1::SPARSE);
  spec.set_dim(static_cast<uint32_t>(dim));
  spec.mutable_initializer()->set_kind(v1::InitializerSpec::UNIFORM);
  spec.mutable_initializer()->set_low(-0.1f);
  spec.mutable_initializer()->set_high(0.1f);
  spec.mutable_optimizer()->set_kind(optimizer);
  spec.mutable_optimizer()->set_learning_rate(1e-3f);
  spec.set_storage(storage);
  return spec;
}

// Keys that spread over the slots as a real job's hashed ids do.
uint64_t KeyOf(uint64_t n) { return n * 0x9E3779B97F4A7C15ull; }

void Report(int dim, const char* phase, uint64_t keys, double seconds) {
  absl::PrintF("dim %-5d %-13s %12.0f keys/s %8.3f GB/s  (%llu keys in %.3f s)\n", dim, phase,
               keys / seconds, keys * dim * sizeof(float) / seconds / 1e9,
               static_cast<unsigned long long>(keys), seconds);
  std::fflush(stdout);
}

// The mem-read and mem-update lines: the pull and push phases' access pattern (random rows of
// `row_floats` floats, `keys_per_request` at a time, gradients of `dim` floats from `grad`) on
// one plain array. Then the same on two threads at once, each on its own half of the rows (the
// "2t" lines, their keys/s summed): how far the memory's floor rises with a second core.
void MemoryFloor(const BenchOptions& o, int dim, size_t row_floats,
                 const std::vector<float>& grad) {
  constexpr size_t kAhead = 4;  // rows fetched ahead, as the store's row passes do
  const size_t stride = (row_floats * sizeof(float) + 63) / 64 * 64 / sizeof(float);
  std::vector<float> rows(o.rows * stride, 0.01f);
  std::vector<uint64_t> order(o.rows);
  for (uint64_t i = 0; i < o.rows; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(dim));
  const uint64_t n = o.keys_per_request;
  const uint64_t runs = o.rows / n;
  float* const base = rows.data();
  // Runs [first_run, first_run + num_runs) of `order`, over and over, until `end`; returns the
  // keys done. Threads given disjoint runs touch disjoint rows.
  auto pass = [&](bool update, uint64_t first_run, uint64_t num_runs, absl::Time end) {
    std::vector<float> out(n * dim);
    uint64_t done = 0;
    for (uint64_t r = 0; absl::Now() < end; ++r) {
      const uint64_t* run = order.data() + (first_run + r % num_runs) * n;
      for (uint64_t k = 0; k < n; ++k) {
        if (k + kAhead < n) {
          const char* next = reinterpret_cast<const char*>(base + run[k + kAhead] * stride);
          for (size_t b = 0; b < std::min<size_t>(stride * sizeof(float), 256); b += 64) {
            if (update) {
              __builtin_prefetch(next + b, 1);
            } else {
              __builtin_prefetch(next + b, 0);
            }
          }
        }
        float* __restrict row = base + run[k] * stride;
        if (update) {
          const float* __restrict g = grad.data() + k * dim;
          for (int i = 0; i < dim; ++i) row[i] -= 1e-3f * g[i];
        } else {
          std::copy_n(row, dim, out.data() + k * dim);
        }
      }
      done += n;
    }
    return done;
  };
  for (bool update : {false, true}) {
    const absl::Time start = absl::Now();
    const uint64_t done = pass(update, 0, runs, start + absl::Seconds(o.seconds));
    Report(dim, update ? "mem-update" : "mem-read", done,
           absl::ToDoubleSeconds(absl::Now() - start));
  }
  if (runs < 2) return;  // too few rows to give each thread its own
  for (bool update : {false, true}) {
    const absl::Time start = absl::Now();
    const absl::Time end = start + absl::Seconds(o.seconds);
    uint64_t second = 0;
    std::thread other([&] { second = pass(update, runs / 2, runs / 2, end); });
    const uint64_t first = pass(update, 0, runs / 2, end);
    other.join();
    Report(dim, update ? "mem-update 2t" : "mem-read 2t", first + second,
           absl::ToDoubleSeconds(absl::Now() - start));
  }
}

absl::Status RunDim(const BenchOptions& o, TableStore& store, uint32_t table_id, int dim) {
  const v1::TableSpec spec = Spec(table_id, dim, o.optimizer, o.storage);
  auto optimizer = RowOptimizer::Create(spec.optimizer());
  if (!optimizer.ok()) return optimizer.status();
  const size_t state_floats = static_cast<size_t>(dim) * (*optimizer)->state_per_value();
  const uint64_t resident_before = ResidentBytes();
  PS_RETURN_IF_ERROR(store.CreateTable(spec));
  const uint64_t n = o.keys_per_request;
  std::vector<uint64_t> keys(n);
  std::vector<float> grad(n * dim);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = 1e-3f * static_cast<float>(i % 97) - 0.05f;
  std::string out;
  // The gradients are the same in every push: set once, so that the figures are the store's
  // (building each request's block copied its gradients twice, as much time as the push itself).
  v1::KeyBlock pull_block;
  pull_block.set_table_id(table_id);
  v1::KeyBlock push_block = pull_block;
  push_block.set_values(reinterpret_cast<const char*>(grad.data()), grad.size() * sizeof(float));
  auto request = [&](bool push) -> absl::Status {
    v1::KeyBlock& block = push ? push_block : pull_block;
    block.set_keys(reinterpret_cast<const char*>(keys.data()), n * sizeof(uint64_t));
    TableStore::BlockView view;
    PS_RETURN_IF_ERROR(store.Resolve(kJob, block, push, &view));
    return push ? store.Apply(view) : store.Pull(view, &out);
  };

  uint64_t done = 0;
  absl::Time start = absl::Now();
  for (uint64_t first = 0; first + n <= o.rows; first += n) {
    for (uint64_t i = 0; i < n; ++i) keys[i] = KeyOf(first + i);
    PS_RETURN_IF_ERROR(request(false));
    done += n;
  }
  Report(dim, "create", done, absl::ToDoubleSeconds(absl::Now() - start));
  {
    const double per_row =
        static_cast<double>(ResidentBytes() - resident_before) / static_cast<double>(done);
    const size_t own = sizeof(uint64_t) + dim * (o.storage == v1::TableSpec::FP32 ? 4 : 2) +
                       state_floats * sizeof(float);
    absl::PrintF(
        "dim %-5d %-13s %12.1f B/row resident %5zu B/row own (key, %s values, state) %5.2fx\n", dim,
        "memory", per_row, own, absl::AsciiStrToLower(v1::TableSpec::Storage_Name(o.storage)),
        per_row / static_cast<double>(own));
    std::fflush(stdout);
  }

  // Random requests without a key twice (the server refuses those): consecutive runs of a
  // shuffled list of every key.
  std::vector<uint64_t> shuffled(o.rows);
  for (uint64_t i = 0; i < o.rows; ++i) shuffled[i] = KeyOf(i);
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(dim));
  const uint64_t runs = o.rows / n;
  for (bool push : {false, true}) {
    done = 0;
    start = absl::Now();
    const absl::Time end = start + absl::Seconds(o.seconds);
    for (uint64_t r = 0; absl::Now() < end; ++r) {
      std::copy_n(shuffled.begin() + (r % runs) * n, n, keys.begin());
      PS_RETURN_IF_ERROR(request(push));
      done += n;
    }
    Report(dim, push ? "push" : "pull", done, absl::ToDoubleSeconds(absl::Now() - start));
  }
  if (o.memory_floor) {
    // A row as the store lays it out: the values, then the optimizer's state.
    MemoryFloor(o, dim, dim + state_floats, grad);
  }
  return absl::OkStatus();
}

absl::Status Run(const BenchOptions& o) {
  absl::PrintF("%llu rows per dim, %llu keys per request, optimizer %s, storage %s\n",
               static_cast<unsigned long long>(o.rows),
               static_cast<unsigned long long>(o.keys_per_request),
               v1::OptimizerSpec::Kind_Name(o.optimizer), v1::TableSpec::Storage_Name(o.storage));
  for (size_t i = 0; i < o.dims.size(); ++i) {
    // A store per dim: the rows of one do not crowd the caches of the next.
    TableStoreOptions options;
    options.max_job_bytes = uint64_t{1} << 50;
    options.max_pull_bytes = uint64_t{1} << 40;
    options.huge_pages = o.huge_pages;
    TableStore store(options);
    PS_RETURN_IF_ERROR(RunDim(o, store, static_cast<uint32_t>(i + 1), o.dims[i]));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  ps::SetUsage(
      "Keys/s of the server's sparse row path (create, pull, push), in process: no network,\n"
      "and after create the resident memory per row against the row's own bytes.\n"
      "Then mem-read and mem-update: the same random rows on a plain array, the memory's floor,\n"
      "and their 2t lines: the same on two threads at once, each on half of the rows (keys/s\n"
      "summed). --nomemory_floor skips them; they take as much memory again as the store's rows.\n"
      "Example: store_bench --dims=8,64,256 --rows=1048576 --keys_per_request=4096",
      __FILE__);
  absl::ParseCommandLine(argc, argv);
  ps::TuneProcessForServing();  // as ps_server does: the same allocator and lock settings
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  auto options = ps::OptionsFromFlags();
  if (!options.ok()) {
    absl::FPrintF(stderr, "store_bench: %s\n", options.status().ToString());
    return 2;
  }
  const absl::Status s = ps::Run(*options);
  if (!s.ok()) {
    absl::FPrintF(stderr, "store_bench: %s\n", s.ToString());
    return 1;
  }
  return 0;
}
