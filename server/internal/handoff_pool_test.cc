#include "server/internal/handoff_pool.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

// Blocked tasks do not keep a later one waiting: each of these waits for the next to start.
TEST(HandoffPoolTest, ATaskNeverWaitsBehindABlockedOne) {
  constexpr int kTasks = 20;
  absl::Notification started[kTasks + 1];
  std::atomic<int> finished{0};
  {
    HandoffPool pool;
    for (int i = 0; i < kTasks; ++i) {
      pool.Run([&, i] {
        started[i].Notify();
        if (started[i + 1].WaitForNotificationWithTimeout(absl::Seconds(20))) ++finished;
      });
    }
    pool.Run([&] { started[kTasks].Notify(); });
  }  // waits for every task
  EXPECT_EQ(finished.load(), kTasks);
}

// Waits (up to 20 s) until `ran` is `want` and every thread of `pool` waits for a task again.
bool RanAndIdle(const HandoffPool& pool, const std::atomic<int>& ran, int want) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (ran.load() != want || pool.idle_threads() != pool.threads()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

// Idle threads are reused, and a cap makes tasks queue instead of starting threads.
TEST(HandoffPoolTest, IdleThreadsAreReusedAndACapQueues) {
  std::atomic<int> ran{0};
  {
    HandoffPool pool;
    for (int i = 0; i < 50; ++i) {
      pool.Run([&] { ++ran; });
      ASSERT_TRUE(RanAndIdle(pool, ran, i + 1));
    }
    EXPECT_EQ(pool.threads(), 1);
  }
  EXPECT_EQ(ran.load(), 50);
  {
    HandoffPool capped(1);
    absl::Notification release;
    capped.Run([&] { release.WaitForNotification(); });
    capped.Run([&] { ++ran; });  // queued behind the first
    EXPECT_EQ(capped.threads(), 1);
    release.Notify();
  }
  EXPECT_EQ(ran.load(), 51);
}

}  // namespace
}  // namespace ps
