// worker_bench: where a worker's step time goes, per compute backend (cpu on OpenBLAS, cpu-ref on
// the reference kernel, and cuda when there is a device). For an MLP (default: the wide fashion
// MLP, 784-4096-4096-10, ~20M parameters):
//
//   step     samples/s of the worker's training step (forward + backward, with the host <->
//            device copies of parameters and gradients a worker does every step);
//   gemm     TFLOP/s of each of the step's own GEMMs through the backend, against
//   peak     the raw cuBLAS SGEMM / TF32 rate measured in the same run (cpu, cpu-ref: OpenBLAS's
//            own SGEMM on a large square, once per run);
//   copy     host <-> device GB/s between page-locked staging and device memory (cpu: memcpy);
//   overlap  whole training steps against real ps_server processes on loopback (a JobRunner as
//            in ps_worker): samples/s, compute and communication time, and the share of the
//            communication hidden behind compute, with overlap off and on per consistency mode.
//
//   worker_bench --backends=cpu,cuda --layers=784,4096,4096,10 --batch=256
//   worker_bench --backends=cpu,cpu-ref --overlap=false   # OpenBLAS against the reference kernel
//
// Benchmarks report figures; nothing here asserts on speed. This file is the tool's main: the
// flags fill BenchOptions, as in the daemons' main.cc.
#include <glog/logging.h>
#include <prometheus/registry.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/flags_usage.h"
#include "common/process_tuning.h"
#include "common/status_macros.h"
#include "tests/bench/server_fleet.h"
#include "client/job_admin.h"
#include "client/rpc_client.h"
#include "worker/compute/compute_backend.h"
#include "worker/compute/cpu_backend.h"
#include "worker/compute/cuda/cuda_backend.h"
#include "worker/compute/device.h"
#include "worker/daemon/job_runner.h"
#include "worker/daemon/worker_metrics.h"
#include "worker/models/fashion_model.h"
#include "worker/models/mlp_model.h"

ABSL_FLAG(std::string, backends, "cpu,cuda",
          "comma list of: cpu (OpenBLAS), cpu-ref (the CPU's reference kernel), cuda (skipped, "
          "saying why, without a device)");
ABSL_FLAG(int, cpu_threads, 0, "threads of the CPU's GEMMs (OpenBLAS); 0: all hardware threads");
ABSL_FLAG(int, cuda_device, 0, "the CUDA device of the cuda backend");
ABSL_FLAG(std::string, layers, "784,4096,4096,10", "MLP layer sizes, inputs first");
ABSL_FLAG(int, batch, 256, "examples per training step");
ABSL_FLAG(std::string, gemm_precision, "tf32", "CUDA GEMMs of the worker: fp32|tf32|bf16|fp16");
ABSL_FLAG(double, seconds, 2.0, "measured seconds per step / GEMM / copy figure (at least 3 runs)");
ABSL_FLAG(int, peak_size, 8192,
          "cuda: n of the raw cuBLAS n x n x n GEMMs; cpu: of OpenBLAS's SGEMM, min(n, 2048)");
ABSL_FLAG(std::string, copy_bytes, "256M", "bytes per host <-> device copy (K, M, G: 1024^k)");
ABSL_FLAG(bool, overlap, true, "run the overlap section against spawned ps_server processes");
ABSL_FLAG(std::string, modes, "sync,async",
          "overlap section: consistency modes, comma list of sync, ssp (staleness 1), async");
ABSL_FLAG(int, overlap_steps, 10, "overlap section: training steps per run");
ABSL_FLAG(int, servers, 1, "overlap section: ps_server processes to spawn");
ABSL_FLAG(std::string, server_binary, "",
          "ps_server to spawn (default: <worker_bench's dir>/../../server/ps_server)");

namespace ps {
namespace {

struct BenchOptions {
  std::vector<std::string> backends;  // "cpu", "cpu-ref", "cuda"
  int cuda_device = 0;
  int cpu_threads = 0;  // 0: all hardware threads
  std::vector<int> layers;
  int batch = 256;
  GemmPrecision precision = GemmPrecision::kTf32;
  double seconds = 2.0;
  int peak_size = 8192;
  size_t copy_bytes = size_t{256} << 20;
  bool overlap = true;
  std::vector<v1::ConsistencySpec> modes;
  int overlap_steps = 10;
  int servers = 1;
  std::string server_binary;

  absl::Status Validate() const {
    PS_RETURN_IF_ERROR(MlpModel::ValidateLayers(layers));
    if (batch < 1) return absl::InvalidArgumentError("--batch must be >= 1");
    if (seconds <= 0) return absl::InvalidArgumentError("--seconds must be > 0");
    if (cpu_threads < 0) return absl::InvalidArgumentError("--cpu_threads must be >= 0");
    if (peak_size < 1) return absl::InvalidArgumentError("--peak_size must be >= 1");
    if (copy_bytes < 4) return absl::InvalidArgumentError("--copy_bytes must be >= 4");
    if (overlap_steps < 1) return absl::InvalidArgumentError("--overlap_steps must be >= 1");
    if (servers < 1) return absl::InvalidArgumentError("--servers must be >= 1");
    return absl::OkStatus();
  }
};

std::string ExeDir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string path(buf, n);
  return path.substr(0, path.rfind('/'));
}

absl::StatusOr<size_t> ParseSize(absl::string_view s) {
  size_t scale = 1;
  if (!s.empty() && (s.back() == 'K' || s.back() == 'M' || s.back() == 'G')) {
    scale = s.back() == 'K' ? 1 << 10 : s.back() == 'M' ? 1 << 20 : size_t{1} << 30;
    s.remove_suffix(1);
  }
  uint64_t n = 0;
  if (!absl::SimpleAtoi(s, &n)) {
    return absl::InvalidArgumentError(absl::StrCat("bad size '", s, "'"));
  }
  return n * scale;
}

absl::StatusOr<BenchOptions> OptionsFromFlags() {
  BenchOptions o;
  for (absl::string_view b :
       absl::StrSplit(absl::GetFlag(FLAGS_backends), ',', absl::SkipEmpty())) {
    if (b != "cpu" && b != "cpu-ref" && b != "cuda") {
      return absl::InvalidArgumentError(absl::StrCat("--backends: unknown backend '", b, "'"));
    }
    o.backends.emplace_back(b);
  }
  o.cuda_device = absl::GetFlag(FLAGS_cuda_device);
  o.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  for (absl::string_view l : absl::StrSplit(absl::GetFlag(FLAGS_layers), ',')) {
    int units = 0;
    if (!absl::SimpleAtoi(l, &units)) {
      return absl::InvalidArgumentError(absl::StrCat("--layers: '", l, "' is not a size"));
    }
    o.layers.push_back(units);
  }
  o.batch = absl::GetFlag(FLAGS_batch);
  PS_ASSIGN_OR_RETURN(o.precision, ParseGemmPrecision(absl::GetFlag(FLAGS_gemm_precision)));
  o.seconds = absl::GetFlag(FLAGS_seconds);
  o.peak_size = absl::GetFlag(FLAGS_peak_size);
  PS_ASSIGN_OR_RETURN(o.copy_bytes, ParseSize(absl::GetFlag(FLAGS_copy_bytes)));
  o.overlap = absl::GetFlag(FLAGS_overlap);
  for (absl::string_view m : absl::StrSplit(absl::GetFlag(FLAGS_modes), ',', absl::SkipEmpty())) {
    v1::ConsistencySpec c;
    if (m == "sync") {
      c.set_mode(v1::ConsistencySpec::SYNC);
    } else if (m == "ssp") {
      c.set_mode(v1::ConsistencySpec::SSP);
      c.set_staleness(1);
    } else if (m == "async") {
      c.set_mode(v1::ConsistencySpec::ASYNC);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--modes: unknown mode '", m, "'"));
    }
    o.modes.push_back(c);
  }
  o.overlap_steps = absl::GetFlag(FLAGS_overlap_steps);
  o.servers = absl::GetFlag(FLAGS_servers);
  o.server_binary = absl::GetFlag(FLAGS_server_binary);
  if (o.server_binary.empty()) o.server_binary = ExeDir() + "/../../server/ps_server";
  PS_RETURN_IF_ERROR(o.Validate());
  return o;
}

std::string ModeName(const v1::ConsistencySpec& c) {
  switch (c.mode()) {
    case v1::ConsistencySpec::SSP:
      return absl::StrCat("ssp", c.staleness());
    case v1::ConsistencySpec::ASYNC:
      return "async";
    default:
      return "sync";
  }
}

std::vector<float> RandomVector(size_t n, uint32_t seed, float low, float high) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Runs `body` (which queues work on `backend`) until `seconds` have passed and at least
// `min_runs` runs are done, after one warm-up run; returns seconds per run.
absl::StatusOr<double> TimePerRun(ComputeBackend& backend, double seconds, int min_runs,
                                  const std::function<absl::Status()>& body) {
  PS_RETURN_IF_ERROR(body());
  PS_RETURN_IF_ERROR(backend.Synchronize());
  // Batches of runs between synchronizations, sized from one timed run, so that queueing
  // overhead stays out of the figure for fast kernels.
  absl::Time t0 = absl::Now();
  PS_RETURN_IF_ERROR(body());
  PS_RETURN_IF_ERROR(backend.Synchronize());
  const double one = std::max(1e-7, absl::ToDoubleSeconds(absl::Now() - t0));
  const int per_sync = static_cast<int>(std::clamp(0.05 / one, 1.0, 1000.0));
  int64_t runs = 0;
  t0 = absl::Now();
  double elapsed = 0;
  while (elapsed < seconds || runs < min_runs) {
    for (int i = 0; i < per_sync; ++i) PS_RETURN_IF_ERROR(body());
    PS_RETURN_IF_ERROR(backend.Synchronize());
    runs += per_sync;
    elapsed = absl::ToDoubleSeconds(absl::Now() - t0);
  }
  return elapsed / static_cast<double>(runs);
}

double StepFlops(const std::vector<int>& layers, int batch) {
  // Forward 2*b*in*out per layer; backward 2*b*in*out for dW and (but for layer 0) for dX.
  double flops = 0;
  for (size_t l = 0; l + 1 < layers.size(); ++l) {
    flops += 2.0 * batch * layers[l] * layers[l + 1] * (l == 0 ? 2 : 3);
  }
  return flops;
}

// ---------------------------------------------------------------------------------------------
// One backend's compute figures.

class BackendBench {
 public:
  // `cpu_peak_tflops`: OpenBLAS's SGEMM rate, the reference of a CPU backend's GEMMs.
  BackendBench(const BenchOptions& o, std::string label, std::unique_ptr<ComputeBackend> backend,
               double cpu_peak_tflops)
      : o_(o),
        label_(std::move(label)),
        backend_(std::move(backend)),
        peak_tflops_(cpu_peak_tflops) {}

  double step_seconds() const { return step_seconds_; }

  absl::Status Run() {
    PS_RETURN_IF_ERROR(Peak());
    PS_RETURN_IF_ERROR(Step());
    PS_RETURN_IF_ERROR(Gemms());
    return Copies();
  }

 private:
  bool cuda() const { return !backend_->host_memory(); }

  // The reference rates: raw cuBLAS in FP32, TF32 and (if another) the worker's precision; on
  // the CPU, OpenBLAS's SGEMM (measured once per run, by CpuPeak()).
  absl::Status Peak() {
    if (!cuda()) return absl::OkStatus();
    std::vector<GemmPrecision> precisions = {GemmPrecision::kFp32, GemmPrecision::kTf32};
    if (o_.precision != GemmPrecision::kFp32 && o_.precision != GemmPrecision::kTf32) {
      precisions.push_back(o_.precision);
    }
    for (GemmPrecision p : precisions) {
      const int n = o_.peak_size;
      PS_ASSIGN_OR_RETURN(const double tflops,
                          MeasureCublasGemmTflops(o_.cuda_device, p, n, n, n, 10));
      std::printf("%-8s %-12s raw cuBLAS %dx%dx%d, %s: %.1f TFLOP/s\n", "peak", label_.c_str(), n,
                  n, n, std::string(GemmPrecisionName(p)).c_str(), tflops);
      if (p == o_.precision) peak_tflops_ = tflops;
    }
    return absl::OkStatus();
  }

  // The worker's step: parameters from staging, forward, backward, gradients to staging.
  absl::Status Step() {
    MlpModel model(o_.layers, backend_.get());
    const size_t n = static_cast<size_t>(model.num_parameters());
    PS_ASSIGN_OR_RETURN(BackendBuffer params,
                        backend_->Allocate(MemoryKind::kStaging, sizeof(float) * n));
    PS_ASSIGN_OR_RETURN(BackendBuffer grads,
                        backend_->Allocate(MemoryKind::kStaging, sizeof(float) * n));
    PS_ASSIGN_OR_RETURN(
        BackendBuffer x,
        backend_->Allocate(MemoryKind::kStaging, sizeof(float) * o_.batch * o_.layers[0]));
    PS_ASSIGN_OR_RETURN(BackendBuffer y,
                        backend_->Allocate(MemoryKind::kStaging, sizeof(int32_t) * o_.batch));
    std::vector<const float*> p;
    std::vector<float*> g;
    for (int t = 0; t < model.num_tensors(); ++t) {
      const float limit = std::sqrt(6.0f / (model.tensor_rows(t) + model.tensor_dim(t)));
      const std::vector<float> init = RandomVector(
          model.tensor_size(t), 10 + t, t % 2 == 0 ? -limit : 0.0f, t % 2 == 0 ? limit : 0.0f);
      std::memcpy(params.floats() + model.tensor_offset(t), init.data(),
                  sizeof(float) * init.size());
      p.push_back(params.floats() + model.tensor_offset(t));
      g.push_back(grads.floats() + model.tensor_offset(t));
    }
    const std::vector<float> features =
        RandomVector(static_cast<size_t>(o_.batch) * o_.layers[0], 2, 0.0f, 1.0f);
    std::memcpy(x.data(), features.data(), sizeof(float) * features.size());
    for (int i = 0; i < o_.batch; ++i) y.ints()[i] = i % o_.layers.back();
    PS_RETURN_IF_ERROR(model.Reserve(o_.batch));
    // As in the worker: each step waits for its gradients.
    PS_ASSIGN_OR_RETURN(step_seconds_, TimePerRun(*backend_, o_.seconds, 3, [&] {
                          PS_RETURN_IF_ERROR(model.StartStep(p, x.floats(), y.ints(), o_.batch,
                                                             1.0f / o_.batch, g));
                          return model.FinishStep().status();
                        }));
    const double flops = StepFlops(o_.layers, o_.batch);
    std::printf(
        "%-8s %-12s layers %s batch %d: %.1f samples/s, %.2f ms/step (%.2f GFLOP/step, %.3f "
        "TFLOP/s overall, with %.0f MB of parameters in and gradients out per step)\n",
        "step", label_.c_str(), absl::StrJoin(o_.layers, ",").c_str(), o_.batch,
        o_.batch / step_seconds_, 1e3 * step_seconds_, flops / 1e9, flops / step_seconds_ / 1e12,
        2.0 * sizeof(float) * n / 1e6);
    return absl::OkStatus();
  }

  // Each GEMM of the step, through the backend, on device memory.
  absl::Status Gemms() {
    struct Shape {
      std::string what;
      bool ta, tb;
      int m, n, k;
    };
    std::vector<Shape> shapes;
    for (size_t l = 0; l + 1 < o_.layers.size(); ++l) {
      const int in = o_.layers[l], out = o_.layers[l + 1], b = o_.batch;
      shapes.push_back({absl::StrCat("fwd   layer ", l), false, false, b, out, in});
      shapes.push_back({absl::StrCat("dW    layer ", l), true, false, in, out, b});
      if (l > 0) shapes.push_back({absl::StrCat("dX    layer ", l), false, true, b, in, out});
    }
    size_t max_a = 0, max_b = 0, max_c = 0;
    for (const Shape& s : shapes) {
      max_a = std::max(max_a, static_cast<size_t>(s.m) * s.k);
      max_b = std::max(max_b, static_cast<size_t>(s.k) * s.n);
      max_c = std::max(max_c, static_cast<size_t>(s.m) * s.n);
    }
    PS_ASSIGN_OR_RETURN(BackendBuffer a, backend_->Allocate(MemoryKind::kDevice, 4 * max_a));
    PS_ASSIGN_OR_RETURN(BackendBuffer b, backend_->Allocate(MemoryKind::kDevice, 4 * max_b));
    PS_ASSIGN_OR_RETURN(BackendBuffer c, backend_->Allocate(MemoryKind::kDevice, 4 * max_c));
    const std::vector<float> ha = RandomVector(max_a, 3, -1, 1), hb = RandomVector(max_b, 4, -1, 1);
    backend_->CopyToDevice(a.data(), ha.data(), 4 * max_a);
    backend_->CopyToDevice(b.data(), hb.data(), 4 * max_b);
    backend_->ComputeAfterCopies();
    PS_RETURN_IF_ERROR(backend_->Synchronize());
    double total = 0, total_flops = 0;
    for (const Shape& s : shapes) {
      PS_ASSIGN_OR_RETURN(const double secs, TimePerRun(*backend_, o_.seconds / 4, 3, [&] {
                            backend_->Gemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.floats(), b.floats(),
                                           0.0f, c.floats());
                            return absl::OkStatus();
                          }));
      total += secs;
      total_flops += 2.0 * s.m * s.n * static_cast<double>(s.k);
      const double tflops = 2.0 * s.m * s.n * static_cast<double>(s.k) / secs / 1e12;
      std::printf("%-8s %-12s %s %6dx%-6dx%-6d (%s%s): %8.3f TFLOP/s  %5.1f%% of peak  %.3f ms\n",
                  "gemm", label_.c_str(), s.what.c_str(), s.m, s.n, s.k, s.ta ? "T" : "N",
                  s.tb ? "T" : "N", tflops, 100 * tflops / std::max(1e-12, peak_tflops_),
                  1e3 * secs);
    }
    const double gemm_tflops = total_flops / std::max(1e-12, total) / 1e12;
    std::printf(
        "%-8s %-12s the step's GEMMs: %.2f ms of the %.2f ms step (%.0f%%); together %.3f "
        "TFLOP/s, %.1f%% of peak\n",
        "gemm", label_.c_str(), 1e3 * total, 1e3 * step_seconds_,
        100 * total / std::max(1e-12, step_seconds_), gemm_tflops,
        100 * gemm_tflops / std::max(1e-12, peak_tflops_));
    return absl::OkStatus();
  }

  // Staging <-> device copies (page-locked host memory on CUDA; memcpy on the CPU).
  absl::Status Copies() {
    const size_t bytes = o_.copy_bytes;
    PS_ASSIGN_OR_RETURN(BackendBuffer host, backend_->Allocate(MemoryKind::kStaging, bytes));
    PS_ASSIGN_OR_RETURN(BackendBuffer device, backend_->Allocate(MemoryKind::kDevice, bytes));
    std::memset(host.data(), 1, bytes);
    if (!cuda()) std::memset(device.data(), 1, bytes);  // host memory: touch every page first
    PS_ASSIGN_OR_RETURN(const double up, TimePerRun(*backend_, o_.seconds / 2, 3, [&] {
                          backend_->CopyToDevice(device.data(), host.data(), bytes);
                          return absl::OkStatus();
                        }));
    PS_ASSIGN_OR_RETURN(const double down, TimePerRun(*backend_, o_.seconds / 2, 3, [&] {
                          backend_->CopyToHost(host.data(), device.data(), bytes);
                          return absl::OkStatus();
                        }));
    std::printf("%-8s %-12s %s %.0f MiB: host->device %.2f GB/s, device->host %.2f GB/s\n", "copy",
                label_.c_str(), cuda() ? "page-locked staging <-> device" : "memcpy (no device)",
                bytes / 1048576.0, bytes / up / 1e9, bytes / down / 1e9);
    return absl::OkStatus();
  }

  const BenchOptions& o_;
  const std::string label_;
  std::unique_ptr<ComputeBackend> backend_;
  double peak_tflops_ = 0;
  double step_seconds_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Overlap: whole steps through a JobRunner against real servers.

// `next_run` numbers the runs of the whole benchmark: job and table ids stay unique on the
// servers, which keep every run's tables.
absl::Status RunOverlap(const BenchOptions& o, const ComputeOptions& compute,
                        const std::vector<std::string>& servers, const std::string& label,
                        int* next_run) {
  std::vector<std::pair<v1::ConsistencySpec, OverlapMode>> runs;
  for (const v1::ConsistencySpec& c : o.modes) {
    runs.push_back({c, OverlapMode::kOff});
    if (OverlapsCommunication(OverlapMode::kOn, compute.device, c)) {
      runs.push_back({c, OverlapMode::kOn});
    }
  }
  // Synthetic data: exactly overlap_steps batches in one epoch.
  Dataset train;
  train.num_examples = train.total_examples = o.batch * o.overlap_steps;
  train.num_features = o.layers.front();
  train.num_classes = o.layers.back();
  train.features =
      RandomVector(static_cast<size_t>(train.num_examples) * train.num_features, 5, 0.0f, 1.0f);
  for (int i = 0; i < train.num_examples; ++i) train.labels.push_back(i % train.num_classes);
  Dataset test = train;
  test.num_examples = test.total_examples = std::min(train.num_examples, 100);
  test.features.resize(static_cast<size_t>(test.num_examples) * test.num_features);
  test.labels.resize(test.num_examples);
  // SGD keeps no optimizer state on the servers: each run's tables cost only their values.
  v1::OptimizerSpec sgd;
  sgd.set_kind(v1::OptimizerSpec::SGD);
  sgd.set_learning_rate(1e-4f);
  for (const auto& [consistency, overlap] : runs) {
    const int run = (*next_run)++;
    const std::string job = absl::StrCat("worker_bench_", getpid(), "_", run);
    RpcClientOptions co;
    co.servers = servers;
    co.job_id = job;
    co.rpc_timeout = absl::Seconds(300);
    PS_ASSIGN_OR_RETURN(std::unique_ptr<RpcClient> client, RpcClient::Connect(co));
    PS_RETURN_IF_ERROR(JobAdmin(*client).ConfigureJob(consistency, {0}));
    MlpRunOptions mo;
    mo.compute = compute;
    mo.compute.overlap = overlap;
    mo.consistency = consistency;
    mo.batch_size = o.batch;
    PS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                        MakeMlpModel(train, test, o.layers, sgd, 1, mo));
    for (const v1::TableSpec& t : model->Tables(job, 900000001 + 1000 * run)) {
      PS_RETURN_IF_ERROR(client->CreateTable(t));
    }
    prometheus::Registry registry;
    WorkerMetrics metrics(registry);
    JobRunnerOptions ro;
    ro.batch_size = o.batch;
    ro.consistency = consistency;
    JobRunner runner(model.get(), client.get(), ro, &metrics);
    JobProgress last;
    const absl::Time start = absl::Now();
    PS_RETURN_IF_ERROR(runner.Run([&](const JobProgress& p) { last = p; }, nullptr, 0));
    const double wall = absl::ToDoubleSeconds(absl::Now() - start);
    const double step_time =
        last.compute_seconds + last.communication_seconds - last.hidden_communication_seconds;
    std::printf(
        "%-8s %-12s %-6s overlap=%-3s: %8.1f samples/s  %8.3f ms/step  compute %.2fs  "
        "communication %.2fs  hidden %.2fs = %.0f%% of communication, %.0f%% of step time "
        "(%d steps, %.1fs with start-up)\n",
        "overlap", label.c_str(), ModeName(consistency).c_str(),
        std::string(OverlapName(overlap)).c_str(), last.samples_per_second,
        1e3 * step_time / o.overlap_steps, last.compute_seconds, last.communication_seconds,
        last.hidden_communication_seconds,
        100 * last.hidden_communication_seconds / std::max(1e-12, last.communication_seconds),
        100 * last.hidden_communication_seconds / std::max(1e-12, step_time), o.overlap_steps,
        wall);
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

void PrintHeader(const BenchOptions& o, const CudaAvailability& cuda) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string gpu = cuda.devices > 0 ? "" : cuda.reason;
  if (cuda.devices > 0) {
    auto name = CudaDeviceName(o.cuda_device);
    gpu = name.ok() ? *name : std::string(name.status().message());
  }
  std::printf("worker_bench on %s: %s, %u hardware threads; CUDA: %s\n", host, CpuModel().c_str(),
              std::thread::hardware_concurrency(), gpu.c_str());
  std::printf("model: layers %s (%.1fM parameters), batch %d; CUDA GEMMs in %s\n",
              absl::StrJoin(o.layers, ",").c_str(),
              MlpModel(o.layers, nullptr).num_parameters() / 1e6, o.batch,
              std::string(GemmPrecisionName(o.precision)).c_str());
  std::fflush(stdout);
}

// OpenBLAS's own SGEMM rate on a large square: the reference of the CPU backends' 'gemm' lines,
// measured once per run (0 when no CPU backend is benchmarked).
absl::StatusOr<double> CpuPeak(const BenchOptions& o) {
  const bool any_cpu = std::any_of(o.backends.begin(), o.backends.end(),
                                   [](const std::string& b) { return b != "cuda"; });
  if (!any_cpu) return 0.0;
  const int n = std::min(o.peak_size, 2048);
  PS_ASSIGN_OR_RETURN(const double tflops, MeasureCpuSgemmTflops(n, o.seconds));
  std::printf(
      "%-8s %-12s OpenBLAS SGEMM %dx%dx%d, fp32, %d thread(s): %.3f TFLOP/s (the reference of the "
      "CPU's 'gemm' lines; %s)\n",
      "peak", "cpu", n, n, n, CpuThreads(), tflops, CpuBlasDescription().c_str());
  std::fflush(stdout);
  return tflops;
}

// The compute options and label of backend `b` ("cpu", "cpu-ref", "cuda"); nullopt (after
// saying why) when cuda is asked for and not there.
std::optional<std::pair<ComputeOptions, std::string>> BackendFor(const BenchOptions& o,
                                                                 const std::string& b,
                                                                 const CudaAvailability& cuda) {
  ComputeOptions compute;
  compute.gemm_precision = o.precision;
  if (b == "cpu-ref") compute.cpu_kernels = CpuKernels::kReference;
  if (b != "cuda") return std::make_pair(compute, b);
  DeviceSpec d{DeviceSpec::Kind::kCuda, o.cuda_device};
  auto resolved = ResolveDevice(d, cuda);
  if (!resolved.ok()) {
    std::printf("%-8s %-12s skipped: %s\n", "-", "cuda",
                std::string(resolved.status().message()).c_str());
    return std::nullopt;
  }
  compute.device = *resolved;
  return std::make_pair(
      compute, absl::StrCat(compute.device.ToString(), "/", GemmPrecisionName(o.precision)));
}

absl::Status Main(const BenchOptions& o) {
  // Servers first: fork before gRPC or CUDA start threads.
  std::unique_ptr<bench::ServerFleet> fleet;
  if (o.overlap) {
    PS_ASSIGN_OR_RETURN(fleet, bench::ServerFleet::Spawn(o.server_binary, o.servers));
  }
  const CudaAvailability cuda = ProbeCuda();
  PrintHeader(o, cuda);
  PS_ASSIGN_OR_RETURN(const double cpu_peak, CpuPeak(o));
  int next_run = 0;
  std::map<std::string, double> step_seconds;  // per backend label
  for (const std::string& b : o.backends) {
    auto backend_for = BackendFor(o, b, cuda);
    if (!backend_for.has_value()) continue;
    const auto& [compute, label] = *backend_for;
    PS_ASSIGN_OR_RETURN(std::unique_ptr<ComputeBackend> backend, MakeBackend(compute));
    BackendBench bench(o, label, std::move(backend), cpu_peak);
    PS_RETURN_IF_ERROR(bench.Run());
    step_seconds[label] = bench.step_seconds();
    std::fflush(stdout);
    if (fleet != nullptr) {
      PS_RETURN_IF_ERROR(RunOverlap(o, compute, fleet->addresses(), label, &next_run));
    }
  }
  if (step_seconds.count("cpu") > 0 && step_seconds.count("cpu-ref") > 0) {
    std::printf("%-8s %-12s step on OpenBLAS %.2f ms, on the reference kernel %.2f ms: %.2fx\n",
                "compare", "cpu/cpu-ref", 1e3 * step_seconds["cpu"], 1e3 * step_seconds["cpu-ref"],
                step_seconds["cpu-ref"] / std::max(1e-12, step_seconds["cpu"]));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  ps::SetUsage(
      "Where a worker's step time goes, per compute backend: training-step samples/s, the "
      "step's GEMMs against cuBLAS's or OpenBLAS's peak, host<->device copy GB/s, and "
      "communication hidden by "
      "overlap against spawned ps_server processes.\n"
      "Example: worker_bench --backends=cpu,cuda --layers=784,4096,4096,10 --batch=256",
      __FILE__);
  absl::ParseCommandLine(argc, argv);
  ps::TuneProcessForServing();
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  signal(SIGPIPE, SIG_IGN);
  auto options = ps::OptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "worker_bench: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  // OpenBLAS's threads: a process-wide setting, made here once.
  const int hardware_threads = static_cast<int>(std::thread::hardware_concurrency());
  if (absl::Status s =
          ps::SetCpuThreads(options->cpu_threads > 0 ? options->cpu_threads
                                                     : ps::DefaultCpuThreads(hardware_threads, 1));
      !s.ok()) {
    std::fprintf(stderr, "worker_bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  const absl::Status s = ps::Main(*options);
  if (!s.ok()) {
    std::fprintf(stderr, "worker_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
