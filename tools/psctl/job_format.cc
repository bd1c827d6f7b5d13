#include "tools/psctl/job_format.h"

#include <map>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/printable.h"

namespace ps {
namespace psctl {

absl::Time FromMillis(int64_t ms) { return absl::FromUnixMillis(ms); }

// "0.4s", "12s", "3m05s", "2h07m", "3d04h".
std::string FormatSeconds(double s) {
  if (s < 0) s = 0;
  if (s < 10) return absl::StrFormat("%.1fs", s);
  const int64_t t = static_cast<int64_t>(s);
  if (t < 60) return absl::StrFormat("%ds", t);
  if (t < 3600) return absl::StrFormat("%dm%02ds", t / 60, t % 60);
  if (t < 48 * 3600) return absl::StrFormat("%dh%02dm", t / 3600, t / 60 % 60);
  return absl::StrFormat("%dd%02dh", t / 86400, t / 3600 % 24);
}

std::string Age(int64_t unix_ms, absl::Time now) {
  if (unix_ms <= 0) return "-";
  return FormatSeconds(absl::ToDoubleSeconds(now - FromMillis(unix_ms)));
}

std::string FormatTimestamp(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%E3S", FromMillis(unix_ms), absl::LocalTimeZone());
}

std::string Lower(absl::string_view s) { return absl::AsciiStrToLower(s); }

std::string Percent(double fraction) { return absl::StrFormat("%.2f%%", 100 * fraction); }

std::string SpecSummary(const JobSpec& spec) {
  std::vector<std::string> parts;
  if (spec.has_program()) {
    std::string command = absl::StrJoin(spec.program().argv(), " ");
    if (command.size() > 60) command = command.substr(0, 57) + "...";
    parts.push_back(absl::StrCat("program ", command));
    parts.push_back(
        absl::StrCat(spec.tables_size(), spec.tables_size() == 1 ? " table" : " tables"));
    const auto& c = spec.consistency();
    std::string mode = Lower(ps::v1::ConsistencySpec::Mode_Name(c.mode()));
    if (c.mode() == ps::v1::ConsistencySpec::SSP) absl::StrAppend(&mode, "(", c.staleness(), ")");
    if (spec.data_assignment() == ps::v1::DYNAMIC) absl::StrAppend(&mode, " dynamic data");
    parts.push_back(mode);
    parts.push_back(absl::StrCat(spec.num_workers(), " workers"));
    parts.push_back(spec.num_servers() > 0 ? absl::StrCat(spec.num_servers(), " servers")
                                           : "all servers");
    return absl::StrJoin(parts, ", ");
  }
  std::string model = spec.model().empty() ? "(no model)" : spec.model();
  if (spec.layers_size() > 0) absl::StrAppend(&model, " ", absl::StrJoin(spec.layers(), ","));
  parts.push_back(model);
  const auto& c = spec.consistency();
  std::string mode = Lower(ps::v1::ConsistencySpec::Mode_Name(c.mode()));
  if (c.mode() == ps::v1::ConsistencySpec::SSP) absl::StrAppend(&mode, "(", c.staleness(), ")");
  if (spec.data_assignment() == ps::v1::DYNAMIC) absl::StrAppend(&mode, " dynamic data");
  parts.push_back(mode);
  std::string opt = Lower(ps::v1::OptimizerSpec::Kind_Name(spec.optimizer().kind()));
  if (spec.optimizer().has_learning_rate()) {
    absl::StrAppend(&opt, " lr ", spec.optimizer().learning_rate());
  }
  parts.push_back(opt);
  if (spec.batch_size() > 0) parts.push_back(absl::StrCat("batch ", spec.batch_size()));
  if (spec.epochs() > 0)
    parts.push_back(absl::StrCat(spec.epochs(), spec.epochs() == 1 ? " epoch" : " epochs"));
  parts.push_back(absl::StrCat(spec.num_workers(), " workers"));
  parts.push_back(spec.num_servers() > 0 ? absl::StrCat(spec.num_servers(), " servers")
                                         : "all servers");
  return absl::StrJoin(parts, ", ");
}

bool IsFinal(ps::v1::JobState state) {
  return state == ps::v1::SUCCEEDED || state == ps::v1::FAILED || state == ps::v1::CANCELLED;
}

std::string Eta(const JobInfo& job, double step_rate) {
  const auto& p = job.progress();
  if (step_rate <= 0 || p.total_clocks() <= 0) return "?";
  return FormatSeconds(std::max<int64_t>(0, p.total_clocks() - p.clock()) / step_rate);
}

int TotalEpochs(const JobSpec& spec) { return spec.epochs() > 0 ? spec.epochs() : 1; }

// "3/5" for a zoo job; a program says only which epoch it is in ("3").
std::string EpochOf(const JobInfo& job) {
  if (job.spec().has_program()) return absl::StrCat(job.progress().epoch());
  return absl::StrCat(job.progress().epoch(), "/", TotalEpochs(job.spec()));
}

// A program's own metrics: " auc 0.8812 ..." (sorted by name; empty if none).
std::string MetricsText(const ps::v1::WorkerProgress& p) {
  std::map<std::string, double> sorted(p.metrics().begin(), p.metrics().end());
  std::string out;
  for (const auto& [name, value] : sorted) absl::StrAppendFormat(&out, " %s %.4g", name, value);
  return out;
}

// "epoch 3/5, clock 1932/4690 (41.2%), loss 0.3921, accuracy 86.04%"
std::string ProgressSummary(const JobInfo& job) {
  const auto& p = job.progress();
  std::string s =
      absl::StrFormat("epoch %s, clock %d/%d", EpochOf(job), p.clock(), p.total_clocks());
  if (p.total_clocks() > 0) {
    absl::StrAppendFormat(&s, " (%.1f%%)", 100.0 * p.clock() / p.total_clocks());
  }
  absl::StrAppendFormat(&s, ", loss %.4f", p.loss());
  if (p.accuracy() >= 0) absl::StrAppend(&s, ", accuracy ", Percent(p.accuracy()));
  if (!p.metrics().empty()) absl::StrAppend(&s, ",", MetricsText(p));
  return s;
}

std::string ProgressBar(const JobInfo& job, int width) {
  const auto& p = job.progress();
  const double f = p.total_clocks() > 0 ? std::min(1.0, 1.0 * p.clock() / p.total_clocks()) : 0;
  const int done = static_cast<int>(f * width);
  return absl::StrCat("[", std::string(done, '#'), std::string(width - done, '-'), "]");
}

// The one-line view of `status --watch` while the job has not ended.
std::string WatchLine(const JobInfo& job, double step_rate) {
  const auto& p = job.progress();
  std::string line = absl::StrCat(job.job_id(), " ", ps::v1::JobState_Name(job.state()));
  if (job.state() != ps::v1::RUNNING || p.total_clocks() <= 0) {
    if (!job.reason().empty()) absl::StrAppend(&line, ": ", job.reason());
    return line;
  }
  absl::StrAppendFormat(&line, " %s %5.1f%% epoch %s clock %d/%d loss %.4f", ProgressBar(job, 20),
                        100.0 * p.clock() / p.total_clocks(), EpochOf(job), p.clock(),
                        p.total_clocks(), p.loss());
  // A program that reports no training accuracy sends -1.
  if (p.accuracy() >= 0) absl::StrAppendFormat(&line, " acc %.1f%%", 100 * p.accuracy());
  if (p.test_accuracy() > 0) absl::StrAppendFormat(&line, " test %.1f%%", 100 * p.test_accuracy());
  absl::StrAppend(&line, MetricsText(p));
  absl::StrAppendFormat(&line, " %.0f samples/s ETA %s", p.samples_per_second(),
                        Eta(job, step_rate));
  return line;
}

// The line printed when a job has ended.
std::string FinalLine(const JobInfo& job) {
  std::string line = absl::StrCat(job.job_id(), " ", ps::v1::JobState_Name(job.state()));
  if (job.start_time_unix_ms() > 0 && job.end_time_unix_ms() >= job.start_time_unix_ms()) {
    absl::StrAppend(&line, " in ",
                    FormatSeconds((job.end_time_unix_ms() - job.start_time_unix_ms()) / 1000.0));
  }
  const auto& p = job.progress();
  if (job.state() == ps::v1::SUCCEEDED) {
    if (p.test_accuracy() > 0) {
      absl::StrAppendFormat(&line, ": test accuracy %s (test loss %.4f)",
                            Percent(p.test_accuracy()), p.test_loss());
    } else if (job.spec().has_program()) {
      absl::StrAppend(&line, ": no test accuracy reported");
    } else {
      absl::StrAppend(&line, ": no test accuracy (evaluate is off)");
    }
    absl::StrAppendFormat(&line, ", train loss %.4f", p.loss());
    if (p.accuracy() >= 0) absl::StrAppend(&line, " accuracy ", Percent(p.accuracy()));
    if (!p.metrics().empty()) absl::StrAppend(&line, ";", MetricsText(p));
  } else if (!job.reason().empty()) {
    absl::StrAppend(&line, ": ", job.reason());
  }
  return line;
}

// ---- checkpoints ----------------------------------------------------------------------

namespace {

bool IsDigits(absl::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isdigit(c); });
}

int CountBits(const std::string& bitmap) {
  int n = 0;
  for (unsigned char byte : bitmap) {
    for (; byte != 0; byte &= byte - 1) ++n;
  }
  return n;
}

std::string Plural(int64_t n, absl::string_view one, absl::string_view many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

// Begin to finish in seconds; -1 when not both known.
double WallSeconds(const CheckpointInfo& c) {
  if (c.start_time_unix_ms() <= 0 || c.end_time_unix_ms() < c.start_time_unix_ms()) return -1;
  return (c.end_time_unix_ms() - c.start_time_unix_ms()) / 1000.0;
}

}  // namespace

std::string FormatBytes(uint64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = bytes / 1024.0;
  int unit = 0;
  // KiB and MiB with one decimal, larger units with two; never "1024.0 KiB".
  while (unit + 1 < 5 && value >= (unit < 2 ? 1023.95 : 1023.995)) {
    value /= 1024;
    ++unit;
  }
  // (Two calls: clang checks a StrFormat format only when it is a constant.)
  if (unit < 2) return absl::StrFormat("%.1f %s", value, kUnits[unit]);
  return absl::StrFormat("%.2f %s", value, kUnits[unit]);
}

std::string CheckpointStateName(v1::CheckpointState state) {
  switch (state) {
    case v1::CHECKPOINT_WRITING:
      return "writing";
    case v1::CHECKPOINT_COMPLETE:
      return "complete";
    case v1::CHECKPOINT_FAILED:
      return "failed";
    case v1::CHECKPOINT_CORRUPT:
      return "corrupt";
    case v1::CHECKPOINT_PRUNED:
      return "pruned";
    default:
      return "unspecified";
  }
}

absl::StatusOr<v1::CheckpointRef> ParseCheckpointRef(absl::string_view text) {
  const auto bad = [text](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not JOB or JOB:ID (e.g. job-3, or job-3:5 for its checkpoint 5): ", why));
  };
  absl::string_view job = text;
  absl::string_view id;
  const size_t colon = text.find(':');
  if (colon != absl::string_view::npos) {
    job = text.substr(0, colon);
    id = text.substr(colon + 1);
  }
  if (job.empty()) return bad("no job id");
  if (std::any_of(job.begin(), job.end(), [](char c) { return absl::ascii_isspace(c); })) {
    return bad("the job id has a space");
  }
  v1::CheckpointRef ref;
  ref.set_job_id(std::string(job));
  if (colon != absl::string_view::npos) {
    uint64_t n = 0;
    if (!IsDigits(id) || !absl::SimpleAtoi(id, &n)) {
      return bad(absl::StrCat("'", id, "' is not a checkpoint number"));
    }
    ref.set_checkpoint_id(n);
  }
  return ref;
}

absl::StatusOr<v1::RecoveryMode> ParseRecoveryMode(absl::string_view text) {
  const std::string lower = Lower(text);
  if (lower == "rollback") return v1::ROLLBACK;
  if (lower == "restore_lost_slots") return v1::RESTORE_LOST_SLOTS;
  if (lower == "default") return v1::RECOVERY_DEFAULT;
  return absl::InvalidArgumentError(
      absl::StrCat("must be rollback, restore_lost_slots or default, not '", text, "'"));
}

absl::Status ApplyCheckpointFlags(const CheckpointFlags& flags, JobSpec& spec) {
  const auto bad = [](auto... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (flags.every_steps) {
    if (*flags.every_steps < 0) {
      return bad("--checkpoint_every_steps must be >= 0 (0: off), not ", *flags.every_steps);
    }
    spec.mutable_checkpoint()->set_every_steps(*flags.every_steps);
  }
  if (flags.every_seconds) {
    if (*flags.every_seconds < 0) {
      return bad("--checkpoint_every_seconds must be >= 0 (0: off), not ", *flags.every_seconds);
    }
    spec.mutable_checkpoint()->set_every_seconds(*flags.every_seconds);
  }
  if (flags.keep) {
    if (*flags.keep < 0) {
      return bad("--checkpoint_keep must be >= 0 (0: the default, 3), not ", *flags.keep);
    }
    spec.mutable_checkpoint()->set_keep_last(*flags.keep);
  }
  if (flags.root) {
    if (!flags.root->empty() && (*flags.root)[0] != '/') {
      return bad("--checkpoint_root must be an absolute path (every server resolves it), not '",
                 *flags.root, "'");
    }
    spec.mutable_checkpoint()->set_root(*flags.root);
  }
  if (flags.recovery) {
    auto mode = ParseRecoveryMode(*flags.recovery);
    if (!mode.ok()) return bad("--recovery ", mode.status().message());
    spec.set_recovery(*mode);
  }
  if (flags.from_checkpoint) {
    auto ref = ParseCheckpointRef(*flags.from_checkpoint);
    if (!ref.ok()) return bad("--from_checkpoint: ", ref.status().message());
    *spec.mutable_from_checkpoint() = *std::move(ref);
  }
  return absl::OkStatus();
}

uint64_t CheckpointRows(const CheckpointInfo& c) {
  uint64_t rows = 0;
  for (const auto& shard : c.shards()) rows += shard.rows();
  return rows;
}

uint64_t CheckpointBytes(const CheckpointInfo& c) {
  uint64_t bytes = 0;
  for (const auto& shard : c.shards()) bytes += shard.bytes();
  return bytes;
}

const CheckpointInfo* LatestComplete(const ListCheckpointsResponse& list) {
  const CheckpointInfo* latest = nullptr;
  for (const auto& c : list.checkpoints()) {
    if (c.state() != v1::CHECKPOINT_COMPLETE) continue;
    if (latest == nullptr || c.checkpoint_id() > latest->checkpoint_id()) latest = &c;
  }
  return latest;
}

const CheckpointInfo* AnsweringCheckpoint(const ListCheckpointsResponse& list,
                                          uint64_t request_seq) {
  const CheckpointInfo* answer = nullptr;
  for (const auto& c : list.checkpoints()) {
    if (c.request_seq() < request_seq || c.request_seq() == 0) continue;
    if (answer == nullptr || c.checkpoint_id() < answer->checkpoint_id()) answer = &c;
  }
  return answer;
}

void PrintCheckpoints(const ListCheckpointsResponse& list, absl::Time now, std::ostream& out) {
  std::vector<const CheckpointInfo*> sorted;
  for (const auto& c : list.checkpoints()) sorted.push_back(&c);
  std::sort(sorted.begin(), sorted.end(), [](const CheckpointInfo* a, const CheckpointInfo* b) {
    return a->checkpoint_id() < b->checkpoint_id();
  });
  const bool errors = std::any_of(sorted.begin(), sorted.end(),
                                  [](const CheckpointInfo* c) { return !c->error().empty(); });
  if (sorted.empty()) {
    out << "no checkpoints\n";
  } else {
    Table t;
    std::vector<std::string> header = {"ID",       "STATE", "CLOCK", "TAKEN",
                                       "DURATION", "SIZE",  "ROWS",  "SHARDS"};
    if (errors) header.push_back("ERROR");
    t.AddRow(std::move(header));
    for (const CheckpointInfo* c : sorted) {
      const bool writing = c->state() == v1::CHECKPOINT_WRITING;
      const int64_t start = c->start_time_unix_ms();
      std::string duration = "-";
      if (WallSeconds(*c) >= 0) {
        duration = FormatSeconds(WallSeconds(*c));
      } else if (writing && start > 0) {
        duration = absl::StrCat(Age(start, now), " so far");
      }
      std::vector<std::string> row = {
          absl::StrCat(c->checkpoint_id()),
          CheckpointStateName(c->state()),
          absl::StrCat(c->clock()),
          start > 0 ? absl::StrCat(FormatTimestamp(start), " (", Age(start, now), " ago)") : "-",
          duration,
          writing ? "-" : FormatBytes(CheckpointBytes(*c)),
          writing ? "-" : absl::StrCat(CheckpointRows(*c)),
          absl::StrCat(c->shards_size())};
      if (errors) row.push_back(c->error().empty() ? "-" : c->error());
      t.AddRow(std::move(row));
    }
    t.Print(out);
  }
  const CheckpointInfo* latest = LatestComplete(list);
  if (latest == nullptr) {
    out << "latest complete: none\n";
    return;
  }
  out << "latest complete: " << latest->checkpoint_id() << " (clock " << latest->clock()
      << (latest->dir().empty() ? "" : absl::StrCat(", ", latest->dir())) << ")\n";
}

std::string CheckpointCompleteLine(const CheckpointInfo& c) {
  std::string line = absl::StrCat(
      "checkpoint ", c.checkpoint_id(), " of ", c.job_id(), " complete: clock ", c.clock(), ", ",
      Plural(CheckpointRows(c), "row", "rows"), ", ", FormatBytes(CheckpointBytes(c)));
  const double seconds = WallSeconds(c) >= 0 ? WallSeconds(c) : c.write_seconds();
  if (seconds > 0) absl::StrAppend(&line, ", ", FormatSeconds(seconds));
  if (c.state() == v1::CHECKPOINT_PRUNED) absl::StrAppend(&line, " (since pruned)");
  return line;
}

std::string CheckpointFailedLine(const CheckpointInfo& c) {
  return absl::StrCat("checkpoint ", c.checkpoint_id(), " of ", c.job_id(), " ",
                      CheckpointStateName(c.state()), " at clock ", c.clock(), ": ",
                      c.error().empty() ? "(no error given)" : c.error());
}

std::string CheckpointWaitLine(absl::string_view job_id, uint64_t request_seq,
                               const CheckpointInfo* answer, const JobInfo* job,
                               absl::Duration waited) {
  std::string line = "waiting for checkpoint";
  if (answer != nullptr) absl::StrAppend(&line, " ", answer->checkpoint_id());
  absl::StrAppend(&line, " of ", job_id, " (");
  if (answer != nullptr) {
    absl::StrAppend(&line, CheckpointStateName(answer->state()), " at clock ", answer->clock());
  } else {
    absl::StrAppend(&line, "request ", request_seq, " not begun");
    if (job != nullptr && job->state() == v1::RUNNING) {
      absl::StrAppend(&line, "; job at clock ", job->progress().clock());
    } else if (job != nullptr) {
      absl::StrAppend(&line, "; job ", v1::JobState_Name(job->state()));
    }
  }
  absl::StrAppend(&line, ", ", FormatSeconds(absl::ToDoubleSeconds(waited)), ")");
  return line;
}

std::string CheckpointPolicySummary(const v1::CheckpointPolicy& policy) {
  std::vector<std::string> triggers;
  if (policy.every_steps() > 0) {
    triggers.push_back(absl::StrCat("every ", Plural(policy.every_steps(), "step", "steps")));
  }
  if (policy.every_seconds() > 0) {
    triggers.push_back(
        absl::StrCat("every ", absl::FormatDuration(absl::Seconds(policy.every_seconds()))));
  }
  std::string s =
      triggers.empty() ? "on request only (psctl checkpoint)" : absl::StrJoin(triggers, " or ");
  absl::StrAppend(&s, ", keep last ",
                  policy.keep_last() > 0 ? absl::StrCat(policy.keep_last()) : "3 (default)");
  absl::StrAppend(&s, ", in ",
                  policy.root().empty() ? "the scheduler's --checkpoint_root" : policy.root());
  return s;
}

std::string RecoverySummary(const JobSpec& spec) {
  switch (spec.recovery()) {
    case v1::ROLLBACK:
      return "rollback";
    case v1::RESTORE_LOST_SLOTS:
      return "restore_lost_slots";
    default:
      return spec.consistency().mode() == v1::ConsistencySpec::SYNC
                 ? "rollback (the default of sync jobs)"
                 : "restore_lost_slots (the default of ssp and async jobs)";
  }
}

bool RestoreInProgress(const JobInfo& job) {
  return job.has_restore() && job.restore().shard_epoch() == job.shard_epoch() &&
         !IsFinal(job.state());
}

std::string RestoreLine(const JobInfo& job) {
  const auto& r = job.restore();
  std::string line;
  if (r.checkpoint_id() == 0) {
    line = "restoring initial values (no complete checkpoint)";
  } else {
    line = absl::StrCat("restoring from checkpoint ", r.checkpoint_id());
    if (!r.source_job_id().empty() && r.source_job_id() != job.job_id()) {
      absl::StrAppend(&line, " of ", r.source_job_id());
    }
    absl::StrAppend(&line, " (clock ", r.clock(), ")");
  }
  if (!r.reason().empty()) absl::StrAppend(&line, ": ", r.reason());
  if (!r.rollback()) {
    absl::StrAppend(&line, "; lost slots only (", Plural(CountBits(r.slots()), "slot", "slots"),
                    ")");
  }
  return line;
}

std::string DataLine(const JobInfo& job) {
  if (job.spec().data_assignment() != ps::v1::DYNAMIC) {
    return "static (the worker of rank r reads every n-th example)";
  }
  const auto& d = job.data();
  if (d.total_ranges() == 0) return "dynamic: no range handed out yet";
  const int epoch = static_cast<int>(
      std::min<uint64_t>(d.epochs(), d.done() / std::max<uint64_t>(1, d.ranges_per_epoch()) + 1));
  std::string line =
      absl::StrCat("dynamic: ", d.done(), " of ", d.total_ranges(), " ranges of ", d.batch_size(),
                   " read (epoch ", epoch, " of ", d.epochs(), "), ", d.leased_size(), " held");
  if (d.reissued() > 0) {
    absl::StrAppend(&line, ", ", d.reissued(), " handed out again after their worker was lost");
  }
  return line;
}

std::vector<std::pair<std::string, std::string>> CheckpointStatusRows(const JobInfo& job) {
  std::vector<std::pair<std::string, std::string>> rows;
  rows.emplace_back(
      "checkpoints:",
      absl::StrCat(
          CheckpointPolicySummary(job.spec().checkpoint()), "; latest complete: ",
          job.latest_checkpoint_id() > 0 ? absl::StrCat(job.latest_checkpoint_id()) : "none"));
  rows.emplace_back("recovery:",
                    absl::StrCat(RecoverySummary(job.spec()), " when a server dies; ",
                                 Plural(job.recoveries(), "recovery", "recoveries"), " so far"));
  if (job.spec().replication().replicas() > 0) {
    rows.emplace_back("replicas:",
                      absl::StrCat(job.spec().replication().replicas(),
                                   " backup per slot, placed on another server (",
                                   job.slot_backups_size() > 0
                                       ? "placed; a sync job's dead server fails over to them)"
                                       : "none placed: 1 server)"));
  }
  const auto& from = job.spec().from_checkpoint();
  if (!from.job_id().empty()) {
    rows.emplace_back("from:",
                      from.checkpoint_id() > 0
                          ? absl::StrCat("checkpoint ", from.checkpoint_id(), " of ", from.job_id())
                          : absl::StrCat("the latest complete checkpoint of ", from.job_id()));
  }
  if (RestoreInProgress(job)) rows.emplace_back("restore:", RestoreLine(job));
  return rows;
}

std::string RollbackLine(const JobInfo& job, uint64_t asked_id) {
  const auto& r = job.restore();
  const uint64_t id = r.checkpoint_id() > 0 ? r.checkpoint_id() : asked_id;
  std::string line = absl::StrCat(job.job_id(), " rolls back to ");
  if (id == 0) return absl::StrCat(line, "its latest complete checkpoint");
  absl::StrAppend(&line, "checkpoint ", id);
  if (r.checkpoint_id() > 0) absl::StrAppend(&line, " (clock ", r.clock(), ")");
  return line;
}

std::string ResubmitNote(const JobInfo& new_job, absl::string_view old_job_id, uint64_t asked_id) {
  const auto& r = new_job.restore();
  std::string from;
  if (r.checkpoint_id() > 0 && (r.source_job_id().empty() || r.source_job_id() == old_job_id)) {
    from = absl::StrCat("its checkpoint ", r.checkpoint_id(), " (clock ", r.clock(), ")");
  } else if (new_job.spec().from_checkpoint().checkpoint_id() > 0) {
    from = absl::StrCat("its checkpoint ", new_job.spec().from_checkpoint().checkpoint_id());
  } else if (asked_id > 0) {
    from = absl::StrCat("its checkpoint ", asked_id);
  } else {
    from = "its latest complete checkpoint";
  }
  return absl::StrCat(old_job_id, " has ended, so the scheduler submitted a new job from ", from,
                      ": ", new_job.job_id(), " (", v1::JobState_Name(new_job.state()),
                      "); follow it with: psctl status ", new_job.job_id(), " --watch");
}

void MakePrintable(google::protobuf::Message* message) {
  const google::protobuf::Descriptor* descriptor = message->GetDescriptor();
  const google::protobuf::Reflection* reflection = message->GetReflection();
  using Field = google::protobuf::FieldDescriptor;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const Field* field = descriptor->field(i);
    if (field->type() == Field::TYPE_STRING) {
      if (field->is_repeated()) {
        for (int k = 0; k < reflection->FieldSize(*message, field); ++k) {
          reflection->SetRepeatedString(
              message, field, k,
              Printable(reflection->GetRepeatedString(*message, field, k), kMaxPrintedBytes));
        }
      } else if (reflection->HasField(*message, field) || !field->has_presence()) {
        const std::string value = reflection->GetString(*message, field);
        if (!value.empty()) {
          reflection->SetString(message, field, Printable(value, kMaxPrintedBytes));
        }
      }
    } else if (field->cpp_type() == Field::CPPTYPE_MESSAGE) {
      if (field->is_repeated()) {
        for (int k = 0; k < reflection->FieldSize(*message, field); ++k) {
          MakePrintable(reflection->MutableRepeatedMessage(message, field, k));
        }
      } else if (reflection->HasField(*message, field)) {
        MakePrintable(reflection->MutableMessage(message, field));
      }
    }
  }
}

}  // namespace psctl
}  // namespace ps
