// Errors and helpers shared by TableStore's source files (table_store*.cc).
#ifndef PS_SERVER_INTERNAL_STORE_HELPERS_H_
#define PS_SERVER_INTERNAL_STORE_HELPERS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/reject_reason.h"
#include "server/table_store.h"

namespace ps {
namespace store_internal {

inline absl::Status TableDroppedError(const TableStore::Table& t) {
  return Rejected(RejectReason::kDroppedJob,
                  absl::FailedPreconditionError(absl::StrCat(
                      "table ", t.spec.table_id(), " of job '", t.spec.job_id(),
                      "' was dropped from this server while the request ran (the job ended)")));
}

inline absl::Status NoMemoryError(const TableStore::Table& t) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "table ", t.spec.table_id(), " of job '", t.spec.job_id(),
      "': no memory for a new row (the system refused it, or the table's arena is full)"));
}

// Erases the summed gradients (of every clock) of the rows whose table id passes `of_tables`
// from a slot's pending map (clock -> (table id, key) -> sum), and the clocks left empty.
template <typename PendingMap, typename Pred>
void ErasePendingIf(PendingMap& pending, Pred of_tables) {
  for (auto clock = pending.begin(); clock != pending.end();) {
    auto& sums = clock->second;
    for (auto it = sums.begin(); it != sums.end();) {
      if (of_tables(it->first.first)) {
        sums.erase(it++);
      } else {
        ++it;
      }
    }
    if (sums.empty()) {
      pending.erase(clock++);
    } else {
      ++clock;
    }
  }
}

}  // namespace store_internal
}  // namespace ps

#endif  // PS_SERVER_INTERNAL_STORE_HELPERS_H_
