// Process gauges every daemon exports: memory, open fds, CPU time, start time, build info.
#ifndef PS_COMMON_PROCESS_METRICS_H_
#define PS_COMMON_PROCESS_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace ps {

// The version in ps_build_info{version}: VersionString() (common/version.h), as --version.
const char* BuildVersion();

// Owns, in `registry`, the series (label role="server" / "worker" / "scheduler"):
//   ps_process_resident_memory_bytes, ps_process_virtual_memory_bytes, ps_process_open_fds,
//   ps_process_start_time_seconds (gauges), ps_process_cpu_seconds_total (counter) and
//   ps_build_info{role,version} = 1.
// prometheus-cpp 1.0 cannot compute a gauge at scrape time from a Registry, so a thread of this
// object re-reads /proc/self every `refresh` (values are at most that old). Thread-safe.
class ProcessMetrics {
 public:
  // Registers the families (prometheus-cpp's exceptions become INTERNAL here), reads /proc once,
  // and starts the refresh thread. `registry` must outlive this.
  static absl::StatusOr<std::unique_ptr<ProcessMetrics>> Start(
      prometheus::Registry& registry, const std::string& role,
      absl::Duration refresh = absl::Seconds(1));
  ~ProcessMetrics();  // stops the thread; the series stay in the registry with their last values
  ProcessMetrics(const ProcessMetrics&) = delete;
  ProcessMetrics& operator=(const ProcessMetrics&) = delete;

  // Reads /proc/self now. UNAVAILABLE where /proc cannot be read (the gauges keep their values).
  absl::Status Update();

 private:
  ProcessMetrics() = default;
  void Loop(absl::Duration refresh);

  prometheus::Gauge* resident_ = nullptr;
  prometheus::Gauge* virtual_ = nullptr;
  prometheus::Gauge* open_fds_ = nullptr;
  prometheus::Gauge* start_time_ = nullptr;
  prometheus::Counter* cpu_ = nullptr;
  absl::Mutex mu_;  // serializes Update() (the CPU counter adds deltas)
  double cpu_seen_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Notification stop_;
  std::thread thread_;
};

// ProcessMetrics::Start with the default refresh; keep the result alive while serving.
inline absl::StatusOr<std::unique_ptr<ProcessMetrics>> RegisterProcessMetrics(
    prometheus::Registry& registry, const std::string& role) {
  return ProcessMetrics::Start(registry, role);
}

}  // namespace ps

#endif  // PS_COMMON_PROCESS_METRICS_H_
