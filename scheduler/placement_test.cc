// Placement decided from snapshots alone: no scheduler, clock, lock or state store.
#include "scheduler/placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

PlacementNode Server(uint64_t id, bool alive = true, bool draining = false) {
  PlacementNode n;
  n.id = id;
  n.server = true;
  n.alive = alive;
  n.draining = draining;
  return n;
}

PlacementNode Worker(uint64_t id, bool in_job = false, bool alive = true) {
  PlacementNode n;
  n.id = id;
  n.alive = alive;
  n.in_job = in_job;
  return n;
}

PlacementJob Pending(uint64_t number, int workers, int servers) {
  PlacementJob j;
  j.number = number;
  j.num_workers = workers;
  j.num_servers = servers;
  return j;
}

PlacementJob Running(uint64_t number, int wanted, int has, std::vector<uint64_t> servers) {
  PlacementJob j = Pending(number, wanted, static_cast<int>(servers.size()));
  j.running = true;
  j.workers = has;
  j.server_nodes = std::move(servers);
  return j;
}

TEST(PlacementTest, APendingJobGetsTheLowestIdleWorkersAndAsManyServers) {
  const Placement p = Place({Server(2), Server(1), Server(3), Worker(12), Worker(10), Worker(11)},
                            {Pending(1, 2, 2)});
  ASSERT_EQ(p.starts.count(1), 1u);
  EXPECT_THAT(p.starts.at(1).servers, ElementsAre(1, 2));
  EXPECT_THAT(p.starts.at(1).workers, ElementsAre(10, 11));
  EXPECT_EQ(p.idle_left, 1u);
  EXPECT_EQ(p.servers_available, 3u);
}

TEST(PlacementTest, ZeroServersMeansEveryAvailableOne) {
  const Placement p = Place({Server(1), Server(2), Server(3, /*alive=*/false),
                             Server(4, true, /*draining=*/true), Worker(10)},
                            {Pending(1, 1, 0)});
  ASSERT_EQ(p.starts.count(1), 1u);
  EXPECT_THAT(p.starts.at(1).servers, ElementsAre(1, 2));
}

TEST(PlacementTest, DeadBusyAndDrainingNodesAreNotPlaced) {
  const Placement p = Place({Server(1, false), Server(2, true, true), Worker(10, /*in_job=*/true),
                             Worker(11, false, /*alive=*/false)},
                            {Pending(1, 1, 1)});
  EXPECT_THAT(p.starts, IsEmpty());
  EXPECT_EQ(p.idle_left, 0u);
  EXPECT_EQ(p.servers_available, 0u);
}

TEST(PlacementTest, RunningJobsShortOfWorkersComeBeforePendingOnes) {
  // Job 2 runs with 1 of 3 workers; job 1 (older, pending) waits for 2: the replacements win.
  const Placement p =
      Place({Server(1), Worker(10), Worker(11)}, {Pending(1, 2, 1), Running(2, 3, 1, {1})});
  EXPECT_THAT(p.joins.at(2), ElementsAre(10, 11));
  EXPECT_THAT(p.starts, IsEmpty());
  EXPECT_EQ(p.idle_left, 0u);
}

TEST(PlacementTest, AJobThatCannotStartDoesNotHoldBackASmallerLaterOne) {
  const Placement p =
      Place({Server(1), Worker(10), Worker(11)}, {Pending(1, 3, 1), Pending(2, 2, 1)});
  EXPECT_EQ(p.starts.count(1), 0u);
  ASSERT_EQ(p.starts.count(2), 1u);
  EXPECT_THAT(p.starts.at(2).workers, ElementsAre(10, 11));
}

TEST(PlacementTest, PendingJobsStartInSubmitOrderWhateverTheSnapshotsOrder) {
  const Placement p =
      Place({Server(1), Worker(10), Worker(11)}, {Pending(7, 1, 1), Pending(3, 1, 1)});
  EXPECT_THAT(p.starts.at(3).workers, ElementsAre(10));
  EXPECT_THAT(p.starts.at(7).workers, ElementsAre(11));
}

TEST(PlacementTest, ServersAreTheLeastLoadedCountingThisRoundsStarts) {
  // Server 1 serves a running job. Job 2 takes the two least loaded (2 and 3); job 3 then finds
  // 1, 2 and 3 each serving one job and takes the lowest ids.
  const Placement p = Place({Server(1), Server(2), Server(3), Worker(10), Worker(11), Worker(12)},
                            {Running(1, 1, 1, {1}), Pending(2, 1, 2), Pending(3, 1, 2)});
  EXPECT_THAT(p.starts.at(2).servers, ElementsAre(2, 3));
  EXPECT_THAT(p.starts.at(3).servers, ElementsAre(1, 2));
}

TEST(PlacementTest, AJobThatFailsAtStartTakesNoNodesAndOnlyWhenItsTurnComes) {
  PlacementJob broken = Pending(1, 1, 1);
  broken.fails_at_start = true;
  const Placement p = Place({Server(1), Worker(10)}, {broken, Pending(2, 1, 1)});
  EXPECT_THAT(p.failures, ElementsAre(1));
  EXPECT_THAT(p.starts.at(2).workers, ElementsAre(10));

  // Without the nodes it would need, it stays pending.
  const Placement waiting = Place({Server(1)}, {broken});
  EXPECT_THAT(waiting.failures, IsEmpty());
}

TEST(PlacementTest, ASpareIsAnAvailableServerOutsideTheJobTheLeastLoaded) {
  const std::vector<PlacementNode> nodes = {Server(1), Server(2), Server(3), Server(4),
                                            Server(5, true, /*draining=*/true)};
  const std::vector<PlacementJob> jobs = {Running(1, 1, 1, {1, 2}), Running(2, 1, 1, {3})};
  EXPECT_EQ(ChooseSpare(nodes, jobs, {1, 2}), 4u);
  EXPECT_EQ(ChooseSpare(nodes, jobs, {1, 2, 4}), 3u);
  EXPECT_EQ(ChooseSpare(nodes, jobs, {1, 2, 3, 4}), 0u);  // 5 drains
}

TEST(PlacementTest, ServerLoadCountsRunningJobsOnly) {
  const std::map<uint64_t, int> load =
      ServerLoad({Running(1, 1, 1, {1, 2}), Running(2, 1, 1, {2}), Pending(3, 1, 1)});
  EXPECT_EQ(load.at(1), 1);
  EXPECT_EQ(load.at(2), 2);
  EXPECT_EQ(load.count(3), 0u);
}

// Backups: never on the primary, and one server's slots fall back on every other server evenly.
TEST(PlacementTest, BackupsAvoidThePrimaryAndSpreadOverTheOthers) {
  constexpr int kSlots = 1024;
  for (int n : {2, 3, 4, 7}) {
    std::vector<int> owners(kSlots);
    for (int s = 0; s < kSlots; ++s) owners[s] = s % n;
    const std::vector<uint32_t> backups = BackupOwners(owners, n);
    ASSERT_EQ(backups.size(), owners.size());
    std::vector<std::vector<int>> per(n, std::vector<int>(n, 0));  // [primary][backup]
    for (int s = 0; s < kSlots; ++s) {
      ASSERT_LT(backups[s], static_cast<uint32_t>(n));
      EXPECT_NE(static_cast<int>(backups[s]), owners[s]) << "slot " << s;
      ++per[owners[s]][backups[s]];
    }
    for (int p = 0; p < n; ++p) {
      int lo = kSlots, hi = 0;
      for (int b = 0; b < n; ++b) {
        if (b == p) continue;
        lo = std::min(lo, per[p][b]);
        hi = std::max(hi, per[p][b]);
      }
      EXPECT_LE(hi - lo, 1) << n << " servers, primary " << p;
    }
  }
  // Unequal owners (slots moved after a death) still never back up on themselves.
  std::vector<int> owners(kSlots, 0);
  for (int s = 0; s < kSlots; s += 3) owners[s] = 2;
  const std::vector<uint32_t> backups = BackupOwners(owners, 3);
  for (int s = 0; s < kSlots; ++s) EXPECT_NE(static_cast<int>(backups[s]), owners[s]) << s;
}

}  // namespace
}  // namespace ps
