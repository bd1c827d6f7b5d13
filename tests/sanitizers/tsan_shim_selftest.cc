// The TSan build's check of tests/sanitizers/absl_tsan_shim.cc (ctest: tsan_shim_selftest and
// tsan_shim_selftest_race): without the shim, TSan reports the counter below, which an
// absl::Mutex guards, and the value handed over through an absl::Notification; with it, only a
// real race is reported (the unguarded counter, when run with an argument).
#include <cstdio>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace {
absl::Mutex mu;
int guarded ABSL_GUARDED_BY(mu) = 0;
int unguarded = 0;
int handed_over = 0;
}  // namespace

int main(int argc, char** argv) {
  const bool race = argc > 1;
  auto work = [] {
    for (int i = 0; i < 1000; ++i) {
      absl::MutexLock l(&mu);
      ++guarded;
    }
  };
  // Two threads that share nothing but this int: unordered whatever the timing.
  auto racer = [] { ++unguarded; };  // the race the shim must not hide
  if (race) {
    std::thread r1(racer), r2(racer);
    r1.join();
    r2.join();
  }
  absl::Notification notification;
  std::thread a(work), b(work);
  std::thread c([&] {
    handed_over = 42;
    notification.Notify();
  });
  notification.WaitForNotification();
  const int value = handed_over;
  {
    absl::MutexLock l(&mu);
    mu.Await(absl::Condition(
        +[](int* g) { return *g == 2000; }, &guarded));
  }
  a.join();
  b.join();
  c.join();
  std::printf("value %d, unguarded %d\n", value, unguarded);
  return value == 42 ? 0 : 1;
}
