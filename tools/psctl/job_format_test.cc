#include "tools/psctl/job_format.h"

#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace ps {
namespace psctl {
namespace {

constexpr int64_t kMiB = 1024 * 1024;
constexpr int64_t kGiB = 1024 * kMiB;

// 2024-05-01 12:00:00 UTC.
constexpr int64_t kT0 = 1714564800000;

v1::CheckpointInfo Checkpoint(uint64_t id, v1::CheckpointState state, int64_t clock) {
  v1::CheckpointInfo c;
  c.set_job_id("job-3");
  c.set_checkpoint_id(id);
  c.set_state(state);
  c.set_clock(clock);
  c.set_start_time_unix_ms(kT0 + 60000 * static_cast<int64_t>(id));
  return c;
}

void AddShard(v1::CheckpointInfo& c, uint64_t rows, uint64_t bytes) {
  v1::CheckpointShard* shard = c.add_shards();
  shard->set_server_index(c.shards_size() - 1);
  shard->set_rows(rows);
  shard->set_bytes(bytes);
}

TEST(JobFormatTest, TableAlignsColumnsAndTrimsTrailingSpaces) {
  Table t;
  t.AddRow({"ID", "STATE", "ERROR"});
  t.AddRow({"12", "complete", ""});
  std::ostringstream out;
  t.Print(out);
  EXPECT_EQ(out.str(),
            "ID  STATE     ERROR\n"
            "12  complete\n");
}

TEST(JobFormatTest, FormatBytesUsesBinaryUnits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1.0 KiB");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(kMiB), "1.0 MiB");
  EXPECT_EQ(FormatBytes(static_cast<uint64_t>(117.4 * kMiB)), "117.4 MiB");
  EXPECT_EQ(FormatBytes(static_cast<uint64_t>(2.31 * kGiB)), "2.31 GiB");
  EXPECT_EQ(FormatBytes(3 * 1024 * static_cast<uint64_t>(kGiB)), "3.00 TiB");
}

TEST(JobFormatTest, FormatBytesNeverShows1024OfAUnit) {
  EXPECT_EQ(FormatBytes(kMiB - 1), "1.0 MiB");
  EXPECT_EQ(FormatBytes(kGiB - 1), "1.00 GiB");
}

TEST(JobFormatTest, CheckpointStateNames) {
  EXPECT_EQ(CheckpointStateName(v1::CHECKPOINT_WRITING), "writing");
  EXPECT_EQ(CheckpointStateName(v1::CHECKPOINT_COMPLETE), "complete");
  EXPECT_EQ(CheckpointStateName(v1::CHECKPOINT_FAILED), "failed");
  EXPECT_EQ(CheckpointStateName(v1::CHECKPOINT_CORRUPT), "corrupt");
  EXPECT_EQ(CheckpointStateName(v1::CHECKPOINT_PRUNED), "pruned");
  EXPECT_EQ(CheckpointStateName(v1::CHECKPOINT_STATE_UNSPECIFIED), "unspecified");
}

TEST(JobFormatTest, ParseCheckpointRefOfJobAlone) {
  auto ref = ParseCheckpointRef("job-3");
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(ref->job_id(), "job-3");
  EXPECT_EQ(ref->checkpoint_id(), 0u);
}

TEST(JobFormatTest, ParseCheckpointRefOfJobAndId) {
  auto ref = ParseCheckpointRef("job-3:5");
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(ref->job_id(), "job-3");
  EXPECT_EQ(ref->checkpoint_id(), 5u);
  ref = ParseCheckpointRef("job-3:0");  // the latest complete, spelled out
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(ref->checkpoint_id(), 0u);
}

TEST(JobFormatTest, ParseCheckpointRefRejectsMalformed) {
  for (const char* text : {"", ":5", "job-3:", "job-3:x", "job-3:-1", "job-3:+5", "job-3:5:6",
                           "job 3", "job-3: 5", "job-3:99999999999999999999"}) {
    auto ref = ParseCheckpointRef(text);
    EXPECT_EQ(ref.status().code(), absl::StatusCode::kInvalidArgument) << "'" << text << "'";
    EXPECT_NE(ref.status().message().find("JOB:ID"), std::string::npos) << ref.status();
  }
}

TEST(JobFormatTest, ParseRecoveryMode) {
  EXPECT_EQ(*ParseRecoveryMode("rollback"), v1::ROLLBACK);
  EXPECT_EQ(*ParseRecoveryMode("RESTORE_LOST_SLOTS"), v1::RESTORE_LOST_SLOTS);
  EXPECT_EQ(*ParseRecoveryMode("default"), v1::RECOVERY_DEFAULT);
  auto bad = ParseRecoveryMode("restore");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "must be rollback, restore_lost_slots or default, not 'restore'");
}

TEST(JobFormatTest, ApplyCheckpointFlagsSetsTheFieldsGiven) {
  CheckpointFlags flags;
  flags.every_steps = 500;
  flags.every_seconds = 600;
  flags.keep = 5;
  flags.root = "/mnt/ckpt";
  flags.recovery = "restore_lost_slots";
  flags.from_checkpoint = "job-2:4";
  v1::JobSpec spec;
  ASSERT_TRUE(ApplyCheckpointFlags(flags, spec).ok());
  EXPECT_EQ(spec.checkpoint().every_steps(), 500);
  EXPECT_EQ(spec.checkpoint().every_seconds(), 600);
  EXPECT_EQ(spec.checkpoint().keep_last(), 5);
  EXPECT_EQ(spec.checkpoint().root(), "/mnt/ckpt");
  EXPECT_EQ(spec.recovery(), v1::RESTORE_LOST_SLOTS);
  EXPECT_EQ(spec.from_checkpoint().job_id(), "job-2");
  EXPECT_EQ(spec.from_checkpoint().checkpoint_id(), 4u);
}

TEST(JobFormatTest, ApplyCheckpointFlagsKeepsTheFileFieldsNotGiven) {
  v1::JobSpec spec;
  spec.mutable_checkpoint()->set_every_steps(100);
  spec.mutable_checkpoint()->set_root("/data/ckpt");
  CheckpointFlags flags;
  flags.keep = 2;
  ASSERT_TRUE(ApplyCheckpointFlags(flags, spec).ok());
  EXPECT_EQ(spec.checkpoint().every_steps(), 100);
  EXPECT_EQ(spec.checkpoint().root(), "/data/ckpt");
  EXPECT_EQ(spec.checkpoint().keep_last(), 2);

  v1::JobSpec untouched;
  ASSERT_TRUE(ApplyCheckpointFlags(CheckpointFlags(), untouched).ok());
  EXPECT_FALSE(untouched.has_checkpoint());
  EXPECT_FALSE(untouched.has_from_checkpoint());
}

TEST(JobFormatTest, ApplyCheckpointFlagsNamesTheBadFlag) {
  struct Case {
    CheckpointFlags flags;
    std::string message;
  };
  std::vector<Case> cases(6);
  cases[0].flags.every_steps = -1;
  cases[0].message = "--checkpoint_every_steps must be >= 0 (0: off), not -1";
  cases[1].flags.every_seconds = -5;
  cases[1].message = "--checkpoint_every_seconds must be >= 0 (0: off), not -5";
  cases[2].flags.keep = -1;
  cases[2].message = "--checkpoint_keep must be >= 0 (0: the default, 3), not -1";
  cases[3].flags.root = "ckpt";
  cases[3].message =
      "--checkpoint_root must be an absolute path (every server resolves it), not 'ckpt'";
  cases[4].flags.recovery = "never";
  cases[4].message = "--recovery must be rollback, restore_lost_slots or default, not 'never'";
  cases[5].flags.from_checkpoint = "job-2:last";
  cases[5].message = "--from_checkpoint: 'job-2:last' is not JOB or JOB:ID";
  for (const Case& c : cases) {
    v1::JobSpec spec;
    absl::Status s = ApplyCheckpointFlags(c.flags, spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(s.message().substr(0, c.message.size()), c.message);
  }
}

TEST(JobFormatTest, CheckpointSums) {
  v1::CheckpointInfo c = Checkpoint(1, v1::CHECKPOINT_COMPLETE, 100);
  AddShard(c, 10, 1000);
  AddShard(c, 5, 24);
  EXPECT_EQ(CheckpointRows(c), 15u);
  EXPECT_EQ(CheckpointBytes(c), 1024u);
}

TEST(JobFormatTest, LatestCompleteSkipsOtherStates) {
  v1::ListCheckpointsResponse list;
  EXPECT_EQ(LatestComplete(list), nullptr);
  *list.add_checkpoints() = Checkpoint(2, v1::CHECKPOINT_COMPLETE, 200);
  *list.add_checkpoints() = Checkpoint(1, v1::CHECKPOINT_COMPLETE, 100);
  *list.add_checkpoints() = Checkpoint(3, v1::CHECKPOINT_FAILED, 300);
  *list.add_checkpoints() = Checkpoint(4, v1::CHECKPOINT_WRITING, 400);
  ASSERT_NE(LatestComplete(list), nullptr);
  EXPECT_EQ(LatestComplete(list)->checkpoint_id(), 2u);
}

TEST(JobFormatTest, AnsweringCheckpointIsTheFirstWithALaterRequest) {
  v1::ListCheckpointsResponse list;
  *list.add_checkpoints() = Checkpoint(1, v1::CHECKPOINT_COMPLETE, 100);  // policy
  v1::CheckpointInfo* old = list.add_checkpoints();
  *old = Checkpoint(2, v1::CHECKPOINT_COMPLETE, 200);
  old->set_request_seq(3);
  EXPECT_EQ(AnsweringCheckpoint(list, 4), nullptr);
  v1::CheckpointInfo* later = list.add_checkpoints();
  *later = Checkpoint(5, v1::CHECKPOINT_WRITING, 500);
  later->set_request_seq(6);
  v1::CheckpointInfo* answer = list.add_checkpoints();
  *answer = Checkpoint(4, v1::CHECKPOINT_FAILED, 400);
  answer->set_request_seq(4);
  ASSERT_NE(AnsweringCheckpoint(list, 4), nullptr);
  EXPECT_EQ(AnsweringCheckpoint(list, 4)->checkpoint_id(), 4u);
  EXPECT_EQ(AnsweringCheckpoint(list, 5)->checkpoint_id(), 5u);
  EXPECT_EQ(AnsweringCheckpoint(list, 7), nullptr);
}

TEST(JobFormatTest, PrintCheckpointsTable) {
  v1::ListCheckpointsResponse list;
  v1::CheckpointInfo* c = list.add_checkpoints();
  *c = Checkpoint(2, v1::CHECKPOINT_COMPLETE, 1400);
  c->set_end_time_unix_ms(c->start_time_unix_ms() + 3200);
  c->set_dir("/ckpt/job-3/ckpt-2");
  AddShard(*c, 100000, 60 * kMiB);
  AddShard(*c, 103530, static_cast<uint64_t>(57.4 * kMiB));
  c = list.add_checkpoints();
  *c = Checkpoint(1, v1::CHECKPOINT_PRUNED, 700);
  c->set_end_time_unix_ms(c->start_time_unix_ms() + 75000);
  AddShard(*c, 7, 2048);
  c = list.add_checkpoints();
  *c = Checkpoint(3, v1::CHECKPOINT_WRITING, 2100);
  AddShard(*c, 0, 0);
  AddShard(*c, 0, 0);
  const absl::Time now = FromMillis(kT0 + 3 * 60000 + 12000);  // 12 s after 3 began

  std::ostringstream out;
  PrintCheckpoints(list, now, out);
  const std::string t1 = FormatTimestamp(kT0 + 60000);
  const std::string t2 = FormatTimestamp(kT0 + 120000);
  const std::string t3 = FormatTimestamp(kT0 + 180000);
  const std::string want[] = {
      "ID  STATE     CLOCK  TAKEN                                DURATION    SIZE       ROWS    "
      "SHARDS",
      absl::StrCat("1   pruned    700    ", t1, " (2m12s ago)  1m15s       2.0 KiB    7       1"),
      absl::StrCat("2   complete  1400   ", t2, " (1m12s ago)  3.2s        117.4 MiB  203530  2"),
      absl::StrCat("3   writing   2100   ", t3, " (12s ago)    12s so far  -          -       2"),
      "latest complete: 2 (clock 1400, /ckpt/job-3/ckpt-2)"};
  EXPECT_EQ(out.str(), absl::StrCat(absl::StrJoin(want, "\n"), "\n"));
}

TEST(JobFormatTest, PrintCheckpointsShowsErrors) {
  v1::ListCheckpointsResponse list;
  *list.add_checkpoints() = Checkpoint(1, v1::CHECKPOINT_COMPLETE, 100);
  v1::CheckpointInfo* c = list.add_checkpoints();
  *c = Checkpoint(2, v1::CHECKPOINT_FAILED, 200);
  c->set_error("server 1 died");
  std::ostringstream out;
  PrintCheckpoints(list, FromMillis(kT0 + 600000), out);
  const std::string text = out.str();
  EXPECT_NE(text.find("SHARDS  ERROR\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  server 1 died\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nlatest complete: 1 (clock 100)\n"), std::string::npos) << text;
}

TEST(JobFormatTest, PrintCheckpointsOfNone) {
  std::ostringstream out;
  PrintCheckpoints(v1::ListCheckpointsResponse(), FromMillis(kT0), out);
  EXPECT_EQ(out.str(), "no checkpoints\nlatest complete: none\n");
}

TEST(JobFormatTest, CheckpointOutcomeLines) {
  v1::CheckpointInfo c = Checkpoint(7, v1::CHECKPOINT_COMPLETE, 1400);
  c.set_end_time_unix_ms(c.start_time_unix_ms() + 3200);
  AddShard(c, 203530, static_cast<uint64_t>(117.4 * kMiB));
  EXPECT_EQ(CheckpointCompleteLine(c),
            "checkpoint 7 of job-3 complete: clock 1400, 203530 rows, 117.4 MiB, 3.2s");
  c.clear_end_time_unix_ms();
  c.set_write_seconds(95);
  EXPECT_EQ(CheckpointCompleteLine(c),
            "checkpoint 7 of job-3 complete: clock 1400, 203530 rows, 117.4 MiB, 1m35s");

  v1::CheckpointInfo f = Checkpoint(8, v1::CHECKPOINT_FAILED, 1500);
  f.set_error("server 2 (host:7101): disk full");
  EXPECT_EQ(CheckpointFailedLine(f),
            "checkpoint 8 of job-3 failed at clock 1500: server 2 (host:7101): disk full");
  f.set_state(v1::CHECKPOINT_CORRUPT);
  f.clear_error();
  EXPECT_EQ(CheckpointFailedLine(f),
            "checkpoint 8 of job-3 corrupt at clock 1500: (no error given)");
}

TEST(JobFormatTest, CheckpointWaitLine) {
  v1::JobInfo job;
  job.set_state(v1::RUNNING);
  job.mutable_progress()->set_clock(1180);
  EXPECT_EQ(CheckpointWaitLine("job-3", 4, nullptr, &job, absl::Seconds(5)),
            "waiting for checkpoint of job-3 (request 4 not begun; job at clock 1180, 5.0s)");
  job.set_state(v1::PENDING);
  EXPECT_EQ(CheckpointWaitLine("job-3", 4, nullptr, &job, absl::Seconds(5)),
            "waiting for checkpoint of job-3 (request 4 not begun; job PENDING, 5.0s)");
  EXPECT_EQ(CheckpointWaitLine("job-3", 4, nullptr, nullptr, absl::Seconds(5)),
            "waiting for checkpoint of job-3 (request 4 not begun, 5.0s)");
  v1::CheckpointInfo c = Checkpoint(7, v1::CHECKPOINT_WRITING, 1200);
  EXPECT_EQ(CheckpointWaitLine("job-3", 4, &c, &job, absl::Seconds(12)),
            "waiting for checkpoint 7 of job-3 (writing at clock 1200, 12s)");
}

TEST(JobFormatTest, CheckpointPolicySummary) {
  v1::CheckpointPolicy p;
  EXPECT_EQ(CheckpointPolicySummary(p),
            "on request only (psctl checkpoint), keep last 3 (default), in the scheduler's "
            "--checkpoint_root");
  p.set_every_steps(500);
  p.set_every_seconds(600);
  p.set_keep_last(5);
  p.set_root("/mnt/ckpt");
  EXPECT_EQ(CheckpointPolicySummary(p), "every 500 steps or every 10m, keep last 5, in /mnt/ckpt");
  p.set_every_steps(1);
  p.set_every_seconds(0);
  EXPECT_EQ(CheckpointPolicySummary(p), "every 1 step, keep last 5, in /mnt/ckpt");
}

TEST(JobFormatTest, RecoverySummary) {
  v1::JobSpec spec;
  spec.mutable_consistency()->set_mode(v1::ConsistencySpec::SYNC);
  EXPECT_EQ(RecoverySummary(spec), "rollback (the default of sync jobs)");
  spec.mutable_consistency()->set_mode(v1::ConsistencySpec::ASYNC);
  EXPECT_EQ(RecoverySummary(spec), "restore_lost_slots (the default of ssp and async jobs)");
  spec.set_recovery(v1::ROLLBACK);
  EXPECT_EQ(RecoverySummary(spec), "rollback");
  spec.set_recovery(v1::RESTORE_LOST_SLOTS);
  EXPECT_EQ(RecoverySummary(spec), "restore_lost_slots");
}

v1::JobInfo RestoringJob() {
  v1::JobInfo job;
  job.set_job_id("job-3");
  job.set_state(v1::RUNNING);
  job.set_shard_epoch(4);
  v1::RestoreOrder* r = job.mutable_restore();
  r->set_shard_epoch(4);
  r->set_checkpoint_id(7);
  r->set_clock(1400);
  r->set_rollback(true);
  r->set_reason("server node 2 (host:7101) died");
  return job;
}

TEST(JobFormatTest, RestoreLine) {
  v1::JobInfo job = RestoringJob();
  EXPECT_EQ(RestoreLine(job),
            "restoring from checkpoint 7 (clock 1400): server node 2 (host:7101) died");
  v1::RestoreOrder* r = job.mutable_restore();
  r->set_rollback(false);
  r->set_slots(std::string("\x0f\x01", 2));  // 5 slots
  EXPECT_EQ(RestoreLine(job),
            "restoring from checkpoint 7 (clock 1400): server node 2 (host:7101) died; lost "
            "slots only (5 slots)");
  r->set_rollback(true);
  r->set_source_job_id("job-2");
  r->set_reason("");
  EXPECT_EQ(RestoreLine(job), "restoring from checkpoint 7 of job-2 (clock 1400)");
  r->set_checkpoint_id(0);
  r->set_reason("psctl restore");
  EXPECT_EQ(RestoreLine(job), "restoring initial values (no complete checkpoint): psctl restore");
}

TEST(JobFormatTest, RestoreInProgressOnlyForTheCurrentShardMap) {
  v1::JobInfo job = RestoringJob();
  EXPECT_TRUE(RestoreInProgress(job));
  job.set_shard_epoch(5);
  EXPECT_FALSE(RestoreInProgress(job));
  job = RestoringJob();
  job.set_state(v1::FAILED);
  EXPECT_FALSE(RestoreInProgress(job));
  job = RestoringJob();
  job.clear_restore();
  EXPECT_FALSE(RestoreInProgress(job));
}

TEST(JobFormatTest, CheckpointStatusRows) {
  v1::JobInfo job = RestoringJob();
  job.mutable_spec()->mutable_checkpoint()->set_every_steps(500);
  job.mutable_spec()->mutable_checkpoint()->set_keep_last(3);
  job.mutable_spec()->mutable_checkpoint()->set_root("/ckpt");
  job.mutable_spec()->set_recovery(v1::ROLLBACK);
  job.mutable_spec()->mutable_from_checkpoint()->set_job_id("job-2");
  job.set_latest_checkpoint_id(7);
  job.set_recoveries(1);
  const auto rows = CheckpointStatusRows(job);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].first, "checkpoints:");
  EXPECT_EQ(rows[0].second, "every 500 steps, keep last 3, in /ckpt; latest complete: 7");
  EXPECT_EQ(rows[1].first, "recovery:");
  EXPECT_EQ(rows[1].second, "rollback when a server dies; 1 recovery so far");
  EXPECT_EQ(rows[2].first, "from:");
  EXPECT_EQ(rows[2].second, "the latest complete checkpoint of job-2");
  EXPECT_EQ(rows[3].first, "restore:");
  EXPECT_EQ(rows[3].second,
            "restoring from checkpoint 7 (clock 1400): server node 2 (host:7101) died");

  v1::JobInfo plain;
  plain.set_job_id("job-1");
  const auto few = CheckpointStatusRows(plain);
  ASSERT_EQ(few.size(), 2u);
  EXPECT_EQ(few[0].second,
            "on request only (psctl checkpoint), keep last 3 (default), in the scheduler's "
            "--checkpoint_root; latest complete: none");
  EXPECT_EQ(few[1].second,
            "rollback (the default of sync jobs) when a server dies; 0 recoveries so far");
}

TEST(JobFormatTest, RollbackLine) {
  v1::JobInfo job = RestoringJob();
  EXPECT_EQ(RollbackLine(job, 0), "job-3 rolls back to checkpoint 7 (clock 1400)");
  job.clear_restore();
  EXPECT_EQ(RollbackLine(job, 5), "job-3 rolls back to checkpoint 5");
  EXPECT_EQ(RollbackLine(job, 0), "job-3 rolls back to its latest complete checkpoint");
}

TEST(JobFormatTest, ResubmitNote) {
  v1::JobInfo job;
  job.set_job_id("job-5");
  job.set_state(v1::PENDING);
  job.mutable_spec()->mutable_from_checkpoint()->set_job_id("job-3");
  job.mutable_spec()->mutable_from_checkpoint()->set_checkpoint_id(7);
  EXPECT_EQ(ResubmitNote(job, "job-3", 0),
            "job-3 has ended, so the scheduler submitted a new job from its checkpoint 7: job-5 "
            "(PENDING); follow it with: psctl status job-5 --watch");
  job.mutable_restore()->set_source_job_id("job-3");
  job.mutable_restore()->set_checkpoint_id(7);
  job.mutable_restore()->set_clock(1400);
  EXPECT_NE(ResubmitNote(job, "job-3", 0).find("from its checkpoint 7 (clock 1400): job-5"),
            std::string::npos);
  job.clear_restore();
  job.mutable_spec()->clear_from_checkpoint();
  EXPECT_NE(ResubmitNote(job, "job-3", 0).find("from its latest complete checkpoint: job-5"),
            std::string::npos);
}

}  // namespace
// What a hostile scheduler (or an old state file) sends is escaped before psctl prints it:
// every string, nested and repeated ones included; bytes fields untouched.
TEST(MakePrintableTest, EscapesEveryStringAndClipsLongOnes) {
  v1::ListJobsResponse list;
  JobInfo& job = *list.add_jobs();
  job.set_job_id("job-1\x1b[2J");
  job.mutable_spec()->set_name("n\x1b]0;pwned\x07");
  job.set_reason(std::string(100000, 'r'));
  job.add_server_addresses("10.0.0.1:7100\r\n");
  job.add_events()->set_message(
      "caf\xc3\xa9 \x9b"
      "31m");
  job.mutable_progress()->set_error("ok");
  job.mutable_restore()->set_slots(std::string("\x00\x1b\xff", 3));
  MakePrintable(&list);
  EXPECT_EQ(job.job_id(), "job-1\\x1b[2J");
  EXPECT_EQ(job.spec().name(), "n\\x1b]0;pwned\\x07");
  EXPECT_LT(job.reason().size(), kMaxPrintedBytes + 32);
  EXPECT_NE(job.reason().find("(100000 bytes)"), std::string::npos);
  EXPECT_EQ(job.server_addresses(0), "10.0.0.1:7100\\x0d\\x0a");
  EXPECT_EQ(job.events(0).message(), "caf\\xc3\\xa9 \\x9b31m");
  EXPECT_EQ(job.progress().error(), "ok");
  EXPECT_EQ(job.restore().slots(), std::string("\x00\x1b\xff", 3));
}

}  // namespace psctl
}  // namespace ps
