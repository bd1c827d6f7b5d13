#include "server/internal/handoff_pool.h"

#include <utility>

namespace ps {

HandoffPool::~HandoffPool() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

void HandoffPool::Run(std::function<void()> task) {
  absl::MutexLock l(&mu_);
  tasks_.push_back(std::move(task));
  // Every queued task beyond the idle threads gets a thread of its own (up to the cap).
  const bool capped = max_threads_ > 0 && static_cast<int>(threads_.size()) >= max_threads_;
  if (static_cast<int>(tasks_.size()) > idle_ && !capped) {
    threads_.emplace_back([this] { Loop(); });
  }
}

int HandoffPool::threads() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(threads_.size());
}

int HandoffPool::idle_threads() const {
  absl::MutexLock l(&mu_);
  return idle_;
}

void HandoffPool::Loop() {
  mu_.Lock();
  while (true) {
    ++idle_;
    mu_.Await(absl::Condition(
        +[](HandoffPool* p)
             ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->stop_ || !p->tasks_.empty(); },
        this));
    --idle_;
    if (tasks_.empty()) break;  // stopping, nothing left to run
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    mu_.Unlock();
    task();
    task = nullptr;  // what it holds goes before the lock is taken again
    mu_.Lock();
  }
  mu_.Unlock();
}

}  // namespace ps
