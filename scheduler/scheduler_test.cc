// The scheduler's logic over a real RocksDB in a temp dir, with a fake clock driving time.
#include "scheduler/scheduler.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/internal/scheduler_fixture.h"

namespace ps {
namespace {

using ::testing::ElementsAre;

class SchedulerTest : public SchedulerFixture {
 protected:
  void Report(uint64_t node_id, const std::string& job_id, bool finished,
              const std::string& error = "", int64_t clock = 0) {
    v1::WorkerProgress progress;
    progress.set_job_id(job_id);
    progress.set_finished(finished);
    progress.set_error(error);
    progress.set_clock(clock);
    Heartbeat(node_id, &progress);
  }

  v1::JobSpec Spec(int num_workers, int num_servers) const {
    v1::JobSpec spec;
    spec.set_model("fashion_mlp");
    spec.set_num_workers(num_workers);
    spec.set_num_servers(num_servers);
    spec.set_data_dir(dir_.path());
    return spec;
  }

  std::string Submit(int num_workers, int num_servers) {
    auto id = scheduler_->SubmitJob(Spec(num_workers, num_servers));
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : "";
  }
};

TEST_F(SchedulerTest, RegisterHeartbeatAndDeadDetection) {
  v1::RegisterRequest req;
  req.set_role(v1::WORKER);
  auto first = scheduler_->Register(req);
  ASSERT_TRUE(first.ok());
  secrets_[first->node_id()] = first->node_secret();
  EXPECT_EQ(first->node_id(), 1u);
  EXPECT_EQ(first->heartbeat_interval_ms(), 1000);
  EXPECT_EQ(first->heartbeat_timeout_ms(), 5000);
  const uint64_t server = Register(v1::SERVER);
  EXPECT_EQ(server, 2u);
  EXPECT_EQ(Node(1).state(), v1::ALIVE);
  EXPECT_EQ(Node(server).address(), "10.0.0.1:7100");

  EXPECT_FALSE(Heartbeat(1).reregister());
  EXPECT_TRUE(Heartbeat(99).reregister());

  Advance(absl::Seconds(4));
  Heartbeat(1);
  Advance(absl::Seconds(4));  // node 1 heard 4 s ago; the server 8 s ago
  EXPECT_EQ(Node(1).state(), v1::ALIVE);
  EXPECT_EQ(Node(server).state(), v1::DEAD);
  EXPECT_TRUE(Heartbeat(server).reregister());
  Advance(absl::Seconds(2));
  EXPECT_EQ(Node(1).state(), v1::DEAD);
  EXPECT_TRUE(Heartbeat(1).reregister());
  EXPECT_EQ(Register(v1::WORKER), 3u);  // ids are never reused
}

// When no node of several is heard for two heartbeat intervals, the scheduler is the one cut
// off: nobody is declared dead, however long it lasts, and the first heartbeat after it gives
// everyone a fresh grace period. A node that dies alone while others heartbeat is still dead.
TEST_F(SchedulerTest, SchedulerCutOffFromEveryoneDeclaresNobodyDead) {
  options_.suspect_own_partition = true;
  Reopen();
  const uint64_t a = Register(v1::WORKER);
  const uint64_t b = Register(v1::WORKER);
  const uint64_t c = Register(v1::WORKER);
  Advance(absl::Milliseconds(500));
  Heartbeat(b);  // heartbeats are staggered: a times out first
  Heartbeat(c);
  for (int i = 0; i < 40; ++i) Advance(absl::Milliseconds(500));  // 20 s of hearing nobody
  EXPECT_EQ(Node(a).state(), v1::ALIVE);
  EXPECT_EQ(Node(b).state(), v1::ALIVE);
  EXPECT_EQ(Node(c).state(), v1::ALIVE);
  EXPECT_FALSE(Heartbeat(b).reregister());  // healed: everyone gets a fresh grace period
  Advance(absl::Seconds(1));
  Heartbeat(a);
  Heartbeat(b);
  EXPECT_EQ(Node(c).state(), v1::ALIVE);
  for (int i = 0; i < 6; ++i) {  // c is really gone: a and b go on heartbeating
    Advance(absl::Seconds(1));
    Heartbeat(a);
    Heartbeat(b);
  }
  EXPECT_EQ(Node(a).state(), v1::ALIVE);
  EXPECT_EQ(Node(c).state(), v1::DEAD);
}

// A worker's error is stored as the job's reason and printed by psctl: escaped and clipped.
TEST_F(SchedulerTest, WorkerErrorIsStoredEscapedAndClipped) {
  Register(v1::SERVER);
  const uint64_t worker = Register(v1::WORKER);
  const std::string job_id = Submit(1, 1);
  ASSERT_EQ(Job(job_id).state(), v1::RUNNING);
  Report(worker, job_id, false, "\x1b[2J\x1b]0;pwned\x07" + std::string(100000, 'x'));
  const v1::JobInfo job = Job(job_id);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_LT(job.reason().size(), 1200u);
  EXPECT_NE(job.reason().find("\\x1b[2J"), std::string::npos) << job.reason().substr(0, 80);
  for (const std::string& text : {job.reason(), job.progress().error()}) {
    for (char c : text) ASSERT_TRUE(c >= 0x20 && c <= 0x7e) << static_cast<int>(c);
  }
  for (const v1::JobEvent& event : job.events()) {
    for (char c : event.message()) ASSERT_TRUE(c >= 0x20 && c <= 0x7e) << event.message();
  }
}

// A data_dir the workers lack is accepted at submit (the scheduler does not probe its own
// disk); the worker's report of the missing data fails the job with that reason.
TEST_F(SchedulerTest, MissingDataDirFailsTheJobByTheWorkersReport) {
  Register(v1::SERVER);
  const uint64_t worker = Register(v1::WORKER);
  v1::JobSpec spec = Spec(1, 1);
  spec.set_data_dir("/nonexistent/ps/data");
  auto job_id = scheduler_->SubmitJob(spec);
  ASSERT_TRUE(job_id.ok()) << job_id.status();
  ASSERT_EQ(Job(*job_id).state(), v1::RUNNING);
  Report(worker, *job_id, false,
         "/nonexistent/ps/data/train-images-idx3-ubyte.gz not found; install the data set");
  const v1::JobInfo job = Job(*job_id);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_NE(job.reason().find("/nonexistent/ps/data/train-images-idx3-ubyte.gz not found"),
            std::string::npos)
      << job.reason();
  EXPECT_TRUE(Node(worker).job_id().empty());  // idle again
}

TEST_F(SchedulerTest, RegisterRejectsBadRequests) {
  v1::RegisterRequest req;
  EXPECT_EQ(scheduler_->Register(req).status().code(), absl::StatusCode::kInvalidArgument);
  req.set_role(v1::SERVER);  // no address
  EXPECT_EQ(scheduler_->Register(req).status().code(), absl::StatusCode::kInvalidArgument);
}

// The same daemon registering again (it shows its secret; see scheduler_nodes_test.cc for
// the others).
TEST_F(SchedulerTest, ServerRegisteringAgainAtItsAddressReplacesItsOldEntry) {
  const uint64_t old_server = Register(v1::SERVER);
  v1::RegisterRequest req;
  req.set_role(v1::SERVER);
  req.set_address(Node(old_server).address());
  req.set_node_secret(Secret(old_server));
  ASSERT_TRUE(scheduler_->Register(req).ok());
  EXPECT_EQ(Node(old_server).state(), v1::DEAD);
}

TEST_F(SchedulerTest, PendingJobSaysWhatItWaitsFor) {
  const uint64_t w1 = Register(v1::WORKER);
  Register(v1::SERVER);
  Register(v1::SERVER);
  const std::string job_id = Submit(2, 1);
  EXPECT_EQ(job_id, "job-1");
  v1::JobInfo job = Job(job_id);
  EXPECT_EQ(job.state(), v1::PENDING);
  EXPECT_EQ(job.reason(), "waiting for 2 idle workers (1 available) and 1 server (2 available)");
  EXPECT_FALSE(Heartbeat(w1).has_assignment());

  const std::string all_servers = Submit(1, 0);  // a later, smaller job may start first
  EXPECT_EQ(Job(all_servers).state(), v1::RUNNING);
  EXPECT_EQ(Job(job_id).reason(),
            "waiting for 2 idle workers (0 available) and 1 server (2 available)");

  const std::string no_servers_yet = Submit(1, 3);
  EXPECT_EQ(Job(no_servers_yet).reason(),
            "waiting for 1 idle worker (0 available) and 3 servers (2 available)");
}

TEST_F(SchedulerTest, StartsJobAndHandsOutAssignments) {
  const uint64_t s1 = Register(v1::SERVER);
  const uint64_t w1 = Register(v1::WORKER);
  const uint64_t w2 = Register(v1::WORKER);
  const uint64_t s2 = Register(v1::SERVER);
  const uint64_t w3 = Register(v1::WORKER);
  const std::string job_id = Submit(2, 0);
  v1::JobInfo job = Job(job_id);
  ASSERT_EQ(job.state(), v1::RUNNING);
  EXPECT_EQ(job.reason(), "");
  EXPECT_THAT(job.server_nodes(), ElementsAre(s1, s2));
  EXPECT_THAT(job.server_addresses(), ElementsAre("10.0.0.1:7100", "10.0.0.2:7100"));
  EXPECT_THAT(job.worker_nodes(), ElementsAre(w1, w2));
  EXPECT_THAT(job.worker_ids(), ElementsAre(0u, 1u));
  EXPECT_EQ(job.next_worker_id(), 2u);
  EXPECT_EQ(job.membership_epoch(), 1u);
  EXPECT_EQ(job.shard_epoch(), 1u);
  EXPECT_EQ(job.spec().batch_size(), 64);  // defaults filled in the stored spec
  EXPECT_EQ(job.spec().epochs(), 1);
  EXPECT_EQ(job.spec().layers_size(), 3);
  EXPECT_GT(job.start_time_unix_ms(), 0);
  EXPECT_TRUE(HasEvent(job, "submitted: fashion_mlp, 2 workers, every live server"));
  EXPECT_TRUE(HasEvent(job,
                       "started: servers node 1 (10.0.0.1:7100), node 4 (10.0.0.2:7100); "
                       "workers node 2 as worker 0, node 3 as worker 1"));
  EXPECT_EQ(Node(w1).job_id(), job_id);

  const v1::HeartbeatResponse resp = Heartbeat(w2);
  ASSERT_TRUE(resp.has_assignment());
  const v1::WorkerAssignment& a = resp.assignment();
  EXPECT_EQ(a.job_id(), job_id);
  EXPECT_EQ(a.spec().model(), "fashion_mlp");
  EXPECT_EQ(a.worker_id(), 1u);
  EXPECT_THAT(a.worker_ids(), ElementsAre(0u, 1u));
  EXPECT_EQ(a.membership_epoch(), 1u);
  EXPECT_EQ(a.rank(), 1u);
  EXPECT_THAT(a.servers(), ElementsAre("10.0.0.1:7100", "10.0.0.2:7100"));
  EXPECT_EQ(a.shard_epoch(), 1u);
  EXPECT_FALSE(Heartbeat(w3).has_assignment());  // idle
  EXPECT_FALSE(Heartbeat(s1).has_assignment());
}

TEST_F(SchedulerTest, PicksTheLeastLoadedServers) {
  const uint64_t s1 = Register(v1::SERVER);
  const uint64_t s2 = Register(v1::SERVER);
  Register(v1::WORKER);
  Register(v1::WORKER);
  EXPECT_THAT(Job(Submit(1, 1)).server_nodes(), ElementsAre(s1));
  EXPECT_THAT(Job(Submit(1, 1)).server_nodes(), ElementsAre(s2));
}

TEST_F(SchedulerTest, WorkerDeathBumpsMembershipEpoch) {
  const uint64_t server = Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const uint64_t w1 = Register(v1::WORKER);
  const uint64_t w2 = Register(v1::WORKER);
  const std::string job_id = Submit(3, 1);
  KillNode(w1, {server, w0, w2});

  v1::JobInfo job = Job(job_id);
  EXPECT_EQ(job.state(), v1::RUNNING);
  EXPECT_THAT(job.worker_nodes(), ElementsAre(w0, w2));
  EXPECT_THAT(job.worker_ids(), ElementsAre(0u, 2u));
  EXPECT_EQ(job.membership_epoch(), 2u);
  EXPECT_EQ(job.reason(), "running with 2 of 3 workers; waiting for idle workers to join");
  EXPECT_TRUE(
      HasEvent(job, absl::StrCat("worker 1 (node ", w1,
                                 ") dead: no heartbeat for 5s; continuing with 2 workers")));
  EXPECT_EQ(Node(w1).job_id(), "");

  const v1::WorkerAssignment a = Heartbeat(w2).assignment();
  EXPECT_EQ(a.worker_id(), 2u);
  EXPECT_THAT(a.worker_ids(), ElementsAre(0u, 2u));
  EXPECT_EQ(a.membership_epoch(), 2u);
  EXPECT_EQ(a.rank(), 1u);
}

TEST_F(SchedulerTest, IdleWorkerJoinsARunningJob) {
  const uint64_t server = Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const uint64_t w1 = Register(v1::WORKER);
  const std::string job_id = Submit(2, 1);
  KillNode(w0, {server, w1});
  EXPECT_EQ(Heartbeat(w1).assignment().rank(), 0u);  // the lowest remaining rank is 0 now

  const uint64_t replacement = Register(v1::WORKER);
  v1::JobInfo job = Job(job_id);
  EXPECT_THAT(job.worker_nodes(), ElementsAre(w1, replacement));
  EXPECT_THAT(job.worker_ids(), ElementsAre(1u, 2u));
  EXPECT_EQ(job.next_worker_id(), 3u);
  EXPECT_EQ(job.membership_epoch(), 3u);
  EXPECT_EQ(job.reason(), "");
  EXPECT_TRUE(HasEvent(job, absl::StrCat("node ", replacement, " joined as worker 2")));
  const v1::WorkerAssignment a = Heartbeat(replacement).assignment();
  EXPECT_EQ(a.job_id(), job_id);
  EXPECT_EQ(a.worker_id(), 2u);
  EXPECT_EQ(a.rank(), 1u);
  EXPECT_EQ(a.membership_epoch(), 3u);
}

TEST_F(SchedulerTest, ProgressIsRankZerosReport) {
  Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const uint64_t w1 = Register(v1::WORKER);
  const std::string job_id = Submit(2, 1);
  Report(w1, job_id, false, "", /*clock=*/5);
  EXPECT_EQ(Job(job_id).progress().clock(), 0);
  Report(w0, job_id, false, "", /*clock=*/7);
  EXPECT_EQ(Job(job_id).progress().clock(), 7);
  Report(w0, "job-99", false, "", /*clock=*/9);  // not its job: ignored
  EXPECT_EQ(Job(job_id).progress().clock(), 7);
}

TEST_F(SchedulerTest, ASurvivorsFinalReportStandsWhenRankZeroDiedBeforeItsOwn) {
  const uint64_t server = Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const uint64_t w1 = Register(v1::WORKER);
  const std::string job_id = Submit(2, 1);
  v1::WorkerProgress mid;  // rank 0, mid-job, an epoch's evaluation
  mid.set_job_id(job_id);
  mid.set_clock(475);
  mid.set_test_accuracy(0.835);
  Heartbeat(w0, &mid);
  v1::WorkerProgress end;  // rank 1 (async: ahead) reaches its end with a final evaluation
  end.set_job_id(job_id);
  end.set_clock(1404);
  end.set_finished(true);
  end.set_test_accuracy(0.862);
  Heartbeat(w1, &end);
  EXPECT_EQ(Job(job_id).progress().clock(), 475);  // rank 0 still speaks for the job
  KillNode(w0, {server, w1});                      // and dies: the job has only finished workers
  const v1::JobInfo job = Job(job_id);
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_TRUE(job.progress().finished());
  EXPECT_EQ(job.progress().clock(), 1404);
  EXPECT_FLOAT_EQ(job.progress().test_accuracy(), 0.862f);
  EXPECT_TRUE(HasEvent(job,
                       "worker 1's final report stands for the job (the worker of rank 0 died "
                       "before its own)"));
}

TEST_F(SchedulerTest, DeathOfTheOnlyServerFailsTheJob) {
  const uint64_t server = Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const std::string job_id = Submit(1, 1);
  KillNode(server, {w0});
  v1::JobInfo job = Job(job_id);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_EQ(job.reason(),
            "server node 1 (10.0.0.1:7100) died (no heartbeat for 5s) and no server is left to "
            "take its slots");
  EXPECT_GT(job.end_time_unix_ms(), 0);
  EXPECT_EQ(Node(w0).job_id(), "");
  EXPECT_FALSE(Heartbeat(w0).has_assignment());
}

TEST_F(SchedulerTest, AllWorkersDeadFailsTheJob) {
  const uint64_t server = Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const std::string job_id = Submit(1, 1);
  KillNode(w0, {server});
  EXPECT_EQ(Job(job_id).state(), v1::FAILED);
  EXPECT_EQ(Job(job_id).reason(), "all workers of the job died");
}

TEST_F(SchedulerTest, AllWorkersFinishedSucceedsAndFreesThem) {
  Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const uint64_t w1 = Register(v1::WORKER);
  const std::string job_id = Submit(2, 1);
  const std::string next_job = Submit(2, 1);
  EXPECT_EQ(Job(next_job).state(), v1::PENDING);

  Report(w1, job_id, /*finished=*/true);
  EXPECT_EQ(Job(job_id).state(), v1::RUNNING);
  Report(w0, job_id, /*finished=*/true);
  v1::JobInfo job = Job(job_id);
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_GT(job.end_time_unix_ms(), 0);
  EXPECT_TRUE(HasEvent(job, "succeeded: every worker finished"));
  // The freed workers start the next job.
  EXPECT_EQ(Job(next_job).state(), v1::RUNNING);
  EXPECT_EQ(Heartbeat(w0).assignment().job_id(), next_job);
}

TEST_F(SchedulerTest, WorkerErrorFailsTheJob) {
  Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const uint64_t w1 = Register(v1::WORKER);
  const std::string job_id = Submit(2, 1);
  Report(w1, job_id, false, "cannot read data");
  v1::JobInfo job = Job(job_id);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_EQ(job.reason(), absl::StrCat("worker 1 (node ", w1, "): cannot read data"));
  EXPECT_FALSE(Heartbeat(w0).has_assignment());
  EXPECT_EQ(Node(w1).job_id(), "");
}

TEST_F(SchedulerTest, Cancel) {
  Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const std::string running = Submit(1, 1);
  const std::string pending = Submit(1, 1);
  auto cancelled = scheduler_->CancelJob(running);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::CANCELLED);
  EXPECT_EQ(cancelled->reason(), "cancelled by user");
  EXPECT_FALSE(cancelled->events().empty());
  // Its worker went to the pending job.
  EXPECT_EQ(Heartbeat(w0).assignment().job_id(), pending);
  EXPECT_EQ(scheduler_->CancelJob(running).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(scheduler_->CancelJob("job-42").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(scheduler_->CancelJob("bogus").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(scheduler_->GetJob("job-42").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SchedulerTest, BadSpecIsRejectedAndTakesNoJobId) {
  v1::JobSpec spec = Spec(0, 1);
  auto rejected = scheduler_->SubmitJob(spec);
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rejected.status().message().find("num_workers"), std::string::npos);
  EXPECT_TRUE(scheduler_->ListJobs().empty());
  EXPECT_EQ(Submit(1, 1), "job-1");
}

TEST_F(SchedulerTest, ListJobsOmitsEvents) {
  Submit(1, 1);
  const std::vector<v1::JobInfo> jobs = scheduler_->ListJobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_TRUE(jobs[0].events().empty());
  EXPECT_FALSE(Job("job-1").events().empty());
}

TEST_F(SchedulerTest, RestartKeepsStateAndGivesGrace) {
  const uint64_t server = Register(v1::SERVER);
  const uint64_t w0 = Register(v1::WORKER);
  const uint64_t w1 = Register(v1::WORKER);
  const uint64_t w2 = Register(v1::WORKER);
  const std::string job_id = Submit(2, 1);
  KillNode(w0, {server, w1, w2});  // w2 joins as worker 2
  const v1::JobInfo before = Job(job_id);
  const v1::WorkerAssignment assignment = Heartbeat(w2).assignment();
  ASSERT_EQ(assignment.worker_id(), 2u);

  clock_.Advance(absl::Minutes(1));  // the scheduler was away for a minute
  Reopen();
  ASSERT_TRUE(scheduler_->Tick().ok());
  for (uint64_t id : {server, w1, w2}) EXPECT_EQ(Node(id).state(), v1::ALIVE) << id;
  EXPECT_EQ(Node(w0).state(), v1::DEAD);
  const v1::JobInfo after = Job(job_id);
  EXPECT_EQ(after.state(), v1::RUNNING);
  EXPECT_EQ(after.membership_epoch(), before.membership_epoch());
  ASSERT_EQ(after.events_size(), before.events_size() + 1);
  for (int i = 0; i < before.events_size(); ++i) {
    EXPECT_EQ(after.events(i).message(), before.events(i).message());
  }
  EXPECT_EQ(after.events(after.events_size() - 1).message(), "scheduler restarted");
  const v1::HeartbeatResponse resp = Heartbeat(w2);
  EXPECT_FALSE(resp.reregister());
  EXPECT_EQ(resp.assignment().SerializeAsString(), assignment.SerializeAsString());
  EXPECT_EQ(Register(v1::WORKER), w2 + 1);  // counters survive
  EXPECT_EQ(Submit(1, 1), "job-2");

  // The grace period is one timeout long.
  Advance(absl::Seconds(6));
  EXPECT_EQ(Node(server).state(), v1::DEAD);
  EXPECT_EQ(Job(job_id).state(), v1::FAILED);
}

TEST_F(SchedulerTest, EventsAreCappedAcrossRestarts) {
  options_.max_events_per_job = 3;
  Reopen();
  const std::string job_id = Submit(1, 1);  // 1 event
  for (int i = 0; i < 4; ++i) Reopen();     // +4 "scheduler restarted"
  v1::JobInfo job = Job(job_id);
  ASSERT_EQ(job.events_size(), 3);
  for (const v1::JobEvent& event : job.events()) EXPECT_EQ(event.message(), "scheduler restarted");
}

}  // namespace
}  // namespace ps
