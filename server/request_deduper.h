// Remembers recent (worker, request id) pairs so that a retried push is applied at most once.
#ifndef PS_SERVER_REQUEST_DEDUPER_H_
#define PS_SERVER_REQUEST_DEDUPER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"

namespace ps {

// Thread-safe. Each worker has its own window of the last `window` request ids; workers do not
// contend on one lock (the map lock is taken shared once the worker is known).
class RequestDeduper {
 public:
  explicit RequestDeduper(size_t window = 1 << 16) : window_(window) {}

  // True if (job, worker, request_id) was recorded by FirstTime (and is still in the window).
  // Never creates state: it runs before the request is validated.
  bool Seen(const std::string& job_id, uint32_t worker_id, uint64_t request_id) {
    std::shared_ptr<Window> w;
    {
      absl::ReaderMutexLock l(&mu_);
      auto it = windows_.find(std::make_pair(job_id, worker_id));
      if (it == windows_.end()) return false;
      w = it->second;
    }
    absl::MutexLock l(&w->mu);
    return w->ids.contains(request_id);
  }

  // True the first time (job, worker, request_id) is seen; false for a repeat.
  bool FirstTime(const std::string& job_id, uint32_t worker_id, uint64_t request_id) {
    const std::shared_ptr<Window> w = WindowFor(job_id, worker_id);
    absl::MutexLock l(&w->mu);
    if (!w->ids.insert(request_id).second) return false;
    w->order.push_back(request_id);
    if (w->order.size() > window_) {
      w->ids.erase(w->order.front());
      w->order.pop_front();
    }
    return true;
  }

  // Forgets the windows of `job_id`'s workers. The caller makes sure that no FirstTime() of the
  // job runs any more (it would start a new window).
  void DropJob(const std::string& job_id) {
    std::vector<std::shared_ptr<Window>> dropped;  // freed without the lock
    absl::MutexLock l(&mu_);
    for (auto it = windows_.begin(); it != windows_.end();) {
      if (it->first.first == job_id) {
        dropped.push_back(std::move(it->second));
        windows_.erase(it++);
      } else {
        ++it;
      }
    }
  }

 private:
  struct Window {
    absl::Mutex mu;
    absl::flat_hash_set<uint64_t> ids ABSL_GUARDED_BY(mu);
    std::deque<uint64_t> order ABSL_GUARDED_BY(mu);
  };
  std::shared_ptr<Window> WindowFor(const std::string& job_id, uint32_t worker_id) {
    const auto key = std::make_pair(job_id, worker_id);
    {
      absl::ReaderMutexLock l(&mu_);
      auto it = windows_.find(key);
      if (it != windows_.end()) return it->second;
    }
    absl::MutexLock l(&mu_);
    auto& w = windows_[key];
    if (w == nullptr) w = std::make_shared<Window>();
    return w;
  }

  const size_t window_;
  absl::Mutex mu_;
  // Held by callers while they use a window (DropJob may forget it meanwhile).
  absl::flat_hash_map<std::pair<std::string, uint32_t>, std::shared_ptr<Window>> windows_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_SERVER_REQUEST_DEDUPER_H_
