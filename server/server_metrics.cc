#include "server/server_metrics.h"

#include <glog/logging.h>

#include <exception>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace {

// The one place prometheus-cpp's exceptions (invalid names, a name registered with another
// type) are converted: runs `f` and returns INTERNAL if it throws.
template <typename F>
absl::Status CatchPrometheus(const char* what, F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("registering ", what, ": ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace

const char* ServerMethodName(ServerMethod method) {
  switch (method) {
    case ServerMethod::kPull:
      return "pull";
    case ServerMethod::kPush:
      return "push";
    case ServerMethod::kPushPull:
      return "push_pull";
    case ServerMethod::kClock:
      return "clock";
    case ServerMethod::kConfigureJob:
      return "configure_job";
    case ServerMethod::kCreateTable:
      return "create_table";
    case ServerMethod::kDescribeTable:
      return "describe_table";
    case ServerMethod::kCheckpoint:
      return "checkpoint";
    case ServerMethod::kAwaitCheckpoint:
      return "await_checkpoint";
    case ServerMethod::kRestore:
      return "restore";
    case ServerMethod::kDropJob:
      return "drop_job";
  }
  return "unknown";
}

prometheus::Histogram::BucketBoundaries ServerMetrics::LatencyBuckets() {
  return {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
          0.1,   0.25,   0.5,    1,      2.5,  5,      10,   25,    60};
}

namespace {

// One metric family each; the help text is what Prometheus shows.
prometheus::Family<prometheus::Counter>& Counters(prometheus::Registry& registry,
                                                  const std::string& name,
                                                  const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
}
prometheus::Family<prometheus::Gauge>& Gauges(prometheus::Registry& registry,
                                              const std::string& name, const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}
prometheus::Family<prometheus::Histogram>& Histograms(prometheus::Registry& registry,
                                                      const std::string& name,
                                                      const std::string& help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry);
}

}  // namespace

// Long, and a list: one call per metric family (name, help, labels), in the order of the
// header's members; splitting it would only cut the list in two.
absl::StatusOr<std::unique_ptr<ServerMetrics>> ServerMetrics::Create(
    prometheus::Registry& registry) {
  std::unique_ptr<ServerMetrics> m(new ServerMetrics);
  absl::Status s = CatchPrometheus("ps_server metrics", [&] {
    // Requests, by method.
    m->requests_ = &Counters(registry, "ps_server_requests_total", "RPCs served, by method");
    m->errors_ = &Counters(registry, "ps_server_request_errors_total",
                           "RPCs answered with an error, by method and gRPC code");
    m->rejected_ = &Counters(registry, "ps_server_rejected_requests_total",
                             "Requests refused before they touched state, by reason");
    m->bytes_ = &Counters(registry, "ps_server_request_bytes_total",
                          "Serialized request (in) and response (out) bytes, by method");
    m->duration_ = &Histograms(registry, "ps_server_request_duration_seconds",
                               "Time to serve an RPC, pull waits included, by method");
    // Keys and tables.
    m->pushed_keys_ = &Counters(registry, "ps_server_pushed_keys_total",
                                "Keys applied or accumulated by accepted, first-time pushes");
    m->pulled_keys_ = &Counters(registry, "ps_server_pulled_keys_total", "Keys served by pulls");
    m->duplicate_pushes_ = &Counters(registry, "ps_server_duplicate_pushes_total",
                                     "Retried pushes acknowledged without applying them again");
    m->rows_ = &Gauges(registry, "ps_server_rows", "Rows this server holds, by job and table");
    m->table_bytes_ = &Gauges(registry, "ps_server_table_bytes",
                              "Bytes of the rows this server holds, optimizer state included");
    m->row_events_ = &Counters(
        registry, "ps_server_table_row_events_total",
        "What admission and eviction did to a sparse table's keys, by event: admitted, rejected (a "
        "push of a key not admitted yet, dropped), evicted (for the cap), expired (for the TTL)");
    m->tier_rows_ = &Gauges(registry, "ps_server_tier_rows",
                            "Rows of a table with a disk tier held on this server's disk tier");
    m->tier_bytes_ = &Gauges(registry, "ps_server_tier_bytes",
                             "About the bytes a table's rows take on this server's disk tier");
    m->tier_events_ = &Counters(
        registry, "ps_server_tier_events_total",
        "Keys and rows of a table with a disk tier, by event: ram_hit (a key found in RAM), "
        "disk_lookup (a key looked up on disk), disk_read (a row read back from disk), "
        "written_back (a row evicted from RAM to disk)");
    m->tier_read_seconds_ = &Histograms(registry, "ps_server_tier_read_seconds",
                                        "Time of one batched read from the disk tier");
    m->codec_bytes_ = &Counters(
        registry, "ps_server_table_codec_bytes_total",
        "Values of a table with a push_codec or pull_codec, by direction (push, pull) and stage: "
        "raw (as float32) and wire (encoded); raw / wire is the compression ratio");
    m->owned_slots_ =
        &Gauges(registry, "ps_server_owned_slots", "Virtual slots this server owns for the job");
    // The consistency gate.
    m->pull_wait_ = &Histograms(registry, "ps_server_pull_wait_seconds",
                                "Time pulls waited on the consistency gate (sync / ssp)");
    m->waiting_pulls_ = &Gauges(registry, "ps_server_waiting_pulls",
                                "Pulls blocked on the consistency gate right now");
    // Checkpoints, restores and dropped jobs: one series each.
    m->checkpoints_written_ = &Counters(registry, "ps_server_checkpoints_written_total",
                                        "Checkpoint shards written and synced by this server")
                                   .Add({});
    m->checkpoints_failed_ = &Counters(registry, "ps_server_checkpoints_failed_total",
                                       "Checkpoint shard writes that failed or were abandoned")
                                  .Add({});
    m->checkpoint_write_seconds_ =
        &Gauges(registry, "ps_server_last_checkpoint_write_seconds",
                "Time the last successful checkpoint write took (after its snapshot)")
             .Add({});
    m->checkpoint_bytes_ =
        &Gauges(registry, "ps_server_last_checkpoint_bytes",
                "Row bytes (values + optimizer state) of the last successful checkpoint write")
             .Add({});
    m->restores_ = &Counters(registry, "ps_server_restores_total",
                             "Restore orders carried out (once per job and shard epoch)")
                        .Add({});
    m->restores_failed_ = &Counters(registry, "ps_server_restores_failed_total",
                                    "Restore orders that failed (nothing was loaded)")
                               .Add({});
    m->restore_seconds_ = &Gauges(registry, "ps_server_last_restore_seconds",
                                  "Time the last restore took (read, verify and load)")
                               .Add({});
    m->dropped_jobs_ = &Counters(registry, "ps_server_dropped_jobs_total",
                                 "Jobs dropped from this server (DropJob: the job ended)")
                            .Add({});
    m->dropped_tables_ =
        &Counters(registry, "ps_server_dropped_tables_total", "Tables freed by dropping their jobs")
             .Add({});
    m->dropped_bytes_ = &Counters(registry, "ps_server_dropped_bytes_total",
                                  "Row bytes (values + optimizer state) freed by dropping jobs")
                             .Add({});
    for (int i = 0; i < kNumServerMethods; ++i) {
      const std::string method = ServerMethodName(static_cast<ServerMethod>(i));
      MethodSeries& series = m->methods_[i];
      series.requests = &m->requests_->Add({{"method", method}});
      series.bytes_in = &m->bytes_->Add({{"method", method}, {"direction", "in"}});
      series.bytes_out = &m->bytes_->Add({{"method", method}, {"direction", "out"}});
      series.duration = &m->duration_->Add({{"method", method}}, LatencyBuckets());
    }
    for (int i = 1; i < kNumRejectReasons; ++i) {
      m->rejected_by_reason_[i] = &m->rejected_->Add(
          {{"reason", std::string(RejectReasonName(static_cast<RejectReason>(i)))}});
    }
  });
  if (!s.ok()) return s;
  return m;
}

prometheus::Counter* ServerMetrics::ErrorCounter(ServerMethod method, absl::StatusCode code) {
  int c = static_cast<int>(code);
  if (c <= 0 || c >= kNumCodes) c = static_cast<int>(absl::StatusCode::kUnknown);
  std::atomic<prometheus::Counter*>& slot = methods_[static_cast<int>(method)].errors[c];
  prometheus::Counter* counter = slot.load(std::memory_order_acquire);
  if (counter != nullptr) return counter;
  // Family::Add returns the existing series for the same labels: racing threads agree.
  const std::string name =
      absl::AsciiStrToLower(absl::StatusCodeToString(static_cast<absl::StatusCode>(c)));
  absl::Status s = CatchPrometheus("ps_server_request_errors_total", [&] {
    counter = &errors_->Add({{"method", ServerMethodName(method)}, {"code", name}});
  });
  if (!s.ok()) {
    LOG_EVERY_N(WARNING, 100) << s;
    return nullptr;
  }
  slot.store(counter, std::memory_order_release);
  return counter;
}

void ServerMetrics::RecordRequest(ServerMethod method, const absl::Status& status,
                                  size_t request_bytes, size_t response_bytes,
                                  absl::Duration elapsed) {
  MethodSeries& series = methods_[static_cast<int>(method)];
  series.requests->Increment();
  series.bytes_in->Increment(static_cast<double>(request_bytes));
  if (status.ok()) series.bytes_out->Increment(static_cast<double>(response_bytes));
  series.duration->Observe(absl::ToDoubleSeconds(elapsed));
  if (status.ok()) return;
  if (prometheus::Counter* errors = ErrorCounter(method, status.code())) errors->Increment();
  const RejectReason reason = RejectReasonOf(status);
  if (reason != RejectReason::kNone) rejected_by_reason_[static_cast<int>(reason)]->Increment();
}

void ServerMetrics::RecordCheckpointWrite(const absl::Status& status, double seconds,
                                          uint64_t bytes) {
  if (!status.ok()) {
    checkpoints_failed_->Increment();
    return;
  }
  checkpoints_written_->Increment();
  checkpoint_write_seconds_->Set(seconds);
  checkpoint_bytes_->Set(static_cast<double>(bytes));
}

void ServerMetrics::RecordRestore(const absl::Status& status, double seconds) {
  restores_->Increment();
  if (!status.ok()) {
    restores_failed_->Increment();
    return;
  }
  restore_seconds_->Set(seconds);
}

ServerMetrics::~ServerMetrics() {
  // Let go of the jobs while every member is still alive: their release counts holders.
  absl::flat_hash_map<std::string, std::shared_ptr<Job>> jobs;
  std::deque<std::shared_ptr<Job>> dropped;
  absl::MutexLock l(&series_mu_);
  jobs.swap(jobs_);
  dropped.swap(dropped_);
  // `l` goes first (declared last): the jobs are released without the lock.
}

std::shared_ptr<ServerMetrics::Job> ServerMetrics::FindJob(const std::string& job_id) const {
  absl::ReaderMutexLock l(&series_mu_);
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second;
}

std::shared_ptr<ServerMetrics::Job> ServerMetrics::AddJob(const std::string& job_id) {
  if (std::shared_ptr<Job> job = FindJob(job_id)) return job;
  absl::MutexLock l(&series_mu_);
  std::shared_ptr<Job>& job = jobs_[job_id];
  if (job != nullptr) return job;
  auto added = std::make_unique<Job>();
  const prometheus::Labels labels = {{"job", job_id}};
  absl::Status s = CatchPrometheus("ps_server job metrics", [&] {
    added->pushed_keys = &pushed_keys_->Add(labels);
    added->pulled_keys = &pulled_keys_->Add(labels);
    added->duplicate_pushes = &duplicate_pushes_->Add(labels);
    added->owned_slots = &owned_slots_->Add(labels);
    added->waiting_pulls = &waiting_pulls_->Add(labels);
    added->pull_wait = &pull_wait_->Add(labels, LatencyBuckets());
  });
  if (!s.ok()) {
    LOG(WARNING) << "no metrics for job '" << job_id << "': " << s;
    jobs_.erase(job_id);
    return nullptr;
  }
  ++job_holders_[job_id];
  job = std::shared_ptr<Job>(added.release(), [this, job_id](Job* j) { ReleaseJob(job_id, j); });
  return job;
}

void ServerMetrics::ReleaseJob(const std::string& job_id, Job* job) {
  {
    absl::MutexLock l(&series_mu_);
    auto it = job_holders_.find(job_id);
    if (it != job_holders_.end() && --it->second == 0) {
      job_holders_.erase(it);
      pushed_keys_->Remove(job->pushed_keys);
      pulled_keys_->Remove(job->pulled_keys);
      duplicate_pushes_->Remove(job->duplicate_pushes);
      owned_slots_->Remove(job->owned_slots);
      waiting_pulls_->Remove(job->waiting_pulls);
      pull_wait_->Remove(job->pull_wait);
    }
  }
  delete job;
}

void ServerMetrics::DropJob(const std::string& job_id, uint64_t tables, uint64_t bytes) {
  dropped_jobs_->Increment();
  dropped_tables_->Increment(static_cast<double>(tables));
  dropped_bytes_->Increment(static_cast<double>(bytes));
  std::shared_ptr<Job> evicted;  // let go without the lock
  absl::MutexLock l(&series_mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  it->second->owned_slots->Set(0);
  dropped_.push_back(std::move(it->second));
  jobs_.erase(it);
  if (dropped_.size() > static_cast<size_t>(kKeepDroppedJobs)) {
    evicted = std::move(dropped_.front());
    dropped_.pop_front();
  }
}

ServerMetrics::Table::~Table() { owner_->ReleaseTable(key_, *this); }

std::unique_ptr<ServerMetrics::Table> ServerMetrics::AddTable(const std::string& job_id,
                                                              const std::string& table_name,
                                                              bool tiered) {
  std::unique_ptr<Table> table(new Table(this, {job_id, table_name}));
  const prometheus::Labels labels = {{"job", job_id}, {"table", table_name}};
  absl::MutexLock l(&series_mu_);
  absl::Status s = CatchPrometheus("ps_server table metrics", [&] {
    table->rows = &rows_->Add(labels);
    table->bytes = &table_bytes_->Add(labels);
    auto event = [&](const char* name) {
      prometheus::Labels with = labels;
      with["event"] = name;
      return &row_events_->Add(with);
    };
    table->admitted = event("admitted");
    table->rejected = event("rejected");
    table->evicted = event("evicted");
    table->expired = event("expired");
    auto codec = [&](const char* direction, const char* stage) {
      prometheus::Labels with = labels;
      with["direction"] = direction;
      with["stage"] = stage;
      return &codec_bytes_->Add(with);
    };
    table->push_raw = codec("push", "raw");
    table->push_wire = codec("push", "wire");
    table->pull_raw = codec("pull", "raw");
    table->pull_wire = codec("pull", "wire");
    if (!tiered) return;
    table->disk_rows = &tier_rows_->Add(labels);
    table->disk_bytes = &tier_bytes_->Add(labels);
    auto tier_event = [&](const char* name) {
      prometheus::Labels with = labels;
      with["event"] = name;
      return &tier_events_->Add(with);
    };
    table->ram_hits = tier_event("ram_hit");
    table->disk_lookups = tier_event("disk_lookup");
    table->disk_reads = tier_event("disk_read");
    table->written_back = tier_event("written_back");
    table->disk_read_seconds = &tier_read_seconds_->Add(labels, LatencyBuckets());
  });
  if (!s.ok()) {
    LOG(WARNING) << "no metrics for table '" << table_name << "' of job '" << job_id << "': " << s;
    // Not counted as a holder: its release must not remove another table's series.
    table->rows = table->bytes = nullptr;
    return nullptr;
  }
  ++table_holders_[table->key_];
  return table;
}

void ServerMetrics::ReleaseTable(const std::pair<std::string, std::string>& key,
                                 const Table& table) {
  if (table.rows == nullptr) return;  // refused by prometheus-cpp: never counted
  absl::MutexLock l(&series_mu_);
  auto it = table_holders_.find(key);
  if (it == table_holders_.end() || --it->second > 0) return;
  table_holders_.erase(it);
  rows_->Remove(table.rows);
  table_bytes_->Remove(table.bytes);
  for (prometheus::Counter* c : {table.admitted, table.rejected, table.evicted, table.expired}) {
    row_events_->Remove(c);
  }
  for (prometheus::Counter* c :
       {table.push_raw, table.push_wire, table.pull_raw, table.pull_wire}) {
    codec_bytes_->Remove(c);
  }
  if (table.disk_rows == nullptr) return;
  tier_rows_->Remove(table.disk_rows);
  tier_bytes_->Remove(table.disk_bytes);
  for (prometheus::Counter* c :
       {table.ram_hits, table.disk_lookups, table.disk_reads, table.written_back}) {
    tier_events_->Remove(c);
  }
  tier_read_seconds_->Remove(table.disk_read_seconds);
}

}  // namespace ps
