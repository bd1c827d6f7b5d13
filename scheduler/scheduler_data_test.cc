// Dynamic data assignment at the scheduler: ranges handed out as workers ask, each read once per
// epoch, across a worker's death and a restart of the scheduler (a real RocksDB, a fake clock).
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/data_ledger.h"
#include "scheduler/internal/scheduler_fixture.h"
#include "scheduler/scheduler.h"
#include "client/data_ranges.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kExamples = 100;
constexpr int32_t kBatch = 8;  // 13 ranges per epoch, the last of 4 examples
constexpr uint64_t kSeed = 3;

class DataLeaseTest : public SchedulerFixture {
 protected:
  std::string SubmitDynamic(int num_workers, int epochs) {
    v1::JobSpec spec;
    spec.set_model("fashion_mlp");
    spec.set_num_workers(num_workers);
    spec.set_num_servers(1);
    spec.set_epochs(epochs);
    spec.set_batch_size(kBatch);
    spec.set_seed(kSeed);
    spec.set_data_dir(dir_.path());
    spec.mutable_consistency()->set_mode(v1::ConsistencySpec::ASYNC);
    auto id = scheduler_->SubmitJob(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : "";
  }

  absl::StatusOr<v1::LeaseDataResponse> Lease(const std::string& job, uint64_t node,
                                              uint32_t worker, std::vector<uint64_t> finished,
                                              bool take = true) {
    v1::LeaseDataRequest req;
    req.set_job_id(job);
    req.set_node_id(node);
    req.set_node_secret(Secret(node));
    req.set_worker_id(worker);
    req.set_examples_per_epoch(kExamples);
    req.set_batch_size(kBatch);
    req.mutable_finished()->Assign(finished.begin(), finished.end());
    req.set_take(take);
    return scheduler_->LeaseData(req);
  }

  // Each epoch's examples read by finished ranges, counted.
  std::map<int, std::map<int64_t, int>> reads_;
  void Read(const v1::DataRange& range) {
    for (int64_t e : RangeExamples(kSeed, range.epoch(), kExamples, kBatch, range.position())) {
      ++reads_[range.epoch()][e];
    }
  }
  void ExpectEveryExampleReadOncePerEpoch(int epochs) {
    ASSERT_EQ(static_cast<int>(reads_.size()), epochs);
    for (const auto& [epoch, counts] : reads_) {
      EXPECT_EQ(counts.size(), static_cast<size_t>(kExamples)) << "epoch " << epoch;
      for (const auto& [example, n] : counts) {
        EXPECT_EQ(n, 1) << "example " << example << " of epoch " << epoch;
      }
    }
  }
};

TEST_F(DataLeaseTest, AFastWorkerReadsMoreAndEveryExampleOncePerEpoch) {
  const uint64_t server = Register(v1::SERVER);
  const uint64_t n0 = Register(v1::WORKER);
  const uint64_t n1 = Register(v1::WORKER);
  const std::string job = SubmitDynamic(2, 2);
  Heartbeat(n0);
  Heartbeat(n1);
  (void)server;
  // Worker 0 takes three ranges for each of worker 1's.
  std::map<uint32_t, std::vector<uint64_t>> done;
  std::map<uint32_t, int> taken;
  std::map<uint32_t, v1::DataRange> held;
  bool all_done = false;
  for (int turn = 0; !all_done && turn < 1000; ++turn) {
    const uint32_t w = turn % 4 == 3 ? 1 : 0;
    auto resp = Lease(job, w == 0 ? n0 : n1, w, done[w]);
    ASSERT_TRUE(resp.ok()) << resp.status();
    done[w].clear();
    all_done = resp->all_done();
    if (!resp->has_range()) continue;
    const v1::DataRange& r = resp->range();
    EXPECT_EQ(r.clock(), static_cast<int64_t>(r.index() / 2));
    EXPECT_EQ(r.epoch(), static_cast<int>(r.index() / 13) + 1);
    EXPECT_EQ(resp->total_clocks(), 13);  // 26 ranges, 2 per clock
    Read(r);
    done[w].push_back(r.index());
    ++taken[w];
  }
  ASSERT_TRUE(all_done);
  EXPECT_EQ(taken[0] + taken[1], 26);
  EXPECT_GT(taken[0], 2 * taken[1]);
  ExpectEveryExampleReadOncePerEpoch(2);
  const v1::JobInfo info = Job(job);
  EXPECT_EQ(info.data().done(), 26u);
  EXPECT_TRUE(HasEventStartingWith(info, "data: epoch 1 of 2 read"));
}

TEST_F(DataLeaseTest, ALostWorkersRangesAreReadByAnotherAcrossASchedulerRestart) {
  const uint64_t server = Register(v1::SERVER);
  const uint64_t n0 = Register(v1::WORKER);
  const uint64_t n1 = Register(v1::WORKER);
  const std::string job = SubmitDynamic(2, 3);
  Heartbeat(n0);
  Heartbeat(n1);
  // Worker 1 takes two ranges and finishes one of them, then goes silent.
  auto a = Lease(job, n1, 1, {});
  ASSERT_TRUE(a.ok()) << a.status();
  Read(a->range());
  auto b = Lease(job, n1, 1, {a->range().index()});
  ASSERT_TRUE(b.ok()) << b.status();
  const v1::DataRange lost = b->range();  // never finished: read again by worker 0
  // Worker 0 reads on; the scheduler restarts in the middle (its ledger is in the state store).
  std::vector<uint64_t> finished;
  for (int i = 0; i < 10; ++i) {
    auto r = Lease(job, n0, 0, finished);
    ASSERT_TRUE(r.ok()) << r.status();
    Read(r->range());
    finished = {r->range().index()};
  }
  Reopen();
  KillNode(n1, {server, n0});
  // The dead worker's lease is gone: its answers are refused, its range handed out again.
  auto refused = Lease(job, n1, 1, {lost.index()});
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("was it declared dead"));
  bool all_done = false;
  bool reread = false;
  while (!all_done) {
    auto r = Lease(job, n0, 0, finished);
    ASSERT_TRUE(r.ok()) << r.status();
    finished.clear();
    all_done = r->all_done();
    if (!r->has_range()) continue;
    reread = reread || r->range().index() == lost.index();
    Read(r->range());
    finished = {r->range().index()};
  }
  EXPECT_TRUE(reread);
  ExpectEveryExampleReadOncePerEpoch(3);
  const v1::JobInfo info = Job(job);
  EXPECT_EQ(info.data().done(), 39u);
  EXPECT_EQ(info.data().reissued(), 1u);
  EXPECT_TRUE(HasEvent(info, "data: 1 range of worker 1 handed out again"));
}

// A worker whose run starts again (after a server loss) gets back nothing of what it held: those
// ranges are handed out again, so none stays held by a run that forgot it.
TEST_F(DataLeaseTest, ARestartingRunGivesBackWhatItHeld) {
  Register(v1::SERVER);
  const uint64_t n0 = Register(v1::WORKER);
  const std::string job = SubmitDynamic(1, 1);
  Heartbeat(n0);
  auto a = Lease(job, n0, 0, {});
  auto b = Lease(job, n0, 0, {});
  ASSERT_TRUE(a.ok() && b.ok());
  v1::LeaseDataRequest again;
  again.set_job_id(job);
  again.set_node_id(n0);
  again.set_node_secret(Secret(n0));
  again.set_examples_per_epoch(kExamples);
  again.set_batch_size(kBatch);
  again.set_take(true);
  again.set_restart(true);
  auto c = scheduler_->LeaseData(again);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->range().index(), a->range().index());
  const v1::JobInfo info = Job(job);
  ASSERT_EQ(info.data().leased_size(), 1);
  EXPECT_EQ(info.data().returned_size(), 1);
  EXPECT_EQ(info.data().reissued(), 1u);
}

TEST_F(DataLeaseTest, BadRequestsAreRefusedAndChangeNothing) {
  Register(v1::SERVER);
  const uint64_t n0 = Register(v1::WORKER);
  const std::string job = SubmitDynamic(1, 1);
  Heartbeat(n0);
  auto first = Lease(job, n0, 0, {});
  ASSERT_TRUE(first.ok()) << first.status();
  // Another shape of the data.
  v1::LeaseDataRequest other;
  other.set_job_id(job);
  other.set_node_id(n0);
  other.set_node_secret(Secret(n0));
  other.set_examples_per_epoch(kExamples + 1);
  other.set_batch_size(kBatch);
  other.set_take(true);
  auto shape = scheduler_->LeaseData(other);
  EXPECT_TRUE(absl::IsInvalidArgument(shape.status())) << shape.status();
  EXPECT_THAT(std::string(shape.status().message()), HasSubstr("every worker must see the same"));
  // Not the node's worker id; an unknown job; a finished range it never held.
  EXPECT_TRUE(absl::IsFailedPrecondition(Lease(job, n0, 7, {}).status()));
  EXPECT_TRUE(absl::IsNotFound(Lease("job-99", n0, 0, {}).status()));
  // A report of more ranges than any worker holds is refused before anything is looked at.
  auto flood = Lease(job, n0, 0, std::vector<uint64_t>(1025, 0));
  EXPECT_TRUE(absl::IsInvalidArgument(flood.status())) << flood.status();
  EXPECT_EQ(Job(job).data().leased_size(), 1);
  auto ignored = Lease(job, n0, 0, {12345}, /*take=*/false);
  ASSERT_TRUE(ignored.ok()) << ignored.status();
  EXPECT_EQ(ignored->done(), 0u);
  EXPECT_EQ(Job(job).data().leased_size(), 1);
  // A sync job reads by static assignment: no lease.
  v1::JobSpec sync;
  sync.set_model("fashion_mlp");
  sync.set_num_workers(1);
  sync.set_data_dir(dir_.path());
  sync.set_data_assignment(v1::DYNAMIC);
  auto refused = scheduler_->SubmitJob(sync);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("needs consistency ssp or async"));
}

TEST(DataLedgerTest, RollbackReadsOnFromTheCheckpointsClock) {
  v1::DataLedger ledger;
  ASSERT_TRUE(InitLedger(kExamples, kBatch, 2, 2, /*start_clock=*/0, &ledger).ok());
  for (int i = 0; i < 9; ++i) {
    auto r = TakeRange(i % 2, &ledger);
    ASSERT_TRUE(r.has_value());
    const uint64_t index = r->index();
    FinishRanges(i % 2, {&index, 1}, &ledger);
  }
  EXPECT_EQ(ledger.done(), 9u);
  ResetLedger(/*clock=*/3, &ledger);
  EXPECT_EQ(ledger.done(), 6u);
  EXPECT_EQ(TakeRange(0, &ledger)->index(), 6u);
  EXPECT_EQ(EpochsDone(ledger), 0);
  ResetLedger(/*clock=*/1000, &ledger);
  EXPECT_TRUE(AllDone(ledger));
  EXPECT_EQ(EpochsDone(ledger), 2);
  v1::DataLedger bad;
  EXPECT_FALSE(InitLedger(0, kBatch, 1, 1, 0, &bad).ok());
  EXPECT_FALSE(InitLedger(kExamples, 0, 1, 1, 0, &bad).ok());
  EXPECT_FALSE(InitLedger(kMaxExamplesPerEpoch, 1, 2, 1, 0, &bad).ok());
}

TEST(ShuffledExampleTest, EachEpochIsAPermutationAndEpochsDiffer) {
  for (int64_t n : {1, 2, 3, 7, 100, 1000, 4097}) {
    std::vector<int64_t> first;
    for (int epoch : {1, 2}) {
      std::set<int64_t> seen;
      std::vector<int64_t> order;
      for (int64_t place = 0; place < n; ++place) {
        const int64_t e = ShuffledExample(kSeed, epoch, n, place);
        ASSERT_GE(e, 0);
        ASSERT_LT(e, n);
        seen.insert(e);
        order.push_back(e);
      }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), n) << n << " examples, epoch " << epoch;
      if (epoch == 1) first = order;
      if (epoch == 2 && n >= 7) {
        EXPECT_NE(order, first) << n;
      }
    }
  }
  // Ranges cut the order; the last is short.
  EXPECT_EQ(RangeExamples(kSeed, 1, kExamples, kBatch, 12).size(), 4u);
  EXPECT_TRUE(RangeExamples(kSeed, 1, kExamples, kBatch, 13).empty());
}

}  // namespace
}  // namespace ps
