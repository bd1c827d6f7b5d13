// Options of ps_scheduler (filled from flags in scheduler/main.cc, or by tests).
#ifndef PS_SCHEDULER_SCHEDULER_OPTIONS_H_
#define PS_SCHEDULER_SCHEDULER_OPTIONS_H_

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/security.h"

namespace ps {

struct SchedulerOptions {
  // host:port the gRPC service listens on; port 0 picks a free port (SchedulerServer only).
  std::string listen = "0.0.0.0:7000";
  // RocksDB folder holding nodes, jobs and counters; created if missing. Required.
  std::string state_dir;
  // How often nodes heartbeat (told to them at Register).
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // A node silent for longer than this is declared DEAD.
  absl::Duration heartbeat_timeout = absl::Seconds(5);
  // How often the background ticker checks for dead nodes and schedules (SchedulerServer only).
  absl::Duration tick_interval = absl::Milliseconds(200);
  // host:port of this scheduler's /metrics, reported by ListNodes (empty: none).
  std::string metrics_address;
  // Where servers write checkpoints (a directory every server can reach; a job's spec may name
  // another). Empty: "checkpoints" beside state_dir. Made absolute by the scheduler.
  std::string checkpoint_root;
  // Absolute directories under which a job's spec may place its checkpoints (checkpoint.root,
  // after lexical normalization); checkpoint_root is always allowed. Empty: only
  // checkpoint_root.
  std::vector<std::string> checkpoint_roots;
  // A job whose model (parameters and optimizer state, float32; see ModelBytes in job_spec.h)
  // needs more bytes is refused with RESOURCE_EXHAUSTED. Default 4 GiB.
  uint64_t max_model_bytes = uint64_t{4} << 30;
  // Events kept per job; older ones are dropped.
  int max_events_per_job = 1000;
  // Nodes the scheduler keeps, alive and dead (dead ones are history until room is needed): a
  // Register at the cap forgets the oldest dead nodes no pending or running job names, and is
  // RESOURCE_EXHAUSTED if none can go. Default 4096.
  int max_nodes = 4096;
  // A node DEAD for longer than this is forgotten (Tick), unless a pending or running job still
  // names it. Zero: dead nodes are kept until max_nodes needs room. Default 1 h.
  absl::Duration forget_dead_nodes_after = absl::Hours(1);
  // Registrations accepted in any minute (a sliding window); more are RESOURCE_EXHAUSTED.
  // Default 600.
  int max_registrations_per_minute = 600;
  // Jobs waiting to start (PENDING); a SubmitJob (or RestoreJob of an ended job) beyond it is
  // RESOURCE_EXHAUSTED. Default 1024.
  int max_pending_jobs = 1024;
  // When every live node (two or more) goes silent at once, assume the scheduler itself is cut
  // off and declare nobody dead until one is heard again (then all get a fresh grace period).
  // Off: each is declared dead after heartbeat_timeout, whatever the others do.
  bool suspect_own_partition = false;
  // The tokens calls must carry (null: none); kept alive by SchedulerServer. The Scheduler signs
  // the restore orders of its workers' assignments with it (Authorizer::SignRestoreOrder).
  std::shared_ptr<const Authorizer> authorizer;

  absl::Status Validate() const {
    if (state_dir.empty()) return absl::InvalidArgumentError("--state_dir is required");
    if (heartbeat_interval <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError("--heartbeat_interval must be positive");
    }
    if (heartbeat_timeout <= heartbeat_interval) {
      return absl::InvalidArgumentError(
          absl::StrCat("--heartbeat_timeout (", absl::FormatDuration(heartbeat_timeout),
                       ") must be longer than --heartbeat_interval (",
                       absl::FormatDuration(heartbeat_interval), ")"));
    }
    if (tick_interval <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError("tick_interval must be positive");
    }
    for (const std::string& root : checkpoint_roots) {
      if (!std::filesystem::path(root).is_absolute()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--checkpoint_roots: '", root, "' is not an absolute directory"));
      }
    }
    if (max_model_bytes == 0) {
      return absl::InvalidArgumentError("--max_model_bytes must be positive");
    }
    if (max_events_per_job < 1) {
      return absl::InvalidArgumentError("max_events_per_job must be at least 1");
    }
    if (max_nodes < 1) return absl::InvalidArgumentError("--max_nodes must be at least 1");
    if (forget_dead_nodes_after < absl::ZeroDuration()) {
      return absl::InvalidArgumentError("--forget_dead_nodes_after must not be negative");
    }
    if (max_registrations_per_minute < 1) {
      return absl::InvalidArgumentError("--max_registrations_per_minute must be at least 1");
    }
    if (max_pending_jobs < 1) {
      return absl::InvalidArgumentError("--max_pending_jobs must be at least 1");
    }
    return absl::OkStatus();
  }
};

}  // namespace ps

#endif  // PS_SCHEDULER_SCHEDULER_OPTIONS_H_
