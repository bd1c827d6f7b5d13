// psctl's text views of jobs: durations, tables, progress lines.
#ifndef PS_SCHEDULER_INTERNAL_JOB_FORMAT_H_
#define PS_SCHEDULER_INTERNAL_JOB_FORMAT_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "ps/v1/scheduler.pb.h"

namespace ps {
namespace psctl {

using v1::JobInfo;
using v1::JobSpec;

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

#endif  // PS_SCHEDULER_INTERNAL_JOB_FORMAT_H_
