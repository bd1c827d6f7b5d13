// ps_worker: trains models of the zoo through the parameter servers. Two modes:
//   --scheduler=host:port  a daemon: registers, runs the jobs the scheduler assigns;
//   --servers=a,b,...      one job given by flags, then exit (no scheduler needed).
#include <glog/logging.h>
#include <prometheus/registry.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/job_admin.h"
#include "client/rpc_client.h"
#include "common/cpu_set.h"
#include "common/daemon_flags.h"
#include "common/daemon_setup.h"
#include "common/flags_usage.h"
#include "common/health_server.h"
#include "common/process_tuning.h"
#include "common/scheduler_link.h"
#include "common/security.h"
#include "common/signals.h"
#include "common/status_macros.h"
#include "common/zoo_models.h"
#include "worker/compute/cpu_backend.h"
#include "worker/compute/device.h"
#include "worker/daemon/job_runner.h"
#include "worker/daemon/model_zoo.h"
#include "worker/daemon/program_users.h"
#include "worker/daemon/worker_daemon.h"
#include "worker/daemon/worker_metrics.h"

ABSL_FLAG(std::string, scheduler, "",
          "daemon mode: the scheduler's host:port; the worker runs the jobs it assigns");
ABSL_FLAG(std::vector<std::string>, servers, {},
          "standalone mode: parameter servers host:port, comma-separated, in shard-map order "
          "(slot s lives on server s % n)");
ABSL_FLAG(std::string, shard_map, "",
          "standalone mode: static shard map file instead of --servers");
ABSL_FLAG(std::string, job_id, "fashion", "standalone: job name; tables and clocks are per job");
ABSL_FLAG(int, worker_id, 0,
          "standalone: this worker's index, 0..num_workers-1; it reads data shard worker_id");
ABSL_FLAG(int, num_workers, 1, "standalone: workers in the job");
ABSL_FLAG(std::string, model, "784,128,10",
          "standalone: a model of the zoo by name (the list is at the top of --help), or MLP "
          "layer sizes for fashion_mlp, comma-separated: inputs,hidden...,classes ('784,10' is "
          "softmax regression)");
ABSL_FLAG(std::string, data_dir, "",
          "standalone: data set directory (default: the model's, listed at the top of --help)");
ABSL_FLAG(int, epochs, 5, "standalone: passes over the data");
ABSL_FLAG(int, batch_size, 64, "standalone: examples per step on this worker");
ABSL_FLAG(std::string, consistency, "sync", "standalone: sync | ssp | async");
ABSL_FLAG(int, staleness, 2, "standalone, ssp: clocks a worker may run ahead of the slowest");
ABSL_FLAG(std::string, optimizer, "",
          "standalone: server-side optimizer sgd|momentum|adagrad|adam|ftrl (default: the "
          "model's, e.g. adam for fashion_mlp, ftrl for spam_logreg)");
ABSL_FLAG(double, learning_rate, 0.001, "standalone: the optimizer's learning rate");
ABSL_FLAG(uint64_t, seed, 1, "standalone: seed of the initial weights and of the data order");
ABSL_FLAG(bool, evaluate, false, "standalone: evaluate on the held-out set after every epoch");
ABSL_FLAG(int, log_every_steps, 100, "print a progress line every this many steps (0: never)");
ABSL_FLAG(absl::Duration, recovery_wait, absl::Seconds(90),
          "daemon: after a data-plane failure (a server died), how long to wait for the "
          "scheduler's new shard map before the job is given up");
ABSL_FLAG(absl::Duration, rpc_timeout, ps::kDefaultRpcTimeout,
          "deadline of one data-plane request (a sync pull waits this long for the slowest)");
ABSL_FLAG(std::string, device, "auto",
          "where a job's training steps compute: cpu | cuda:N (CUDA device N; 'cuda' = "
          "cuda:0) | auto (cuda:0 if this binary has CUDA support and a device is present, else "
          "cpu). An explicit cuda:N that is not there is an error, never a silent CPU fallback");
ABSL_FLAG(std::string, gemm_precision, "tf32",
          "CUDA GEMMs: fp32 (exact FP32, as the CPU) | tf32 (tensor cores, ~1e-3 relative "
          "rounding of the inputs) | bf16 | fp16 (tensor cores; fp16 may flush tiny gradients)");
ABSL_FLAG(std::string, cpu_kernels, "openblas",
          "CPU training steps: openblas (GEMMs on OpenBLAS, --cpu_threads threads) | reference "
          "(the project's own single-threaded GEMM: slower, for comparisons)");
ABSL_FLAG(int, cpu_threads, 0,
          "threads of the CPU's GEMMs (OpenBLAS); 0: the CPUs this process may use (--cpus) / "
          "--workers_on_host (at least 1). Idle GEMM threads sleep at once instead of "
          "spinning (OPENBLAS_THREAD_TIMEOUT=4 unless the environment sets it)");
ABSL_FLAG(int, workers_on_host, 1,
          "ps_worker processes sharing this host, to share its cores among them: the default of "
          "--cpu_threads");
ABSL_FLAG(std::string, overlap, "auto",
          "overlap a step's push/pull with the next step's compute: auto (on the GPU, in async "
          "and ssp with staleness >= 1) | on (also on the CPU) | off. Overlap reads parameters "
          "one clock staler; sync and ssp staleness 0 never overlap");
ABSL_FLAG(std::string, work_dir, "/tmp/ps_worker",
          "program jobs: this worker's per-job folders (<work_dir>/<job>/worker-<id>: the "
          "program's log, the Unix socket of its Session, its default working directory)");
ABSL_FLAG(std::string, program_uids, "",
          "program jobs: run each program run under its own uid of this range (e.g. "
          "60000-60999; group: the same number), so that it cannot read this daemon's token "
          "and TLS files, other jobs' folders, agent sockets and /proc/PID/environ. Needs the "
          "daemon to run as root; uids of the range must belong to nobody else (and, with "
          "several daemons on a host, to one daemon each). Empty: programs run as this daemon's "
          "user, which a WARNING at start says");
ABSL_FLAG(uint64_t, max_log_bytes, uint64_t{64} << 20,
          "program jobs: a program's log moves to program.log.1 at this size (at most twice "
          "this on disk per program)");
ABSL_FLAG(double, slow_factor, 1.0,
          "testing and benchmarks: make this worker a straggler, this many times slower (each "
          "training step is followed by a sleep of (factor - 1) x the step's time); 1: off");
ABSL_FLAG(std::string, advertise, "",
          "daemon mode: host the scheduler and Prometheus reach this worker's /metrics and "
          "health ports at (default: the address of the interface that routes to "
          "--scheduler)");
ABSL_FLAG(std::string, health_listen, "0.0.0.0:0",
          "daemon mode: host:port of the gRPC health service (grpc.health.v1; port 0: a free "
          "port; 'off': none)");

namespace {

int UsageError(const std::string& message) {
  std::cerr << "ps_worker: " << message << "\n";
  return 2;
}

// The worker's /metrics: the exporter and the worker's families (null with
// --metrics_listen=off).
struct Metrics {
  std::unique_ptr<ps::DaemonExporter> exporter;
  std::unique_ptr<ps::WorkerMetrics> worker;
};

// Starts /metrics per --metrics_listen; an error names the flag.
absl::StatusOr<Metrics> StartMetrics() {
  Metrics m;
  const ps::MetricsFlags metrics_flags = ps::MetricsFromFlags();
  auto exporter =
      ps::DaemonExporter::Start("worker", metrics_flags.listen, metrics_flags.port_file);
  if (!exporter.ok()) return exporter.status();
  m.exporter = std::move(*exporter);
  if (prometheus::Registry* registry = m.exporter->registry(); registry != nullptr) {
    m.worker = std::make_unique<ps::WorkerMetrics>(*registry);
    LOG(INFO) << "ps_worker: metrics on port " << m.exporter->port() << " (/metrics)";
  }
  return m;
}

// --device, --gemm_precision and --overlap, with the device resolved against this machine: an
// error says what is missing (CUDA support, a device) and exits before any work starts.
absl::StatusOr<ps::ComputeOptions> ComputeOptionsFromFlags() {
  ps::ComputeOptions o;
  auto requested = ps::ParseDevice(absl::GetFlag(FLAGS_device));
  if (!requested.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--device: ", requested.status().message()));
  }
  // --device=cpu never touches the CUDA runtime.
  const ps::CudaAvailability cuda =
      requested->kind == ps::DeviceSpec::Kind::kCpu ? ps::CudaAvailability() : ps::ProbeCuda();
  auto device = ps::ResolveDevice(*requested, cuda);
  if (!device.ok()) {
    return absl::Status(
        device.status().code(),
        absl::StrCat("--device=", absl::GetFlag(FLAGS_device), ": ", device.status().message()));
  }
  o.device = *device;
  auto precision = ps::ParseGemmPrecision(absl::GetFlag(FLAGS_gemm_precision));
  if (!precision.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gemm_precision: ", precision.status().message()));
  }
  o.gemm_precision = *precision;
  auto overlap = ps::ParseOverlap(absl::GetFlag(FLAGS_overlap));
  if (!overlap.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--overlap: ", overlap.status().message()));
  }
  o.overlap = *overlap;
  auto kernels = ps::ParseCpuKernels(absl::GetFlag(FLAGS_cpu_kernels));
  if (!kernels.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--cpu_kernels: ", kernels.status().message()));
  }
  o.cpu_kernels = *kernels;
  std::string where = o.device.ToString();
  if (o.device.kind == ps::DeviceSpec::Kind::kCuda) {
    auto name = ps::CudaDeviceName(o.device.index);
    absl::StrAppend(&where, " ", name.ok() ? *name : std::string(name.status().message()),
                    ", GEMMs in ", ps::GemmPrecisionName(o.gemm_precision));
  }
  LOG(INFO) << "ps_worker: computing on " << where << " (--device=" << absl::GetFlag(FLAGS_device)
            << "), overlap " << ps::OverlapName(o.overlap);
  return o;
}

// --cpu_threads (0: the host's hardware threads shared among --workers_on_host): OpenBLAS's
// thread count, a process-wide setting made once here.
absl::Status SetCpuThreadsFromFlags(const ps::ComputeOptions& compute) {
  if (absl::GetFlag(FLAGS_workers_on_host) < 1) {
    return absl::InvalidArgumentError("--workers_on_host must be >= 1");
  }
  int threads = absl::GetFlag(FLAGS_cpu_threads);
  if (threads < 0) return absl::InvalidArgumentError("--cpu_threads must be >= 0");
  if (threads == 0) {
    // The CPUs this process may use (--cpus, taskset, a container's cpuset), not the host's.
    const absl::StatusOr<std::vector<int>> cpus = ps::AllowedCpus();
    const int usable = cpus.ok() ? static_cast<int>(cpus->size())
                                 : static_cast<int>(std::thread::hardware_concurrency());
    threads = ps::DefaultCpuThreads(usable, absl::GetFlag(FLAGS_workers_on_host));
  }
  // OpenBLAS's idle threads spin for 2^28 cycles (about 0.1 s) after each GEMM before they
  // sleep; a worker waits on the network between its GEMMs, so that spinning takes the cores
  // from the servers and workers beside it (on 2 cores, a 2-server 2-worker Fashion-MNIST job ran
  // 16.5 s with it and 12.6 s without). 2^4 cycles: they sleep at once. Read when the library
  // loads (SetCpuThreads loads it); a value in the environment wins.
  setenv("OPENBLAS_THREAD_TIMEOUT", "4", /*overwrite=*/0);
  PS_RETURN_IF_ERROR(ps::SetCpuThreads(threads));
  if (compute.device.kind == ps::DeviceSpec::Kind::kCpu) {
    LOG(INFO) << "ps_worker: CPU kernels " << ps::CpuKernelsName(compute.cpu_kernels) << ", "
              << threads << " GEMM thread(s) (" << ps::CpuBlasDescription() << ")";
  }
  return absl::OkStatus();
}

// The job spec of standalone mode, from the flags.
absl::StatusOr<ps::v1::JobSpec> SpecFromFlags() {
  ps::v1::JobSpec spec;
  const std::string model = absl::GetFlag(FLAGS_model);
  if (ps::FindZooModel(model) != nullptr) {
    spec.set_model(model);
  } else {
    spec.set_model(ps::FashionMlpZooModel().name);
    for (absl::string_view part : absl::StrSplit(model, ',')) {
      int units = 0;
      if (!absl::SimpleAtoi(part, &units)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--model: '", part, "' is not a layer size (want a model of the zoo, ",
                         ps::ZooModelNames(" or "), ", or layer sizes e.g. 784,128,10)"));
      }
      spec.add_layers(units);
    }
  }
  spec.set_data_dir(absl::GetFlag(FLAGS_data_dir));
  spec.set_num_workers(absl::GetFlag(FLAGS_num_workers));
  spec.set_epochs(absl::GetFlag(FLAGS_epochs));
  spec.set_batch_size(absl::GetFlag(FLAGS_batch_size));
  spec.set_seed(absl::GetFlag(FLAGS_seed));
  spec.set_evaluate(absl::GetFlag(FLAGS_evaluate));
  const std::string mode = absl::GetFlag(FLAGS_consistency);
  if (mode == "sync") {
    spec.mutable_consistency()->set_mode(ps::v1::ConsistencySpec::SYNC);
  } else if (mode == "ssp") {
    spec.mutable_consistency()->set_mode(ps::v1::ConsistencySpec::SSP);
    spec.mutable_consistency()->set_staleness(absl::GetFlag(FLAGS_staleness));
  } else if (mode == "async") {
    spec.mutable_consistency()->set_mode(ps::v1::ConsistencySpec::ASYNC);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--consistency must be sync, ssp or async, not '", mode, "'"));
  }
  const std::string optimizer = absl::GetFlag(FLAGS_optimizer);
  if (!optimizer.empty()) {
    ps::v1::OptimizerSpec::Kind kind;
    if (!ps::v1::OptimizerSpec::Kind_Parse(absl::AsciiStrToUpper(optimizer), &kind)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--optimizer '", optimizer, "' is unknown; want sgd, momentum, adagrad, adam or ftrl"));
    }
    spec.mutable_optimizer()->set_kind(kind);
    spec.mutable_optimizer()->set_learning_rate(
        static_cast<float>(absl::GetFlag(FLAGS_learning_rate)));
  }
  return spec;
}

int RunStandalone(const ps::ComputeOptions& compute) {
  auto spec = SpecFromFlags();
  if (!spec.ok()) return UsageError(std::string(spec.status().message()));
  const int worker_id = absl::GetFlag(FLAGS_worker_id);
  if (worker_id < 0 || worker_id >= spec->num_workers()) {
    return UsageError(absl::StrCat("--worker_id ", worker_id, " must be in 0..",
                                   spec->num_workers() - 1, " (--num_workers ", spec->num_workers(),
                                   ")"));
  }
  ps::JobRunnerOptions ro = ps::RunnerOptionsOf(*spec);
  ro.slow_factor = absl::GetFlag(FLAGS_slow_factor);
  if (absl::Status s = ro.Validate(); !s.ok()) return UsageError(std::string(s.message()));

  ps::RpcClientOptions co;
  co.servers = absl::GetFlag(FLAGS_servers);
  co.shard_map_file = absl::GetFlag(FLAGS_shard_map);
  co.job_id = absl::GetFlag(FLAGS_job_id);
  co.worker_id = static_cast<uint32_t>(worker_id);
  co.rpc_timeout = absl::GetFlag(FLAGS_rpc_timeout);
  co.reject_nonfinite = false;  // the servers' --nonfinite policy decides
  auto client = ps::RpcClient::Connect(co);
  if (!client.ok()) return UsageError(std::string(client.status().message()));
  auto metrics = StartMetrics();
  if (!metrics.ok()) return UsageError(std::string(metrics.status().message()));
  const std::string who = absl::StrCat("worker ", worker_id, "/", spec->num_workers());

  auto fail = [&](const absl::Status& s) {
    std::cerr << "ps_worker: " << who << " failed: " << s << "\n";
    return 1;
  };
  auto model = ps::MakeModel(*spec, compute);
  if (!model.ok()) return fail(model.status());
  std::vector<uint32_t> workers;
  for (int w = 0; w < spec->num_workers(); ++w) workers.push_back(w);
  if (absl::Status s = ps::JobAdmin(**client).ConfigureJob(spec->consistency(), workers); !s.ok()) {
    return fail(s);
  }
  for (const auto& table : (*model)->Tables(co.job_id, ps::FirstTableIdOf(co.job_id))) {
    if (absl::Status s = (*client)->CreateTable(table); !s.ok()) return fail(s);
  }
  ps::JobRunner runner(model->get(), client->get(), ro, metrics->worker.get());
  runner.SetShard(worker_id, spec->num_workers());
  const int epochs = ro.epochs;
  auto on_step = [&](const ps::JobProgress& p) {
    std::cout << absl::StrFormat("%s epoch %d step %d/%d loss %.4f\n", who, p.epoch, p.clock,
                                 p.total_clocks, p.loss)
              << std::flush;
  };
  auto on_epoch = [&](const ps::JobProgress& p) {
    std::string line =
        absl::StrFormat("%s epoch %d/%d done: train loss %.4f acc %.2f%%, %.0f samples/s", who,
                        p.epoch, epochs, p.loss, 100 * p.accuracy, p.samples_per_second);
    if (p.test_accuracy >= 0) {
      absl::StrAppendFormat(&line, "; test loss %.4f acc %.2f%%", p.test_loss,
                            100 * p.test_accuracy);
    }
    absl::StrAppend(&line, "; ", ps::FormatTimeSplit(p));
    std::cout << line << "\n" << std::flush;
  };
  absl::Status s = runner.Run(on_epoch, on_step, absl::GetFlag(FLAGS_log_every_steps));
  if (!s.ok()) return fail(s);
  const ps::JobProgress p = runner.progress();
  if (p.test_accuracy >= 0) {
    std::cout << absl::StrFormat("%s final test accuracy %.2f%%\n", who, 100 * p.test_accuracy);
  }
  return 0;
}

// The programs this worker starts (program jobs) dial the servers with this worker's TLS files:
// they inherit the environment, which the client library reads (PS_TLS_*). PS_CLUSTER_TOKEN is
// set here for the daemon's own children; each program gets its job's credential in its place
// (program_job.cc). The admin token is never passed on.
absl::Status ExportSecurityToPrograms(const ps::Security& security) {
  unsetenv("PS_ADMIN_TOKEN");
  const ps::SecurityOptions& o = security.options();
  for (const auto& [name, path] : {std::pair<const char*, std::string>{"PS_TLS_CA", o.tls_ca_file},
                                   {"PS_TLS_CERT", o.tls_cert_file},
                                   {"PS_TLS_KEY", o.tls_key_file}}) {
    if (path.empty()) {
      unsetenv(name);
      continue;
    }
    std::error_code ec;
    const std::string absolute = std::filesystem::absolute(path, ec).string();
    if (ec)
      return absl::InvalidArgumentError(absl::StrCat("cannot resolve ", path, ": ", ec.message()));
    setenv(name, absolute.c_str(), 1);
  }
  if (security.token().empty()) {
    unsetenv("PS_CLUSTER_TOKEN");
  } else {
    setenv("PS_CLUSTER_TOKEN", security.token().c_str(), 1);
  }
  return absl::OkStatus();
}

// --program_uids: the range, checked, and a --work_dir that only this daemon may change (a
// program could otherwise plant a link where a later job's folder goes). Without it, a WARNING:
// programs run as this daemon's user.
absl::Status SetUpProgramUsers(ps::WorkerDaemonOptions* o) {
  const std::string uids = absl::GetFlag(FLAGS_program_uids);
  if (uids.empty()) {
    LOG(WARNING) << "ps_worker: no --program_uids: program jobs' programs run as this daemon's "
                    "user (uid "
                 << geteuid()
                 << "), so a program can read what this user can: its token and TLS files, "
                    "other jobs' work folders and their programs' /proc/PID/environ (their job "
                    "credentials). Run the daemon as root with --program_uids (docs/operations.md, "
                    "Security)";
    return absl::OkStatus();
  }
  auto range = ps::ParseUidRange(uids);
  if (!range.ok()) return range.status();
  if (absl::Status s = ps::CanSwitchUsers(); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(s.message(),
                     "; run it as root, or without --program_uids (programs then run as its "
                     "own user)"));
  }
  std::error_code ec;
  std::filesystem::create_directories(o->work_dir, ec);
  struct stat st;
  if (ec || lstat(o->work_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
      st.st_uid != geteuid() || chmod(o->work_dir.c_str(), 0711) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--work_dir ", o->work_dir,
                     " must be a folder of this daemon's user (not a link) with --program_uids"));
  }
  o->program_uids = *range;
  LOG(INFO) << "ps_worker: programs run under uids " << range->first << "-" << range->last
            << ", one per run";
  return absl::OkStatus();
}

int RunDaemon(const ps::ComputeOptions& compute) {
  ps::BlockTerminationSignals();
  ps::WorkerDaemonOptions o;
  o.compute = compute;
  o.scheduler = absl::GetFlag(FLAGS_scheduler);
  o.hostname = ps::HostName();
  o.pid = getpid();
  o.rpc_timeout = absl::GetFlag(FLAGS_rpc_timeout);
  o.recovery_wait = absl::GetFlag(FLAGS_recovery_wait);
  o.log_every_steps = absl::GetFlag(FLAGS_log_every_steps);
  o.slow_factor = absl::GetFlag(FLAGS_slow_factor);
  if (!(o.slow_factor >= 1 && o.slow_factor <= 1000)) {
    return UsageError("--slow_factor must be in 1..1000");
  }
  o.work_dir = absl::GetFlag(FLAGS_work_dir);
  if (o.work_dir.empty() || o.work_dir[0] != '/') {
    return UsageError("--work_dir must be an absolute path");
  }
  o.max_log_bytes = absl::GetFlag(FLAGS_max_log_bytes);
  if (o.max_log_bytes < 4096) return UsageError("--max_log_bytes must be >= 4096");
  if (absl::Status s = SetUpProgramUsers(&o); !s.ok()) return UsageError(std::string(s.message()));
  auto metrics = StartMetrics();
  if (!metrics.ok()) return UsageError(std::string(metrics.status().message()));
  o.metrics_address = metrics->exporter->Address(
      ps::AdvertiseHost(absl::GetFlag(FLAGS_advertise), "", o.scheduler));
  std::unique_ptr<ps::HealthServer> health;
  if (const std::string listen = absl::GetFlag(FLAGS_health_listen); listen != "off") {
    auto started = ps::HealthServer::Start(listen);
    if (!started.ok()) {
      return UsageError(absl::StrCat("--health_listen: ", started.status().message()));
    }
    health = std::move(*started);
    LOG(INFO) << "ps_worker: gRPC health service on port " << health->port();
  }
  ps::WorkerDaemon daemon(o, metrics->worker.get(), health.get());
  std::thread signals([&daemon] {
    const int sig = ps::WaitForTerminationSignal();
    LOG(INFO) << "ps_worker: signal " << sig << ", stopping";
    daemon.Stop();  // NOT_SERVING first, then the job stops
  });
  signals.detach();
  daemon.Run();
  if (health != nullptr) health->Shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string zoo;
  for (const ps::ZooModel* m : ps::ZooModels()) {
    absl::StrAppend(&zoo, "\n  ", m->name, ": ", m->summary, "; data ", m->default_data_dir);
  }
  ps::SetUsage(
      absl::StrCat("Worker: trains models of the zoo through the parameter servers, and runs "
                   "program jobs' programs, computing on the CPU or a CUDA GPU (--device).\n"
                   "Daemon:     ps_worker --scheduler=sched:7000\n"
                   "Standalone: ps_worker --servers=127.0.0.1:7100,127.0.0.1:7101 --worker_id=0 "
                   "--num_workers=2 --evaluate\n"
                   "The zoo:",
                   zoo),
      __FILE__);
  absl::ParseCommandLine(argc, argv);
  ps::TuneProcessForServing();
  auto security = ps::SetUpDaemon(argv[0]);
  if (!security.ok()) {
    std::cerr << "ps_worker: " << security.status().message() << "\n";
    return 2;
  }
  if (absl::Status s = ExportSecurityToPrograms(**security); !s.ok()) {
    std::cerr << "ps_worker: " << s.message() << "\n";
    return 2;
  }
  const bool daemon = !absl::GetFlag(FLAGS_scheduler).empty();
  const bool standalone =
      !absl::GetFlag(FLAGS_servers).empty() || !absl::GetFlag(FLAGS_shard_map).empty();
  if (daemon == standalone) {
    return UsageError("give either --scheduler (daemon) or --servers/--shard_map (one job)");
  }
  auto compute = ComputeOptionsFromFlags();
  if (!compute.ok()) {
    std::cerr << "ps_worker: " << compute.status().message() << "\n";
    return 2;
  }
  if (absl::Status s = SetCpuThreadsFromFlags(*compute); !s.ok()) {
    std::cerr << "ps_worker: " << s.message() << "\n";
    return 2;
  }
  return daemon ? RunDaemon(*compute) : RunStandalone(*compute);
}
