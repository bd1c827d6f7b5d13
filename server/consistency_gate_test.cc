#include "server/consistency_gate.h"

#include <atomic>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace ps::consistency_gate_test {
namespace {

using v1::ConsistencySpec;

constexpr char kJob[] = "job";
// How long a waiter that the test will release may wait: only a safety net against a hung test.
const absl::Duration kLong = absl::Seconds(60);

ConsistencySpec Spec(ConsistencySpec::Mode mode, int staleness = 0) {
  ConsistencySpec spec;
  spec.set_mode(mode);
  spec.set_staleness(staleness);
  return spec;
}

bool Contains(const absl::Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

// A gate whose apply callback records the clocks it was called with.
class ConsistencyGateTest : public ::testing::Test {
 protected:
  ConsistencyGateTest()
      : gate_([this](const std::string& job, int64_t from, int64_t to) {
          EXPECT_EQ(++applying_, 1) << "apply callbacks overlap";
          EXPECT_LT(from, to);
          EXPECT_LE(to - from, 1000) << "these tests move clocks a few steps at a time";
          {
            absl::MutexLock l(&mu_);
            for (int64_t clock = from; clock < to && clock < from + 1000; ++clock) {
              applied_.emplace_back(job, clock);
            }
          }
          --applying_;
        }) {}

  std::vector<std::pair<std::string, int64_t>> Applied() {
    absl::MutexLock l(&mu_);
    return applied_;
  }
  std::vector<std::pair<std::string, int64_t>> AppliedClocks(std::vector<int64_t> clocks) {
    std::vector<std::pair<std::string, int64_t>> want;
    for (int64_t c : clocks) want.emplace_back(kJob, c);
    return want;
  }
  void Advance(uint32_t worker, int64_t clock) {
    auto min = gate_.AdvanceClock(kJob, worker, clock);
    ASSERT_TRUE(min.ok()) << min.status();
  }

  // A pull at `clock` on its own thread; `done` is notified when it returns.
  struct Waiter {
    absl::Notification done;
    absl::StatusOr<ConsistencyGate::PullTicket> result;
    std::thread thread;
    ~Waiter() {
      if (thread.joinable()) thread.join();
    }
  };
  void StartPull(Waiter* w, int64_t clock) {
    w->thread = std::thread([this, w, clock] {
      w->result = gate_.WaitForPull(kJob, clock, absl::Now() + kLong);
      w->done.Notify();
    });
  }
  // Waits for the waiter (bounded by kLong) and returns its min clock.
  int64_t Released(Waiter* w) {
    EXPECT_TRUE(w->done.WaitForNotificationWithTimeout(kLong));
    w->thread.join();
    EXPECT_TRUE(w->result.ok()) << w->result.status();
    return w->result.ok() ? w->result->min_clock : -1;
  }

  std::atomic<int> applying_{0};
  absl::Mutex mu_;
  std::vector<std::pair<std::string, int64_t>> applied_ ABSL_GUARDED_BY(mu_);
  ConsistencyGate gate_;
};

TEST_F(ConsistencyGateTest, SyncPullWaitsUntilEveryWorkerFinishedTheClock) {
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SYNC), {1, 2, 3}, 1).ok());
  // Clock 0 needs nothing applied: served at once, even with a deadline already past.
  auto first = gate_.WaitForPull(kJob, 0, absl::InfinitePast());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->min_clock, 0);

  Waiter waiter;
  StartPull(&waiter, 1);
  Advance(1, 1);
  Advance(2, 1);
  EXPECT_TRUE(Applied().empty());
  EXPECT_FALSE(waiter.done.HasBeenNotified());  // worker 3 is still at clock 0
  Advance(3, 1);
  EXPECT_EQ(Applied(), AppliedClocks({0}));
  EXPECT_EQ(Released(&waiter), 1);

  // Clock 1 is not finished: a pull at 2 runs into its deadline, naming who holds it back.
  Advance(2, 2);
  auto late = gate_.WaitForPull(kJob, 2, absl::Now() + absl::Milliseconds(100));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded) << late.status();
  EXPECT_TRUE(Contains(late.status(), "worker(s) 1,3 at clock 1")) << late.status();
  EXPECT_TRUE(Contains(late.status(), "pull at clock 2")) << late.status();
  EXPECT_EQ(Applied(), AppliedClocks({0}));
}

TEST_F(ConsistencyGateTest, SyncAppliesEachClockOnceAndInOrderUnderConcurrentAdvances) {
  constexpr int kWorkers = 4;
  constexpr int kClocks = 50;
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SYNC), {0, 1, 2, 3}, 1).ok());
  std::vector<std::thread> threads;
  for (uint32_t w = 0; w < kWorkers; ++w) {
    threads.emplace_back([this, w] {
      for (int64_t c = 1; c <= kClocks; ++c) {
        auto min = gate_.AdvanceClock(kJob, w, c);
        if (!min.ok()) ADD_FAILURE() << min.status();
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<int64_t> want;
  for (int64_t c = 0; c < kClocks; ++c) want.push_back(c);
  EXPECT_EQ(Applied(), AppliedClocks(want));
  auto ticket = gate_.WaitForPull(kJob, kClocks, absl::InfinitePast());
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  EXPECT_EQ(ticket->min_clock, kClocks);
}

TEST_F(ConsistencyGateTest, SspServesWithinStalenessAndOtherwiseNamesTheSlowestWorker) {
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SSP, 2), {1, 2}, 1).ok());
  for (int64_t c = 1; c <= 3; ++c) Advance(1, c);
  // Worker 2 is at 0: clock 2 is within staleness 2 and served at once.
  auto ok = gate_.WaitForPull(kJob, 2, absl::InfinitePast());
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->min_clock, 0);
  // Clock 3 is not.
  auto late = gate_.WaitForPull(kJob, 3, absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded) << late.status();
  EXPECT_TRUE(Contains(late.status(), "worker(s) 2 at clock 0")) << late.status();

  Waiter waiter;
  StartPull(&waiter, 3);
  Advance(2, 1);
  EXPECT_EQ(Released(&waiter), 1);
  EXPECT_TRUE(Applied().empty()) << "ssp applies on arrival, never by clock";
}

TEST_F(ConsistencyGateTest, AsyncNeverWaits) {
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::ASYNC), {1, 2}, 1).ok());
  auto ticket = gate_.WaitForPull(kJob, 1000, absl::InfinitePast());
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  EXPECT_EQ(ticket->min_clock, 0);
  Advance(1, 1);
  EXPECT_TRUE(gate_.WaitForPull(kJob, 5, absl::InfinitePast()).ok());
  EXPECT_TRUE(Applied().empty());
}

// TryPull answers as WaitForPull would, without ever blocking: the ticket where the pull may be
// served now, nullopt where it would wait, and WaitForPull's errors.
TEST_F(ConsistencyGateTest, TryPullNeverBlocks) {
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SSP, 1), {1, 2}, 1).ok());
  Advance(1, 1);
  Advance(1, 2);
  auto now = gate_.TryPull(kJob, 1);  // worker 2 at 0, within staleness 1
  ASSERT_TRUE(now.ok()) << now.status();
  ASSERT_TRUE(now->has_value());
  EXPECT_EQ((*now)->min_clock, 0);
  auto later = gate_.TryPull(kJob, 2);  // would wait for worker 2
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_FALSE(later->has_value());
  Advance(2, 1);
  later = gate_.TryPull(kJob, 2);
  ASSERT_TRUE(later.ok()) << later.status();
  ASSERT_TRUE(later->has_value());
  EXPECT_EQ((*later)->min_clock, 1);

  EXPECT_EQ(gate_.TryPull(kJob, -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gate_.TryPull("other", 0).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ConsistencyGateTest, UnknownJobIsFailedPrecondition) {
  EXPECT_FALSE(gate_.HasJob(kJob));
  EXPECT_EQ(gate_.CheckPush(kJob, 1, 0).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(gate_.AdvanceClock(kJob, 1, 1).status().code(), absl::StatusCode::kFailedPrecondition);
  auto pull = gate_.WaitForPull(kJob, 0, absl::InfinitePast());
  EXPECT_EQ(pull.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(pull.status(), "not configured")) << pull.status();
}

TEST_F(ConsistencyGateTest, CheckPushRejectsUnknownWorkersAndPushesAheadOrLate) {
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SYNC), {1, 2}, 1).ok());
  absl::Status s = gate_.CheckPush(kJob, 9, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(Contains(s, "worker 9 is not a live worker")) << s;
  EXPECT_TRUE(gate_.CheckPush(kJob, 1, 0).ok());
  s = gate_.CheckPush(kJob, 1, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(Contains(s, "ahead")) << s;
  Advance(1, 1);
  EXPECT_TRUE(gate_.CheckPush(kJob, 1, 1).ok());
  s = gate_.CheckPush(kJob, 1, 0);  // clock 0 of worker 1 is closed in sync mode
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(Contains(s, "late")) << s;

  // SSP takes a late gradient, but not one ahead of the worker's clock.
  ASSERT_TRUE(gate_.Configure("ssp", Spec(ConsistencySpec::SSP, 1), {1}, 1).ok());
  ASSERT_TRUE(gate_.AdvanceClock("ssp", 1, 1).ok());
  EXPECT_TRUE(gate_.CheckPush("ssp", 1, 0).ok());
  EXPECT_EQ(gate_.CheckPush("ssp", 1, 2).code(), absl::StatusCode::kFailedPrecondition);
}

// Dynamic data assignment: a worker's clock follows the data it reads, so it may jump ahead and
// push for any clock; sync has no data clocks.
TEST_F(ConsistencyGateTest, DataClocksMayJumpAndPushAheadOrBehind) {
  ConsistencySpec spec = Spec(ConsistencySpec::SSP, 1);
  spec.set_data_clocks(true);
  ASSERT_TRUE(gate_.Configure(kJob, spec, {1, 2}, 1).ok());
  EXPECT_TRUE(gate_.CheckPush(kJob, 1, 5).ok());
  auto jumped = gate_.AdvanceClock(kJob, 1, 6);
  ASSERT_TRUE(jumped.ok()) << jumped.status();
  EXPECT_EQ(*jumped, 0);  // worker 2 is still at 0
  EXPECT_TRUE(gate_.CheckPush(kJob, 1, 3).ok());
  EXPECT_EQ(gate_.Clocks(kJob).at(1), 6);
  EXPECT_FALSE(gate_.CheckPush(kJob, 1, ConsistencyGate::kMaxClock + 1).ok());
  // The same job configured without data clocks is another consistency.
  EXPECT_EQ(gate_.Configure(kJob, Spec(ConsistencySpec::SSP, 1), {1, 2}, 2).code(),
            absl::StatusCode::kFailedPrecondition);
  ConsistencySpec sync = Spec(ConsistencySpec::SYNC);
  sync.set_data_clocks(true);
  EXPECT_EQ(gate_.Configure("sync", sync, {1}, 1).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ConsistencyGateTest, AdvanceClockMovesAtMostOneClock) {
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SSP, 1), {1, 2}, 1).ok());
  auto jump = gate_.AdvanceClock(kJob, 1, 2);
  EXPECT_EQ(jump.status().code(), absl::StatusCode::kFailedPrecondition) << jump.status();
  EXPECT_TRUE(Contains(jump.status(), "more than one ahead")) << jump.status();
  EXPECT_EQ(gate_.AdvanceClock(kJob, 9, 1).status().code(), absl::StatusCode::kFailedPrecondition);
  Advance(1, 1);
  Advance(2, 1);
  Advance(1, 2);
  // An older or equal clock is a no-op that reports the minimum clock.
  auto again = gate_.AdvanceClock(kJob, 1, 1);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, 1);
  EXPECT_TRUE(gate_.CheckPush(kJob, 1, 2).ok());  // still at clock 2
}

TEST_F(ConsistencyGateTest, LargerEpochRemovesAWorkerSoNobodyWaitsForIt) {
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SYNC), {1, 2}, 1).ok());
  Waiter waiter;
  StartPull(&waiter, 1);
  Advance(1, 1);
  EXPECT_FALSE(waiter.done.HasBeenNotified());
  // Worker 2 dies; the new membership leaves it out.
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SYNC), {1}, 2).ok());
  EXPECT_EQ(Released(&waiter), 1);
  EXPECT_EQ(Applied(), AppliedClocks({0}));
  EXPECT_EQ(gate_.CheckPush(kJob, 2, 0).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(gate_.AdvanceClock(kJob, 2, 1).status().code(), absl::StatusCode::kFailedPrecondition);
  // A worker that joins later starts at the job's clock.
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SYNC), {1, 5}, 3).ok());
  EXPECT_TRUE(gate_.CheckPush(kJob, 5, 1).ok());
  Advance(1, 2);
  Advance(5, 2);
  EXPECT_EQ(Applied(), AppliedClocks({0, 1}));
}

TEST_F(ConsistencyGateTest, SspLargerEpochRemovesAWorker) {
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SSP, 0), {1, 2}, 1).ok());
  Advance(1, 1);
  Waiter waiter;
  StartPull(&waiter, 1);
  EXPECT_FALSE(waiter.done.HasBeenNotified());
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SSP, 0), {1}, 2).ok());
  EXPECT_EQ(Released(&waiter), 1);
}

// A worker added to an ssp job with a larger epoch joins at the job's minimum clock, not at 0
// (which would hold every pull back while it climbs).
TEST_F(ConsistencyGateTest, SspWorkerAddedLaterStartsAtTheMinimumClock) {
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SSP, 0), {1}, 1).ok());
  for (int64_t c = 1; c <= 3; ++c) Advance(1, c);
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SSP, 0), {1, 2}, 2).ok());
  EXPECT_TRUE(gate_.CheckPush(kJob, 2, 3).ok());
  EXPECT_TRUE(gate_.WaitForPull(kJob, 3, absl::InfinitePast()).ok());
}

TEST_F(ConsistencyGateTest, SameEpochMustKeepTheWorkerSetAndMode) {
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SYNC), {1, 2}, 4).ok());
  Advance(1, 1);
  // Repeating the same configuration is a no-op (worker 1 keeps its clock).
  EXPECT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SYNC), {2, 1}, 4).ok());
  EXPECT_TRUE(gate_.CheckPush(kJob, 1, 1).ok());
  absl::Status s = gate_.Configure(kJob, Spec(ConsistencySpec::SYNC), {1, 3}, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(Contains(s, "another worker set")) << s;
  s = gate_.Configure(kJob, Spec(ConsistencySpec::SYNC), {1}, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(Contains(s, "older")) << s;
  s = gate_.Configure(kJob, Spec(ConsistencySpec::ASYNC), {1, 2}, 5);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(Contains(s, "consistency mode")) << s;
  // Nothing changed: worker 2 still holds clock 0 back.
  EXPECT_TRUE(Applied().empty());
  EXPECT_TRUE(gate_.CheckPush(kJob, 2, 0).ok());
}

TEST_F(ConsistencyGateTest, ConfigureRejectsBadInput) {
  absl::Status s = gate_.Configure(kJob, Spec(ConsistencySpec::SSP, -1), {1}, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(Contains(s, "staleness")) << s;
  s = gate_.Configure(kJob, Spec(ConsistencySpec::SYNC), {1, 2, 1}, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(Contains(s, "worker id 1 is listed twice")) << s;
  s = gate_.Configure(kJob, Spec(static_cast<ConsistencySpec::Mode>(7)), {1}, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(Contains(s, "mode")) << s;
  EXPECT_EQ(gate_.Configure("", Spec(ConsistencySpec::SYNC), {1}, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(gate_.HasJob(kJob));
}

TEST_F(ConsistencyGateTest, ModeOfAndClockParts) {
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SSP, 3), {1}, 1).ok());
  auto mode = gate_.ModeOf(kJob);
  ASSERT_TRUE(mode.ok());
  EXPECT_EQ(*mode, ConsistencySpec::SSP);
  EXPECT_TRUE(*gate_.CountClockPart(kJob, 1, 0, 1));  // a single part is always the last
  EXPECT_FALSE(*gate_.CountClockPart(kJob, 1, 0, 3));
  EXPECT_FALSE(*gate_.CountClockPart(kJob, 1, 0, 3));
  EXPECT_TRUE(*gate_.CountClockPart(kJob, 1, 0, 3));
  // Counting starts over for the next clock.
  EXPECT_FALSE(*gate_.CountClockPart(kJob, 1, 1, 2));
  EXPECT_TRUE(*gate_.CountClockPart(kJob, 1, 1, 2));
}

namespace ps::consistency_gate_test {
namespace {

// While a push holds CheckPushAndRun, the job's sync clock is not applied: a push that passed
// the clock check always lands in a clock that is still pending.
TEST(ConsistencyGateRaceTest, SyncApplyWaitsForAPushInProgress) {
  std::atomic<int> applied{0};
  ConsistencyGate gate([&](const std::string&, int64_t from, int64_t to) {
    applied.fetch_add(static_cast<int>(to - from));
  });
  v1::ConsistencySpec sync;
  sync.set_mode(v1::ConsistencySpec::SYNC);
  ASSERT_TRUE(gate.Configure("j", sync, {0}, 1).ok());
  absl::Notification in_push, advanced;
  std::thread advancer;
  absl::Status s = gate.CheckPushAndRun("j", 0, 0, 0, [&] {
    // Another request of the same worker advances its clock meanwhile: clock 0 would be
    // applied now, but must wait for this push.
    advancer = std::thread([&] {
      EXPECT_TRUE(gate.AdvanceClock("j", 0, 1).ok());
      advanced.Notify();
    });
    EXPECT_FALSE(advanced.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
    EXPECT_EQ(applied.load(), 0);
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  advancer.join();
  EXPECT_EQ(applied.load(), 1);
}

// Async and ssp jobs apply no clocks: a clock advance never waits for a push in progress.
TEST(ConsistencyGateRaceTest, AsyncAndSspClockAdvancesDoNotWaitForPushes) {
  for (const auto mode : {v1::ConsistencySpec::ASYNC, v1::ConsistencySpec::SSP}) {
    ConsistencyGate gate([](const std::string&, int64_t, int64_t) {});
    v1::ConsistencySpec spec;
    spec.set_mode(mode);
    spec.set_staleness(2);
    ASSERT_TRUE(gate.Configure("j", spec, {0, 1}, 1).ok());
    absl::Notification advanced;
    std::thread advancer;
    absl::Status s = gate.CheckPushAndRun("j", 0, 0, 0, [&] {
      advancer = std::thread([&] {
        EXPECT_TRUE(gate.AdvanceClock("j", 1, 1).ok());
        advanced.Notify();
      });
      // Bounded: without the early return the advance waits until this push is done.
      EXPECT_TRUE(advanced.WaitForNotificationWithTimeout(absl::Seconds(30)))
          << v1::ConsistencySpec::Mode_Name(mode);
      return absl::OkStatus();
    });
    EXPECT_TRUE(s.ok()) << s;
    advancer.join();
  }
}

}  // namespace
}  // namespace ps::consistency_gate_test

namespace ps::consistency_gate_test {
namespace {

TEST_F(ConsistencyGateTest, ResetClocksRollsEveryWorkerBackAndRunsTheResetFirst) {
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SYNC), {1, 2}, 1).ok());
  for (int64_t c = 1; c <= 4; ++c) {
    Advance(1, c);
    Advance(2, c);
  }
  Advance(1, 5);
  auto part = gate_.CountClockPart(kJob, 2, 4, 2);  // one of two parts seen
  ASSERT_TRUE(part.ok());
  EXPECT_FALSE(*part);
  EXPECT_EQ(Applied(), AppliedClocks({0, 1, 2, 3}));

  // A failing reset changes nothing.
  auto failed = gate_.ResetClocks(kJob, 2, [] { return absl::DataLossError("bad"); });
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(gate_.Clocks(kJob), (std::map<uint32_t, int64_t>{{1, 5}, {2, 4}}));

  bool ran = false;
  auto clocks = gate_.ResetClocks(kJob, 2, [&] {
    ran = true;
    return absl::OkStatus();
  });
  ASSERT_TRUE(clocks.ok()) << clocks.status();
  EXPECT_TRUE(ran);
  EXPECT_EQ(*clocks, (std::map<uint32_t, int64_t>{{1, 2}, {2, 2}}));
  // Clock 2 is again the next to apply: a pull at 2 passes, one at 3 waits for both workers.
  EXPECT_TRUE(gate_.WaitForPull(kJob, 2, absl::InfinitePast()).ok());
  EXPECT_EQ(gate_.WaitForPull(kJob, 3, absl::Now()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  // The counted part was dropped: two new parts are needed again.
  EXPECT_FALSE(*gate_.CountClockPart(kJob, 2, 2, 2));
  EXPECT_TRUE(*gate_.CountClockPart(kJob, 2, 2, 2));
  Advance(1, 3);
  Advance(2, 3);
  EXPECT_EQ(Applied(), AppliedClocks({0, 1, 2, 3, 2}));
  EXPECT_EQ(gate_.ResetClocks("nojob", 0).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ConsistencyGateTest, RaiseClockMovesAWorkerUpNeverDown) {
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SSP, 1), {1, 2}, 1).ok());
  ASSERT_TRUE(gate_.RaiseClock(kJob, 1, 7).ok());
  ASSERT_TRUE(gate_.RaiseClock(kJob, 1, 3).ok());
  ASSERT_TRUE(gate_.RaiseClock(kJob, 9, 3).ok());  // not a live worker: ignored
  EXPECT_EQ(gate_.Clocks(kJob), (std::map<uint32_t, int64_t>{{1, 7}, {2, 0}}));
  // The raised worker pushes at its new clock at once.
  EXPECT_TRUE(gate_.CheckPush(kJob, 1, 7).ok());
  EXPECT_FALSE(gate_.RaiseClock("nojob", 1, 1).ok());
}

// A request of an old shard map that got past the server's entry check before the map changed
// cannot move a clock or land a push afterwards (e.g. after a rollback reset the clocks).
TEST_F(ConsistencyGateTest, RequestsOfAnOldShardEpochAreRefused) {
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SYNC), {1, 2}, 1).ok());
  gate_.SetShardEpoch(kJob, 1);
  ASSERT_TRUE(gate_.AdvanceClock(kJob, 1, 1, /*shard_epoch=*/1).ok());
  gate_.SetShardEpoch(kJob, 2);
  gate_.SetShardEpoch(kJob, 1);  // never lowered
  auto stale = gate_.AdvanceClock(kJob, 2, 1, /*shard_epoch=*/1);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(stale.status().message().find("stale shard map epoch 1"), std::string::npos);
  EXPECT_EQ(gate_.CheckPush(kJob, 2, 0, /*shard_epoch=*/1).code(),
            absl::StatusCode::kFailedPrecondition);
  bool ran = false;
  EXPECT_FALSE(gate_
                   .CheckPushAndRun(kJob, 2, 0, 1,
                                    [&] {
                                      ran = true;
                                      return absl::OkStatus();
                                    })
                   .ok());
  EXPECT_FALSE(ran);
  EXPECT_EQ(gate_.Clocks(kJob), (std::map<uint32_t, int64_t>{{1, 1}, {2, 0}}));
  // The current epoch, and requests that carry none, pass.
  EXPECT_TRUE(gate_.CheckPush(kJob, 2, 0, /*shard_epoch=*/2).ok());
  EXPECT_TRUE(gate_.AdvanceClock(kJob, 2, 1, /*shard_epoch=*/0).ok());
}

// A worker that jumps far ahead (ConfigureJob's caller_clock) costs one apply call for the
// whole range, not one per clock; clocks outside 0..kMaxClock are refused before anything moves.
TEST(ConsistencyGateClockBoundsTest, AHugeJumpIsOneApplyAndOutOfRangeClocksAreRefused) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  ConsistencyGate gate(
      [&](const std::string&, int64_t from, int64_t to) { ranges.emplace_back(from, to); });
  v1::ConsistencySpec sync;
  sync.set_mode(v1::ConsistencySpec::SYNC);
  ASSERT_TRUE(gate.Configure("j", sync, {0}, 1).ok());
  const int64_t kMax = ConsistencyGate::kMaxClock;
  for (int64_t bad : {kMax + 1, int64_t{1} << 62, std::numeric_limits<int64_t>::max(), int64_t{-2},
                      std::numeric_limits<int64_t>::min()}) {
    SCOPED_TRACE(bad);
    absl::Status s = gate.RaiseClock("j", 0, bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(s, "caller_clock")) << s;
    EXPECT_EQ(gate.AdvanceClock("j", 0, bad).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(gate.CheckPush("j", 0, bad).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(gate.WaitForPull("j", bad, absl::Now()).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(gate.ResetClocks("j", bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(gate.Clocks("j").at(0), 0);
  EXPECT_TRUE(ranges.empty());

  const absl::Time start = absl::Now();
  ASSERT_TRUE(gate.RaiseClock("j", 0, kMax).ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0], std::make_pair(int64_t{0}, kMax));
  EXPECT_TRUE(gate.CheckPush("j", 0, kMax).ok());
  EXPECT_TRUE(gate.WaitForPull("j", kMax, absl::Now()).ok());
  // One past the bound is refused, whatever the worker's clock.
  EXPECT_EQ(gate.AdvanceClock("j", 0, kMax + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps::consistency_gate_test

namespace ps::consistency_gate_test {
namespace {

// DropJob wakes the job's waiting pulls with FAILED_PRECONDITION, and refuses what still holds
// the job; another job's clocks and pulls go on.
TEST(ConsistencyGateDropTest, WakesWaitingPullsAndLeavesOtherJobsAlone) {
  ConsistencyGate gate([](const std::string&, int64_t, int64_t) {});
  v1::ConsistencySpec sync;
  sync.set_mode(v1::ConsistencySpec::SYNC);
  ASSERT_TRUE(gate.Configure("j", sync, {1, 2}, 1).ok());
  ASSERT_TRUE(gate.Configure("other", sync, {1}, 1).ok());
  absl::StatusOr<ConsistencyGate::PullTicket> waited;
  absl::Notification done;
  std::thread puller([&] {
    waited = gate.WaitForPull("j", 1, absl::Now() + absl::Seconds(60));
    done.Notify();
  });
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(50)));  // worker 2 is at 0
  gate.DropJob("j");
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  puller.join();
  EXPECT_EQ(waited.status().code(), absl::StatusCode::kFailedPrecondition) << waited.status();
  EXPECT_TRUE(Contains(waited.status(), "job 'j' was dropped")) << waited.status();

  EXPECT_FALSE(gate.HasJob("j"));
  EXPECT_TRUE(gate.Clocks("j").empty());
  EXPECT_EQ(gate.CheckPush("j", 1, 0).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(gate.AdvanceClock("j", 1, 1).status().code(), absl::StatusCode::kFailedPrecondition);
  gate.DropJob("j");  // idempotent
  ASSERT_TRUE(gate.AdvanceClock("other", 1, 1).ok());
  EXPECT_TRUE(gate.WaitForPull("other", 1, absl::Now() + absl::Seconds(60)).ok());
}

// A push past its checks holds the job: DropJob waits for it, and a push of the job that comes
// after the drop (holding the job found before) is refused without running.
TEST(ConsistencyGateDropTest, WaitsForAPushInProgressAndRefusesLaterOnes) {
  ConsistencyGate gate([](const std::string&, int64_t, int64_t) {});
  v1::ConsistencySpec async;
  async.set_mode(v1::ConsistencySpec::ASYNC);
  ASSERT_TRUE(gate.Configure("j", async, {1}, 1).ok());
  absl::Notification dropped;
  std::thread dropper;
  absl::Status s = gate.CheckPushAndRun("j", 1, 0, 0, [&] {
    dropper = std::thread([&] {
      gate.DropJob("j");
      dropped.Notify();
    });
    EXPECT_FALSE(dropped.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  dropper.join();
  EXPECT_TRUE(dropped.HasBeenNotified());
  bool ran = false;
  s = gate.CheckPushAndRun("j", 1, 0, 0, [&] {
    ran = true;
    return absl::OkStatus();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace ps::consistency_gate_test

// Failover catch-up: this server applied clock 2 before it took slots over whose copies hold
// clock 1; both workers owe a re-send of clock 2, pulls past it wait for both, and once both
// arrived clock 2 is applied again (for the taken-over slots' sums) exactly once.
namespace catch_up {

using ConsistencyGateCatchUpTest = ConsistencyGateTest;

TEST_F(ConsistencyGateCatchUpTest, PullsPastTheClockWaitForEveryOwedResendThenItIsAppliedOnce) {
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SYNC), {0, 1}, 1).ok());
  for (int64_t c = 1; c <= 3; ++c) {
    Advance(0, c);
    Advance(1, c);
  }
  ASSERT_EQ(Applied(), AppliedClocks({0, 1, 2}));
  ASSERT_TRUE(gate_.BeginCatchUp(kJob, 2, std::vector<bool>(4, true)).ok());
  EXPECT_EQ(gate_.CatchUpClock(kJob), 2);
  EXPECT_EQ(gate_.CatchUpSlots(kJob), std::vector<bool>(4, true));
  auto ready = gate_.TryPull(kJob, 3);
  ASSERT_TRUE(ready.ok());
  EXPECT_FALSE(ready->has_value()) << "a pull past the clock being caught up must wait";
  EXPECT_TRUE(gate_.TryPull(kJob, 2)->has_value());

  int calls = 0;
  auto ran = gate_.ResendAndRun(kJob, 0, 2, 1, 0, [&]() -> absl::StatusOr<bool> {
    ++calls;
    return true;
  });
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_TRUE(*ran);
  // The same worker again (another request id): it owes nothing any more, nothing runs.
  ran = gate_.ResendAndRun(kJob, 0, 2, 1, 0, [&]() -> absl::StatusOr<bool> {
    ++calls;
    return true;
  });
  ASSERT_TRUE(ran.ok());
  EXPECT_FALSE(*ran);
  // Another clock than the one caught up: ignored.
  ran = gate_.ResendAndRun(kJob, 1, 1, 1, 0, [&]() -> absl::StatusOr<bool> {
    ++calls;
    return true;
  });
  ASSERT_TRUE(ran.ok());
  EXPECT_FALSE(*ran);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(gate_.TryPull(kJob, 3)->has_value());
  EXPECT_EQ(Applied(), AppliedClocks({0, 1, 2}));

  ran = gate_.ResendAndRun(kJob, 1, 2, 1, 0, [&]() -> absl::StatusOr<bool> {
    ++calls;
    return true;
  });
  ASSERT_TRUE(ran.ok());
  EXPECT_TRUE(*ran);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(Applied(), AppliedClocks({0, 1, 2, 2}));  // the caught-up sums, once
  EXPECT_TRUE(gate_.TryPull(kJob, 3)->has_value());
  EXPECT_EQ(gate_.CatchUpClock(kJob), -1);
}

// A worker that had not pushed the clock here yet owes no re-send (it pushes the clock under
// the new map); the clock is not applied before the owed re-send arrived, then once.
TEST_F(ConsistencyGateCatchUpTest, AClockNotAppliedYetWaitsForTheOwedResend) {
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SYNC), {0, 1}, 1).ok());
  Advance(0, 1);
  Advance(1, 1);
  Advance(0, 2);  // worker 0 pushed clock 1 here, worker 1 not yet
  ASSERT_EQ(Applied(), AppliedClocks({0}));
  ASSERT_TRUE(gate_.BeginCatchUp(kJob, 1, std::vector<bool>(4, true)).ok());
  Advance(1, 2);  // worker 1's push of clock 1 under the new map
  EXPECT_EQ(Applied(), AppliedClocks({0})) << "clock 1 waits for worker 0's re-send";
  EXPECT_FALSE(gate_.TryPull(kJob, 2)->has_value());
  // A part of two: not done yet.
  int calls = 0;
  auto part = [&]() -> absl::StatusOr<bool> {
    ++calls;
    return true;
  };
  ASSERT_TRUE(*gate_.ResendAndRun(kJob, 0, 1, 2, 0, part));
  EXPECT_EQ(Applied(), AppliedClocks({0}));
  // A repeated request (the deduper says so): not counted.
  ASSERT_TRUE(
      *gate_.ResendAndRun(kJob, 0, 1, 2, 0, []() -> absl::StatusOr<bool> { return false; }));
  EXPECT_EQ(Applied(), AppliedClocks({0}));
  ASSERT_TRUE(*gate_.ResendAndRun(kJob, 0, 1, 2, 0, part));
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(Applied(), AppliedClocks({0, 1}));
  EXPECT_TRUE(gate_.TryPull(kJob, 2)->has_value());
}

// A worker that leaves the job owes nothing; a rollback ends the catch-up.
TEST_F(ConsistencyGateCatchUpTest, AWorkerThatLeavesOrARollbackEndsItAndStaleCopiesAreRefused) {
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SYNC), {0, 1}, 1).ok());
  Advance(0, 1);
  Advance(1, 1);
  ASSERT_TRUE(gate_.BeginCatchUp(kJob, 0, std::vector<bool>(4, true)).ok());
  ASSERT_TRUE(*gate_.ResendAndRun(kJob, 0, 0, 1, 0, []() -> absl::StatusOr<bool> { return true; }));
  EXPECT_FALSE(gate_.TryPull(kJob, 1)->has_value());
  ASSERT_TRUE(gate_.Configure(kJob, Spec(ConsistencySpec::SYNC), {0}, 2).ok());  // 1 left
  EXPECT_TRUE(gate_.TryPull(kJob, 1)->has_value());
  EXPECT_EQ(gate_.CatchUpClock(kJob), -1);

  ASSERT_TRUE(gate_.BeginCatchUp(kJob, 0, std::vector<bool>(4, true)).ok());
  EXPECT_EQ(gate_.CatchUpClock(kJob), 0);
  ASSERT_TRUE(gate_.ResetClocks(kJob, 0).ok());
  EXPECT_EQ(gate_.CatchUpClock(kJob), -1);
  // No worker past the clock: nothing is owed, no catch-up begins.
  ASSERT_TRUE(gate_.BeginCatchUp(kJob, 3, std::vector<bool>(4, true)).ok());
  EXPECT_EQ(gate_.CatchUpClock(kJob), -1);
  // Copies more than one clock behind a worker (a backup left out): refused, nothing begun.
  Advance(0, 1);
  Advance(0, 2);
  EXPECT_EQ(gate_.BeginCatchUp(kJob, 0, std::vector<bool>(4, true)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(gate_.CatchUpClock(kJob), -1);
  EXPECT_TRUE(gate_.TryPull(kJob, 2)->has_value());
}

}  // namespace catch_up

}  // namespace
}  // namespace ps::consistency_gate_test
