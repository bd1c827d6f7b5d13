// Test helpers of the scheduler: a fake clock and a temporary folder.
#ifndef PS_SCHEDULER_INTERNAL_TEST_UTIL_H_
#define PS_SCHEDULER_INTERNAL_TEST_UTIL_H_

#include <stdlib.h>

#include <filesystem>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace ps {

// Time that moves only when told to. Thread-safe.
class FakeClock {
 public:
  absl::Time Now() const {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  // For Scheduler::Open; `this` must outlive its users.
  std::function<absl::Time()> AsFunction() const {
    return [this] { return Now(); };
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::FromUnixSeconds(1700000000);
};

// A fresh folder under the test temp dir, removed with its contents at destruction.
class ScopedTempDir {
 public:
  ScopedTempDir() {
    std::string tmpl = ::testing::TempDir() + "/ps_scheduler_test_XXXXXX";
    EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~ScopedTempDir() {
    std::error_code error;
    std::filesystem::remove_all(path_, error);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace ps

#endif  // PS_SCHEDULER_INTERNAL_TEST_UTIL_H_
