// psctl's text views of jobs and checkpoints: durations, sizes, tables, progress lines; and the
// parsers of psctl's checkpoint flags.
#ifndef PS_TOOLS_PSCTL_JOB_FORMAT_H_
#define PS_TOOLS_PSCTL_JOB_FORMAT_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "ps/v1/scheduler.pb.h"

namespace ps {
namespace psctl {

using v1::CheckpointInfo;
using v1::JobInfo;
using v1::JobSpec;
using v1::ListCheckpointsResponse;

absl::Time FromMillis(int64_t ms);
// "0.4s", "12s", "3m05s", "2h07m", "3d04h".
std::string FormatSeconds(double s);
std::string Age(int64_t unix_ms, absl::Time now);
std::string FormatTimestamp(int64_t unix_ms);
std::string Lower(absl::string_view s);
std::string Percent(double fraction);
std::string SpecSummary(const JobSpec& spec);
bool IsFinal(ps::v1::JobState state);
std::string Eta(const JobInfo& job, double step_rate);
int TotalEpochs(const JobSpec& spec);
// "epoch 3/5, clock 1932/4690 (41.2%), loss 0.3921, accuracy 86.04%"
std::string ProgressSummary(const JobInfo& job);
std::string ProgressBar(const JobInfo& job, int width);
// The one-line view of `status --watch` while the job has not ended.
std::string WatchLine(const JobInfo& job, double step_rate);
// The line printed when a job has ended.
std::string FinalLine(const JobInfo& job);

// ---- checkpoints (psctl checkpoint, checkpoints, restore; the checkpoint rows of status) ----

// Binary units: "512 B", "4.0 KiB", "117.4 MiB", "2.31 GiB", "1.20 TiB".
std::string FormatBytes(uint64_t bytes);

// Every string field of `message` (nested and repeated ones too) with its bytes outside
// printable ASCII escaped (\xNN) and clipped to kMaxPrintedBytes: whatever a scheduler answered
// (a hostile one, or an old state file) can then be printed without a terminal obeying it.
// Bytes fields are left alone (they are decoded, not printed).
inline constexpr size_t kMaxPrintedBytes = 4096;
void MakePrintable(google::protobuf::Message* message);
// "writing", "complete", "failed", "corrupt", "pruned" ("unspecified" otherwise).
std::string CheckpointStateName(v1::CheckpointState state);
// --from_checkpoint: "JOB" (its latest complete checkpoint: id 0) or "JOB:ID", e.g. "job-3:5".
// INVALID_ARGUMENT, with a message that does not name the flag, when malformed.
absl::StatusOr<v1::CheckpointRef> ParseCheckpointRef(absl::string_view text);
// --recovery: "rollback", "restore_lost_slots" or "default" (any case).
absl::StatusOr<v1::RecoveryMode> ParseRecoveryMode(absl::string_view text);
// psctl submit's flags of checkpoints and recovery; nullopt: not given.
struct CheckpointFlags {
  std::optional<int64_t> every_steps;          // --checkpoint_every_steps, >= 0 (0: off)
  std::optional<int64_t> every_seconds;        // --checkpoint_every_seconds, >= 0 (0: off)
  std::optional<int32_t> keep;                 // --checkpoint_keep, >= 0 (0: the default, 3)
  std::optional<std::string> root;             // --checkpoint_root, absolute (empty: the default)
  std::optional<std::string> recovery;         // --recovery, see ParseRecoveryMode
  std::optional<std::string> from_checkpoint;  // --from_checkpoint, see ParseCheckpointRef
};
// Checks the flags given and sets their fields of `spec`; a bad value is INVALID_ARGUMENT
// naming the flag, and leaves `spec` partly changed.
absl::Status ApplyCheckpointFlags(const CheckpointFlags& flags, JobSpec& spec);
// Sums over the checkpoint's shards.
uint64_t CheckpointRows(const CheckpointInfo& c);
uint64_t CheckpointBytes(const CheckpointInfo& c);
// The COMPLETE checkpoint with the highest id; nullptr if none.
const CheckpointInfo* LatestComplete(const ListCheckpointsResponse& list);
// The checkpoint answering the psctl checkpoint request `request_seq`: the lowest id whose
// request_seq >= it; nullptr if none has begun.
const CheckpointInfo* AnsweringCheckpoint(const ListCheckpointsResponse& list,
                                          uint64_t request_seq);
// `psctl checkpoints`: ID STATE CLOCK TAKEN DURATION SIZE ROWS SHARDS (and ERROR when one has
// an error), in id order, then "latest complete: N (clock C, DIR)" or "latest complete: none".
void PrintCheckpoints(const ListCheckpointsResponse& list, absl::Time now, std::ostream& out);
// "checkpoint 7 of job-3 complete: clock 1400, 203530 rows, 117.4 MiB, 3.2s"
std::string CheckpointCompleteLine(const CheckpointInfo& c);
// "checkpoint 7 of job-3 failed at clock 1400: server 2: disk full" (also corrupt).
std::string CheckpointFailedLine(const CheckpointInfo& c);
// `psctl checkpoint --wait`'s progress line. `answer`: the checkpoint answering the request
// (nullptr: not begun); `job`: the job, if known.
std::string CheckpointWaitLine(absl::string_view job_id, uint64_t request_seq,
                               const CheckpointInfo* answer, const JobInfo* job,
                               absl::Duration waited);
// "every 500 steps or every 10m, keep last 3, in /mnt/ckpt"; without a trigger and root:
// "on request only (psctl checkpoint), keep last 3, in the scheduler's --checkpoint_root".
std::string CheckpointPolicySummary(const v1::CheckpointPolicy& policy);
// "rollback", "restore_lost_slots", or for RECOVERY_DEFAULT what it means for the spec.
std::string RecoverySummary(const JobSpec& spec);
// Whether `job` carries a restore order of its current shard map (and has not ended).
bool RestoreInProgress(const JobInfo& job);
// "restoring from checkpoint 7 (clock 1400): server node 2 died"; a checkpoint of another job:
// "... checkpoint 7 of job-2 ..."; RESTORE_LOST_SLOTS orders end with "; lost slots only (N)";
// checkpoint 0: "restoring initial values (no complete checkpoint): ...".
std::string RestoreLine(const JobInfo& job);
// "dynamic: 1234 of 2808 ranges read (epoch 2 of 3), 3 handed out again after their worker was
// lost" of a job with dynamic data assignment; "static" otherwise; "dynamic: no range handed out
// yet" before the first.
std::string DataLine(const JobInfo& job);
// The status rows of checkpoints: "checkpoints:", "recovery:", "from:" (a job started from a
// checkpoint) and "restore:" (RestoreInProgress).
std::vector<std::pair<std::string, std::string>> CheckpointStatusRows(const JobInfo& job);
// `psctl restore`'s answer when the job itself rolls back: "job-3 rolls back to checkpoint 7
// (clock 1400)". `asked_id`: the checkpoint asked for (0: the latest complete).
std::string RollbackLine(const JobInfo& job, uint64_t asked_id);
// `psctl restore`'s note (stderr) when the scheduler submitted `new_job` because `old_job_id`
// had ended.
std::string ResubmitNote(const JobInfo& new_job, absl::string_view old_job_id, uint64_t asked_id);

// Left-aligned columns, two spaces apart.
class Table {
 public:
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print(std::ostream& out) const {
    std::vector<size_t> width;
    for (const auto& row : rows_) {
      if (width.size() < row.size()) width.resize(row.size(), 0);
      for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
    }
    for (const auto& row : rows_) {
      std::string line;
      for (size_t i = 0; i < row.size(); ++i) {
        absl::StrAppend(&line, row[i]);
        if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 2, ' ');
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out << line << "\n";
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

// Steps per second: over the last ~30 s of observations while watching, else the mean since the
// job started. 0 when unknown.
class StepRate {
 public:
  void Observe(absl::Time now, int64_t clock) {
    if (!samples_.empty() && clock < samples_.back().second) samples_.clear();  // restarted
    samples_.emplace_back(now, clock);
    while (samples_.size() > 2 && now - samples_.front().first > absl::Seconds(30)) {
      samples_.pop_front();
    }
  }
  double Get(const JobInfo& job, absl::Time now) const {
    if (samples_.size() >= 2) {
      const double dt = absl::ToDoubleSeconds(samples_.back().first - samples_.front().first);
      const int64_t dc = samples_.back().second - samples_.front().second;
      if (dt >= 2 && dc > 0) return dc / dt;
    }
    if (job.start_time_unix_ms() <= 0 || job.progress().clock() <= 0) return 0;
    const double dt = absl::ToDoubleSeconds(now - FromMillis(job.start_time_unix_ms()));
    return dt > 0 ? job.progress().clock() / dt : 0;
  }

 private:
  std::deque<std::pair<absl::Time, int64_t>> samples_;
};

}  // namespace psctl
}  // namespace ps

#endif  // PS_TOOLS_PSCTL_JOB_FORMAT_H_
