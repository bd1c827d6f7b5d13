// Dynamic data assignment: which ranges of a job's epochs were handed out, to which worker,
// and which are done (v1::DataLedger, kept in the job's JobInfo and so in the state store).
//
// An epoch of `examples_per_epoch` examples is cut into ranges of `batch_size` (the last may be
// shorter); range g of the job is position g % ranges_per_epoch of epoch g / ranges_per_epoch.
// Ranges are handed out in index order; a range whose holder was lost goes back to the front of
// the line. A range is done when its holder reports it finished: each is done exactly once.
// Which examples a range holds is the workers' to compute (ps::RangeExamples).
#ifndef PS_SCHEDULER_DATA_LEDGER_H_
#define PS_SCHEDULER_DATA_LEDGER_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "ps/v1/scheduler.pb.h"

namespace ps {

// Bounds of a ledger's shape: a clock must stay far below the servers' 2^48.
inline constexpr int64_t kMaxExamplesPerEpoch = int64_t{1} << 40;
inline constexpr uint64_t kMaxTotalRanges = uint64_t{1} << 40;
inline constexpr int kMaxLeaseBatchSize = 1 << 20;

// Sets up an empty ledger. Ranges below start_clock * workers count as done (a job that
// starts from, or rolls back to, a checkpoint of that clock). INVALID_ARGUMENT for a shape out
// of bounds.
absl::Status InitLedger(int64_t examples_per_epoch, int32_t batch_size, int32_t epochs,
                        uint32_t workers, int64_t start_clock, v1::DataLedger* ledger);
// OK when a worker's view of the data (examples, batch) is the ledger's; else INVALID_ARGUMENT
// naming both.
absl::Status CheckShape(const v1::DataLedger& ledger, int64_t examples_per_epoch,
                        int32_t batch_size);

// Marks done the ranges of `finished` that `worker_id` holds; the others (a range handed to
// another worker after a rollback, or reported twice) are ignored. Returns how many were done.
int FinishRanges(uint32_t worker_id, absl::Span<const uint64_t> finished, v1::DataLedger* ledger);
// Hands `worker_id` the next range: the lowest returned one, else the next fresh one; none when
// every range is done or held.
std::optional<v1::DataRange> TakeRange(uint32_t worker_id, v1::DataLedger* ledger);
// The ranges `worker_id` held go back to be handed out again (the worker was lost). Returns
// how many.
int ReturnRanges(uint32_t worker_id, v1::DataLedger* ledger);
// Rolls the ledger back to `clock`: ranges below clock * clock_workers are done, no range is
// held, the rest are handed out afresh.
void ResetLedger(int64_t clock, v1::DataLedger* ledger);

// The range of index `index` (no holder).
v1::DataRange RangeAt(const v1::DataLedger& ledger, uint64_t index);
bool AllDone(const v1::DataLedger& ledger);
// Epochs whose every range is done.
int32_t EpochsDone(const v1::DataLedger& ledger);
int64_t TotalClocks(const v1::DataLedger& ledger);

}  // namespace ps

#endif  // PS_SCHEDULER_DATA_LEDGER_H_
