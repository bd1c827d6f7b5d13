// Checkpoints of a server's rows: a snapshot taken on the caller's thread, written to RocksDB by
// a background thread.
#ifndef PS_SERVER_CHECKPOINTER_H_
#define PS_SERVER_CHECKPOINTER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ps/v1/parameter_server.pb.h"
#include "server/checkpoint_io.h"
#include "server/checkpoint_roots.h"
#include "server/server_metrics.h"
#include "server/slot_rows.h"
#include "server/table_store.h"

namespace ps {

struct CheckpointerOptions {
  // Fault-injection test hook: each write starts this long after its snapshot (tests kill a
  // server mid-checkpoint with it). 0 (the default) in production.
  absl::Duration write_delay = absl::ZeroDuration();
  // Snapshots taken and not yet written (each holds a copy of the rows in RAM, and of tiered
  // tables a view of the disk tier, a RocksDB snapshot); more are refused.
  int max_in_flight = 2;
  // Finished checkpoints remembered per job (for AwaitCheckpoint and retried Checkpoints).
  int keep_per_job = 8;
  CheckpointWriteOptions write;  // its `cancel` is set by the Checkpointer
  // Where checkpoints may be written: a request's path must lie under one of them. None (the
  // default): every checkpoint is refused.
  CheckpointRoots roots;
};

// Thread-safe. Begin() answers once the rows are copied; one background thread writes the
// copies in order. Shutdown() (or the destructor) stops the running write between slots and
// abandons queued ones.
class Checkpointer {
 public:
  // `store` and `metrics` (may be null) must outlive this.
  Checkpointer(TableStore* store, CheckpointerOptions options, ServerMetrics* metrics = nullptr);
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Takes the snapshot of `req.job_id` and queues its write to `req.path`. The caller checks
  // that the job is known. The same (job, checkpoint id) again gets the first call's answer.
  // INVALID_ARGUMENT: no path / id, a path not under a checkpoint root; FAILED_PRECONDITION: shard
  // epoch other than this server's; ALREADY_EXISTS: the path exists; RESOURCE_EXHAUSTED: too many
  // writes in flight.
  absl::StatusOr<v1::CheckpointResponse> Begin(const v1::CheckpointRequest& req);
  // Waits until the write is done, then answers done = true with its stats, or the write's
  // error; DEADLINE_EXCEEDED if it is still being written at `deadline` (an error, not an
  // answer with done = false, so that no caller can take an unwritten checkpoint for a
  // written one). NOT_FOUND for a checkpoint this server does not know.
  absl::StatusOr<v1::CheckpointResponse> Await(const std::string& job_id, uint64_t checkpoint_id,
                                               absl::Time deadline);
  // Idempotent. Later Begin()s are UNAVAILABLE; waiting Await()s return UNAVAILABLE.
  void Shutdown();
  // The job was dropped: forgets its finished checkpoints (the files stay). Writes still
  // running go on (their rows are copied); their outcomes are kept for Await(), the
  // kKeepLate latest of them.
  void ForgetJob(const std::string& job_id);

 private:
  enum class State { kSnapshotting, kQueued, kWriting, kDone };
  struct Entry {
    std::string path;
    int64_t clock = 0;
    State state = State::kSnapshotting;
    v1::CheckpointResponse response;        // filled once the snapshot is taken
    std::unique_ptr<JobSnapshot> snapshot;  // until written
    absl::Status status;                    // kDone: the write's outcome
  };
  // Entries of one job, by checkpoint id.
  using JobEntries = std::map<uint64_t, std::unique_ptr<Entry>>;

  absl::StatusOr<v1::CheckpointResponse> Snapshot(const v1::CheckpointRequest& req, Entry* entry);
  void WriterLoop();
  void Write(Entry* entry, const v1::CheckpointShardMeta& meta);
  void Forget(JobEntries& entries) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps the outcome of a write that finished after its job was dropped, forgetting the oldest
  // such one beyond kKeepLate.
  void KeepLate(const std::string& job_id, uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Erases one entry, and its job's once empty.
  void Erase(const std::string& job_id, uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  static constexpr size_t kKeepLate = 16;
  int InFlight() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  TableStore* const store_;
  ServerMetrics* const metrics_;
  const CheckpointerOptions options_;
  std::atomic<bool> cancel_{false};

  absl::Mutex mu_;
  absl::CondVar changed_;  // an entry changed state, the queue grew, or shutdown began
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, JobEntries> jobs_ ABSL_GUARDED_BY(mu_);
  // Entries to write, in order, with the job they belong to.
  std::deque<std::pair<std::string, uint64_t>> queue_ ABSL_GUARDED_BY(mu_);
  // Dropped jobs with writes that were still running, and the outcomes of such writes kept,
  // oldest first.
  absl::flat_hash_set<std::string> dropped_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<std::string, uint64_t>> late_ ABSL_GUARDED_BY(mu_);
  std::thread writer_;
  std::once_flag join_once_;
};

}  // namespace ps

#endif  // PS_SERVER_CHECKPOINTER_H_
