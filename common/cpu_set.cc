#include "common/cpu_set.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace ps {
namespace {

absl::Status BadList(absl::string_view list, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("CPU list '", list, "': ", why, " (expected numbers and ranges, e.g. 0-3,8)"));
}

absl::StatusOr<int> ParseCpu(absl::string_view list, absl::string_view text) {
  int cpu = -1;
  if (!absl::SimpleAtoi(text, &cpu) || cpu < 0 || text.empty() || text[0] == '+') {
    return BadList(list, absl::StrCat("'", text, "' is not a CPU number"));
  }
  if (cpu >= CPU_SETSIZE) {
    return BadList(list, absl::StrCat("CPU ", cpu, " is beyond the largest, ", CPU_SETSIZE - 1));
  }
  return cpu;
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view list) {
  if (list.empty()) return BadList(list, "it is empty");
  std::vector<int> cpus;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    std::vector<absl::string_view> ends = absl::StrSplit(part, absl::MaxSplits('-', 1));
    absl::StatusOr<int> first = ParseCpu(list, ends[0]);
    if (!first.ok()) return first.status();
    absl::StatusOr<int> last = ends.size() == 2 ? ParseCpu(list, ends[1]) : first;
    if (!last.ok()) return last.status();
    if (*last < *first) return BadList(list, absl::StrCat("range ", part, " is reversed"));
    for (int cpu = *first; cpu <= *last; ++cpu) cpus.push_back(cpu);
  }
  std::sort(cpus.begin(), cpus.end());
  if (auto twice = std::adjacent_find(cpus.begin(), cpus.end()); twice != cpus.end()) {
    return BadList(list, absl::StrCat("CPU ", *twice, " is named twice"));
  }
  return cpus;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    parts.push_back(j == i ? absl::StrCat(cpus[i]) : absl::StrCat(cpus[i], "-", cpus[j]));
    i = j + 1;
  }
  return absl::StrJoin(parts, ",");
}

absl::StatusOr<std::vector<int>> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    return absl::InternalError(absl::StrCat("sched_getaffinity: ", std::strerror(errno)));
  }
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

absl::StatusOr<std::vector<int>> PinToCpus(absl::string_view list) {
  absl::StatusOr<std::vector<int>> cpus = ParseCpuList(list);
  if (!cpus.ok()) return cpus.status();
  absl::StatusOr<std::vector<int>> allowed = AllowedCpus();
  if (!allowed.ok()) return allowed.status();
  std::vector<int> refused;
  std::set_difference(cpus->begin(), cpus->end(), allowed->begin(), allowed->end(),
                      std::back_inserter(refused));
  if (!refused.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CPU(s) ", FormatCpuList(refused), " of '", list,
        "' are not available to this process (it may use ", FormatCpuList(*allowed), ")"));
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : *cpus) CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    return absl::InternalError(
        absl::StrCat("sched_setaffinity(", list, "): ", std::strerror(errno)));
  }
  return cpus;
}

}  // namespace ps
