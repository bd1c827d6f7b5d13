#include "scheduler/data_ledger.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

void Recount(v1::DataLedger* ledger) {
  ledger->set_done(ledger->next_index() - ledger->leased_size() - ledger->returned_size());
}

}  // namespace

absl::Status InitLedger(int64_t examples_per_epoch, int32_t batch_size, int32_t epochs,
                        uint32_t workers, int64_t start_clock, v1::DataLedger* ledger) {
  if (examples_per_epoch < 1 || examples_per_epoch > kMaxExamplesPerEpoch) {
    return absl::InvalidArgumentError(absl::StrCat("examples_per_epoch = ", examples_per_epoch,
                                                   " must be in 1..", kMaxExamplesPerEpoch));
  }
  if (batch_size < 1 || batch_size > kMaxLeaseBatchSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size = ", batch_size, " must be in 1..", kMaxLeaseBatchSize));
  }
  if (epochs < 1) return absl::InvalidArgumentError(absl::StrCat("epochs = ", epochs));
  if (workers < 1) return absl::InvalidArgumentError(absl::StrCat("workers = ", workers));
  const uint64_t per_epoch = CeilDiv(examples_per_epoch, batch_size);
  if (per_epoch * static_cast<uint64_t>(epochs) > kMaxTotalRanges) {
    return absl::InvalidArgumentError(absl::StrCat(
        epochs, " epochs of ", per_epoch, " ranges are more than ", kMaxTotalRanges, " ranges"));
  }
  ledger->Clear();
  ledger->set_examples_per_epoch(examples_per_epoch);
  ledger->set_batch_size(batch_size);
  ledger->set_epochs(epochs);
  ledger->set_ranges_per_epoch(per_epoch);
  ledger->set_total_ranges(per_epoch * static_cast<uint64_t>(epochs));
  ledger->set_clock_workers(workers);
  ResetLedger(start_clock, ledger);
  return absl::OkStatus();
}

absl::Status CheckShape(const v1::DataLedger& ledger, int64_t examples_per_epoch,
                        int32_t batch_size) {
  if (examples_per_epoch == ledger.examples_per_epoch() && batch_size == ledger.batch_size()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "this worker reads ", examples_per_epoch, " examples per epoch in batches of ", batch_size,
      ", but the job's data was cut for ", ledger.examples_per_epoch(), " in batches of ",
      ledger.batch_size(), " (every worker must see the same data)"));
}

int FinishRanges(uint32_t worker_id, absl::Span<const uint64_t> finished, v1::DataLedger* ledger) {
  int count = 0;
  for (uint64_t index : finished) {
    auto* leased = ledger->mutable_leased();
    auto it = std::find_if(leased->begin(), leased->end(), [&](const v1::DataRange& r) {
      return r.index() == index && r.worker_id() == worker_id;
    });
    if (it == leased->end()) continue;
    leased->erase(it);
    ++count;
  }
  Recount(ledger);
  return count;
}

std::optional<v1::DataRange> TakeRange(uint32_t worker_id, v1::DataLedger* ledger) {
  uint64_t index;
  if (ledger->returned_size() > 0) {
    index = ledger->returned(0);
    ledger->mutable_returned()->erase(ledger->returned().begin());
    ledger->set_reissued(ledger->reissued() + 1);
  } else if (ledger->next_index() < ledger->total_ranges()) {
    index = ledger->next_index();
    ledger->set_next_index(index + 1);
  } else {
    return std::nullopt;
  }
  v1::DataRange range = RangeAt(*ledger, index);
  range.set_worker_id(worker_id);
  *ledger->add_leased() = range;
  Recount(ledger);
  return range;
}

int ReturnRanges(uint32_t worker_id, v1::DataLedger* ledger) {
  std::vector<uint64_t> returned(ledger->returned().begin(), ledger->returned().end());
  auto* leased = ledger->mutable_leased();
  int count = 0;
  for (auto it = leased->begin(); it != leased->end();) {
    if (it->worker_id() != worker_id) {
      ++it;
      continue;
    }
    returned.push_back(it->index());
    it = leased->erase(it);
    ++count;
  }
  std::sort(returned.begin(), returned.end());
  ledger->mutable_returned()->Assign(returned.begin(), returned.end());
  Recount(ledger);
  return count;
}

void ResetLedger(int64_t clock, v1::DataLedger* ledger) {
  const uint64_t start = static_cast<uint64_t>(std::max<int64_t>(0, clock));
  const uint64_t next = start > ledger->total_ranges() / std::max(1u, ledger->clock_workers())
                            ? ledger->total_ranges()
                            : start * ledger->clock_workers();
  ledger->set_next_index(std::min(next, ledger->total_ranges()));
  ledger->clear_leased();
  ledger->clear_returned();
  Recount(ledger);
}

v1::DataRange RangeAt(const v1::DataLedger& ledger, uint64_t index) {
  v1::DataRange range;
  const uint64_t per_epoch = std::max<uint64_t>(1, ledger.ranges_per_epoch());
  range.set_index(index);
  range.set_epoch(static_cast<int32_t>(index / per_epoch) + 1);
  range.set_position(index % per_epoch);
  range.set_clock(static_cast<int64_t>(index / std::max(1u, ledger.clock_workers())));
  return range;
}

bool AllDone(const v1::DataLedger& ledger) {
  return ledger.total_ranges() > 0 && ledger.done() == ledger.total_ranges();
}

int32_t EpochsDone(const v1::DataLedger& ledger) {
  uint64_t first_open = ledger.next_index();
  for (const v1::DataRange& r : ledger.leased()) first_open = std::min(first_open, r.index());
  for (uint64_t index : ledger.returned()) first_open = std::min(first_open, index);
  return static_cast<int32_t>(first_open / std::max<uint64_t>(1, ledger.ranges_per_epoch()));
}

int64_t TotalClocks(const v1::DataLedger& ledger) {
  return static_cast<int64_t>(
      CeilDiv(ledger.total_ranges(), std::max<uint64_t>(1, ledger.clock_workers())));
}

}  // namespace ps
