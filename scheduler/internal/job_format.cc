#include "scheduler/internal/job_format.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

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
  std::string model = spec.model().empty() ? "(no model)" : spec.model();
  if (spec.layers_size() > 0) absl::StrAppend(&model, " ", absl::StrJoin(spec.layers(), ","));
  parts.push_back(model);
  const auto& c = spec.consistency();
  std::string mode = Lower(ps::v1::ConsistencySpec::Mode_Name(c.mode()));
  if (c.mode() == ps::v1::ConsistencySpec::SSP) absl::StrAppend(&mode, "(", c.staleness(), ")");
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

// "epoch 3/5, clock 1932/4690 (41.2%), loss 0.3921, accuracy 86.04%"
std::string ProgressSummary(const JobInfo& job) {
  const auto& p = job.progress();
  std::string s = absl::StrFormat("epoch %d/%d, clock %d/%d", p.epoch(), TotalEpochs(job.spec()),
                                  p.clock(), p.total_clocks());
  if (p.total_clocks() > 0) {
    absl::StrAppendFormat(&s, " (%.1f%%)", 100.0 * p.clock() / p.total_clocks());
  }
  absl::StrAppendFormat(&s, ", loss %.4f, accuracy %s", p.loss(), Percent(p.accuracy()));
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
  absl::StrAppendFormat(&line, " %s %5.1f%% epoch %d/%d clock %d/%d loss %.4f acc %.1f%%",
                        ProgressBar(job, 20), 100.0 * p.clock() / p.total_clocks(), p.epoch(),
                        TotalEpochs(job.spec()), p.clock(), p.total_clocks(), p.loss(),
                        100 * p.accuracy());
  if (p.test_accuracy() > 0) absl::StrAppendFormat(&line, " test %.1f%%", 100 * p.test_accuracy());
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
    } else {
      absl::StrAppend(&line, ": no test accuracy (evaluate is off)");
    }
    absl::StrAppendFormat(&line, ", train loss %.4f accuracy %s", p.loss(), Percent(p.accuracy()));
  } else if (!job.reason().empty()) {
    absl::StrAppend(&line, ": ", job.reason());
  }
  return line;
}

}  // namespace psctl
}  // namespace ps
