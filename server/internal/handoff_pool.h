// Threads for work that must not run on gRPC's callback threads: pulls that wait in the
// consistency gate (for minutes, in a sync job with a slow worker) and large requests. A task
// never waits behind another: where no thread is idle, Run starts one (optionally up to a cap,
// beyond which tasks queue). Threads stay for later tasks until the pool is destroyed.
#ifndef PS_SERVER_INTERNAL_HANDOFF_POOL_H_
#define PS_SERVER_INTERNAL_HANDOFF_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ps {

class HandoffPool {
 public:
  // `max_threads` 0: no cap.
  explicit HandoffPool(int max_threads = 0) : max_threads_(max_threads) {}
  // Runs the queued tasks, waits for the running ones, and joins the threads.
  ~HandoffPool();
  HandoffPool(const HandoffPool&) = delete;
  HandoffPool& operator=(const HandoffPool&) = delete;

  // Not once the destructor has begun (its callers are gone by then: gRPC's server is shut down
  // before the service that owns the pool).
  void Run(std::function<void()> task) ABSL_LOCKS_EXCLUDED(mu_);

  // Threads started so far, and those of them waiting for a task (for tests).
  int threads() const ABSL_LOCKS_EXCLUDED(mu_);
  int idle_threads() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const int max_threads_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_SERVER_INTERNAL_HANDOFF_POOL_H_
