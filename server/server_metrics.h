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
#include <memory>
#include <string>

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
};
inline constexpr int kNumServerMethods = static_cast<int>(ServerMethod::kRestore) + 1;
// "pull", "push", "push_pull", ...
const char* ServerMethodName(ServerMethod method);

// Thread-safe. Labels stay bounded: method, gRPC code, reject reason, job id (configured jobs
// only) and table name; never a key.
class ServerMetrics {
 public:
  // The series of one job.
  struct Job {
    prometheus::Counter* pushed_keys = nullptr;
    prometheus::Counter* pulled_keys = nullptr;
    prometheus::Counter* duplicate_pushes = nullptr;
    prometheus::Gauge* owned_slots = nullptr;
    prometheus::Gauge* waiting_pulls = nullptr;
    prometheus::Histogram* pull_wait = nullptr;
  };
  // The series of one table (rows held by this server, and their bytes with optimizer state).
  struct Table {
    prometheus::Gauge* rows = nullptr;
    prometheus::Gauge* bytes = nullptr;
  };

  // Registers the ps_server_* families in `registry`, which must outlive this. prometheus-cpp's
  // exceptions (a name already registered with another type) become INTERNAL here.
  static absl::StatusOr<std::unique_ptr<ServerMetrics>> Create(prometheus::Registry& registry);
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // One finished RPC: counts it, its bytes and latency, and its error code and reject reason.
  void RecordRequest(ServerMethod method, const absl::Status& status, size_t request_bytes,
                     size_t response_bytes, absl::Duration elapsed);

  // The series of `job_id`, created on first use (call when the job is configured). Null if
  // prometheus-cpp refused them (logged).
  Job* AddJob(const std::string& job_id);
  // The series of a configured job, or null (unknown job: nothing is counted for it).
  Job* FindJob(const std::string& job_id) const;
  // The rows / bytes gauges of a table (several tables of one name share them). Null gauges if
  // prometheus-cpp refused them (logged).
  Table AddTable(const std::string& job_id, const std::string& table_name);

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

  std::array<MethodSeries, kNumServerMethods> methods_;
  std::array<prometheus::Counter*, kNumRejectReasons> rejected_by_reason_{};

  mutable absl::Mutex jobs_mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Job>> jobs_ ABSL_GUARDED_BY(jobs_mu_);
};

}  // namespace ps

#endif  // PS_SERVER_SERVER_METRICS_H_
