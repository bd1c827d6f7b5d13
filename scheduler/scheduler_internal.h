// Small helpers shared by the files that implement ps::Scheduler (scheduler*.cc); not for
// other code.
#ifndef PS_SCHEDULER_SCHEDULER_INTERNAL_H_
#define PS_SCHEDULER_SCHEDULER_INTERNAL_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "ps/v1/scheduler.pb.h"

namespace ps {
namespace scheduler_internal {

inline int64_t ToMs(absl::Time t) { return absl::ToUnixMillis(t); }

inline bool IsFinished(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

// "1 worker", "3 workers".
inline std::string Plural(int64_t n, absl::string_view word) {
  return absl::StrCat(n, " ", word, n == 1 ? "" : "s");
}

// The index of `value` in a repeated field, or -1.
template <typename Field, typename T>
int IndexOf(const Field& field, T value) {
  auto it = std::find(field.begin(), field.end(), value);
  return it == field.end() ? -1 : static_cast<int>(it - field.begin());
}

// Slot s -> index of its server in info.server_addresses().
std::vector<int> SlotOwners(const v1::JobInfo& info);

// Sets info.slot_backups for the job's current slot owners (JobSpec.replication); clears it
// when the job has no replicas or fewer than 2 servers left.
void PlaceBackups(v1::JobInfo* info);

}  // namespace scheduler_internal
}  // namespace ps

#endif  // PS_SCHEDULER_SCHEDULER_INTERNAL_H_
