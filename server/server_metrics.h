// The parameter server's Prometheus metrics (ps_server_*): families registered once, series
// resolved once per method / job / table and cached, so the hot path only bumps atomics.
#ifndef PS_SERVER_SERVER_METRICS_H_
#define PS_SERVER_SERVER_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/reject_reason.h"

namespace ps {

// The RPCs of ps.v1.ParameterServer (label `method`).
enum class ServerMethod : uint8_t {
  kPull,
  kPush,
  kPushPull,
  kClock,
  kConfigureJob,
  kCreateTable,
  kDescribeTable,
  kCheckpoint,
  kAwaitCheckpoint,
  kRestore,
  kDropJob,
};
inline constexpr int kNumServerMethods = static_cast<int>(ServerMethod::kDropJob) + 1;
// "pull", "push", "push_pull", ...
const char* ServerMethodName(ServerMethod method);

// Thread-safe. Labels stay bounded: method, gRPC code, reject reason, job id (configured jobs,
// and the kKeepDroppedJobs latest dropped ones) and table name; never a key.
//
// Series of a job or a table are held by whoever counts into them (a request holds its job's
// for its duration, a table its own) and are removed from the registry once nothing holds them
// any more: a request still running when its job is dropped never counts into a freed series.
class ServerMetrics {
 public:
  // The series of one job, held through a shared_ptr (AddJob, FindJob).
  struct Job {
    prometheus::Counter* pushed_keys = nullptr;
    prometheus::Counter* pulled_keys = nullptr;
    prometheus::Counter* duplicate_pushes = nullptr;
    prometheus::Gauge* owned_slots = nullptr;
    prometheus::Gauge* waiting_pulls = nullptr;
    prometheus::Histogram* pull_wait = nullptr;
  };
  // The series of one table (rows held by this server, and their bytes with optimizer state).
  // Tables of one job and name share them; they are removed when the last such Table goes.
  struct Table {
    prometheus::Gauge* rows = nullptr;
    prometheus::Gauge* bytes = nullptr;
    // ps_server_table_row_events_total by event.
    prometheus::Counter* admitted = nullptr;
    prometheus::Counter* rejected = nullptr;
    prometheus::Counter* evicted = nullptr;
    prometheus::Counter* expired = nullptr;
    // ps_server_table_codec_bytes_total of a table with a codec: its values as float32 (raw)
    // and as they crossed the wire, by direction (counted where this server decodes or
    // encodes them).
    prometheus::Counter* push_raw = nullptr;
    prometheus::Counter* push_wire = nullptr;
    prometheus::Counter* pull_raw = nullptr;
    prometheus::Counter* pull_wire = nullptr;
    // A table with a disk tier (AddTable's `tiered`; else all null): its rows and bytes there
    // (ps_server_tier_rows, ps_server_tier_bytes), ps_server_tier_events_total by event, and
    // the time of each batched read from disk (ps_server_tier_read_seconds).
    prometheus::Gauge* disk_rows = nullptr;
    prometheus::Gauge* disk_bytes = nullptr;
    prometheus::Counter* ram_hits = nullptr;
    prometheus::Counter* disk_lookups = nullptr;
    prometheus::Counter* disk_reads = nullptr;
    prometheus::Counter* written_back = nullptr;
    prometheus::Histogram* disk_read_seconds = nullptr;
    ~Table();
    Table(const Table&) = delete;
    Table& operator=(const Table&) = delete;

   private:
    friend class ServerMetrics;
    Table(ServerMetrics* owner, std::pair<std::string, std::string> key)
        : owner_(owner), key_(std::move(key)) {}
    ServerMetrics* const owner_;
    const std::pair<std::string, std::string> key_;  // (job id, table name)
  };
  // Dropped jobs whose series stay scrapable (their final counts), as workers keep their
  // latest jobs'; older ones are removed.
  static constexpr int kKeepDroppedJobs = 4;

  // Registers the ps_server_* families in `registry`, which must outlive this. prometheus-cpp's
  // exceptions (a name already registered with another type) become INTERNAL here.
  static absl::StatusOr<std::unique_ptr<ServerMetrics>> Create(prometheus::Registry& registry);
  // Every Job and Table handed out must be gone by now (requests and tables do not outlive it).
  ~ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // One finished RPC: counts it, its bytes and latency, and its error code and reject reason.
  void RecordRequest(ServerMethod method, const absl::Status& status, size_t request_bytes,
                     size_t response_bytes, absl::Duration elapsed);

  // The series of `job_id`, created on first use (call when the job is configured). Null if
  // prometheus-cpp refused them (logged).
  std::shared_ptr<Job> AddJob(const std::string& job_id);
  // The series of a configured job, or null (unknown or dropped job: nothing is counted for it).
  std::shared_ptr<Job> FindJob(const std::string& job_id) const;
  // The job was dropped from this server, with `tables` tables holding `bytes` row bytes: counts
  // them, sets its owned_slots gauge to 0 and stops counting for it (FindJob: null). Its series
  // stay until kKeepDroppedJobs later jobs were dropped (and nothing holds them).
  void DropJob(const std::string& job_id, uint64_t tables, uint64_t bytes);
  // The rows / bytes gauges of a table. Null if prometheus-cpp refused them (logged).
  std::unique_ptr<Table> AddTable(const std::string& job_id, const std::string& table_name,
                                  bool tiered = false);

  // A finished checkpoint write (`seconds` and `bytes` count only when it succeeded).
  void RecordCheckpointWrite(const absl::Status& status, double seconds, uint64_t bytes);
  // A restore carried out (once per job and shard epoch).
  void RecordRestore(const absl::Status& status, double seconds);

  // Latency histogram buckets: 50us .. 60s, log-spaced (1, 2.5, 5 per decade).
  static prometheus::Histogram::BucketBoundaries LatencyBuckets();

 private:
  static constexpr int kNumCodes = 17;  // grpc::StatusCode OK .. UNAUTHENTICATED
  ServerMetrics() = default;
  prometheus::Counter* ErrorCounter(ServerMethod method, absl::StatusCode code);
  // A Job (of `job_id`) or a Table (of `key`) is gone: removes the series once no other holds
  // them. Called without series_mu_ held.
  void ReleaseJob(const std::string& job_id, Job* job);
  void ReleaseTable(const std::pair<std::string, std::string>& key, const Table& table);

  struct MethodSeries {
    prometheus::Counter* requests = nullptr;
    prometheus::Counter* bytes_in = nullptr;
    prometheus::Counter* bytes_out = nullptr;
    prometheus::Histogram* duration = nullptr;
    // Error counters by code, added on the first error of each code.
    std::array<std::atomic<prometheus::Counter*>, kNumCodes> errors{};
  };

  prometheus::Family<prometheus::Counter>* requests_ = nullptr;
  prometheus::Family<prometheus::Counter>* errors_ = nullptr;
  prometheus::Family<prometheus::Counter>* rejected_ = nullptr;
  prometheus::Family<prometheus::Counter>* bytes_ = nullptr;
  prometheus::Family<prometheus::Histogram>* duration_ = nullptr;
  prometheus::Family<prometheus::Counter>* pushed_keys_ = nullptr;
  prometheus::Family<prometheus::Counter>* pulled_keys_ = nullptr;
  prometheus::Family<prometheus::Counter>* duplicate_pushes_ = nullptr;
  prometheus::Family<prometheus::Gauge>* rows_ = nullptr;
  prometheus::Family<prometheus::Gauge>* table_bytes_ = nullptr;
  prometheus::Family<prometheus::Counter>* codec_bytes_ = nullptr;
  prometheus::Family<prometheus::Counter>* row_events_ = nullptr;
  prometheus::Family<prometheus::Gauge>* tier_rows_ = nullptr;
  prometheus::Family<prometheus::Gauge>* tier_bytes_ = nullptr;
  prometheus::Family<prometheus::Counter>* tier_events_ = nullptr;
  prometheus::Family<prometheus::Histogram>* tier_read_seconds_ = nullptr;
  prometheus::Family<prometheus::Gauge>* owned_slots_ = nullptr;
  prometheus::Family<prometheus::Histogram>* pull_wait_ = nullptr;
  prometheus::Family<prometheus::Gauge>* waiting_pulls_ = nullptr;
  // Checkpoints and restores: one series each (no labels).
  prometheus::Counter* checkpoints_written_ = nullptr;
  prometheus::Counter* checkpoints_failed_ = nullptr;
  prometheus::Gauge* checkpoint_write_seconds_ = nullptr;
  prometheus::Gauge* checkpoint_bytes_ = nullptr;
  prometheus::Counter* restores_ = nullptr;
  prometheus::Counter* restores_failed_ = nullptr;
  prometheus::Gauge* restore_seconds_ = nullptr;
  // Jobs dropped (DropJob): their tables and the row bytes freed.
  prometheus::Counter* dropped_jobs_ = nullptr;
  prometheus::Counter* dropped_tables_ = nullptr;
  prometheus::Counter* dropped_bytes_ = nullptr;

  std::array<MethodSeries, kNumServerMethods> methods_;
  std::array<prometheus::Counter*, kNumRejectReasons> rejected_by_reason_{};

  // Order: series_mu_, then a family's own lock (Add, Remove). A Job or Table is never let go
  // with series_mu_ held (its release takes it).
  mutable absl::Mutex series_mu_;
  // Configured jobs.
  absl::flat_hash_map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(series_mu_);
  // The latest dropped jobs, oldest first, kept scrapable.
  std::deque<std::shared_ptr<Job>> dropped_ ABSL_GUARDED_BY(series_mu_);
  // How many Job / Table objects hold the series of each job id / (job id, table name): the
  // series are removed when it falls to 0 (an object of the same labels made meanwhile got the
  // same series from its family).
  absl::flat_hash_map<std::string, int> job_holders_ ABSL_GUARDED_BY(series_mu_);
  absl::flat_hash_map<std::pair<std::string, std::string>, int> table_holders_
      ABSL_GUARDED_BY(series_mu_);
};

}  // namespace ps

#endif  // PS_SERVER_SERVER_METRICS_H_
