// Dynamic data assignment: the scheduler hands out the ranges of a DYNAMIC job's epochs.
#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "common/printable.h"
#include "common/status_macros.h"
#include "scheduler/data_ledger.h"
#include "scheduler/scheduler.h"

namespace ps {
namespace {

// A worker with nothing to read while others hold the last ranges asks again after this long.
constexpr int64_t kRetryAfterMs = 50;
// Ranges one request may report finished (a worker reports its last step or two).
constexpr int kMaxFinishedPerLease = 1024;

}  // namespace

absl::StatusOr<v1::LeaseDataResponse> Scheduler::LeaseData(const v1::LeaseDataRequest& req) {
  PS_RETURN_IF_ERROR(CheckJobId(req.job_id()));
  if (req.finished_size() > kMaxFinishedPerLease) {
    return absl::InvalidArgumentError(absl::StrCat(
        req.finished_size(), " finished ranges in one request; at most ", kMaxFinishedPerLease));
  }
  absl::MutexLock lock(&mu_);
  Job* job = FindJob(req.job_id());
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", req.job_id(), "'"));
  v1::JobInfo& info = job->info;
  if (info.state() != v1::RUNNING) {
    return absl::FailedPreconditionError(absl::StrCat("job ", req.job_id(), " is not running (",
                                                      v1::JobState_Name(info.state()), ")"));
  }
  if (info.spec().data_assignment() != v1::DYNAMIC) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", req.job_id(),
                     " reads its data by STATIC assignment (data_assignment in its spec)"));
  }
  int index = -1;
  for (int i = 0; i < info.worker_nodes_size(); ++i) {
    if (info.worker_nodes(i) == req.node_id()) index = i;
  }
  if (index < 0 || info.worker_ids(index) != req.worker_id()) {
    return absl::FailedPreconditionError(absl::StrCat("node ", req.node_id(), " is not worker ",
                                                      req.worker_id(), " of job ", req.job_id(),
                                                      " (was it declared dead?)"));
  }
  PS_RETURN_IF_ERROR(membership_.CheckNodeSecret(req.node_id(), req.node_secret()));
  Changes changes;
  if (!info.has_data()) {
    // A job that starts from a checkpoint (or rolled back before its first lease) reads on
    // from the checkpoint's clock.
    const int64_t start = info.restore().rollback() ? info.restore().clock() : 0;
    PS_RETURN_IF_ERROR(InitLedger(req.examples_per_epoch(), req.batch_size(), info.spec().epochs(),
                                  static_cast<uint32_t>(std::max(1, info.spec().num_workers())),
                                  start, info.mutable_data()));
    LOG(INFO) << "job " << info.job_id() << ": data cut into " << info.data().total_ranges()
              << " ranges of " << req.batch_size() << " examples (" << info.data().epochs()
              << " epochs of " << req.examples_per_epoch() << ")";
  } else {
    PS_RETURN_IF_ERROR(CheckShape(info.data(), req.examples_per_epoch(), req.batch_size()));
  }
  v1::DataLedger& ledger = *info.mutable_data();
  const int32_t epochs_before = EpochsDone(ledger);
  if (req.restart()) ReturnDataOf(job, req.worker_id(), clock_(), &changes);
  FinishRanges(req.worker_id(), req.finished(), &ledger);
  v1::LeaseDataResponse resp;
  if (req.take()) {
    if (std::optional<v1::DataRange> range = TakeRange(req.worker_id(), &ledger)) {
      *resp.mutable_range() = *range;
    } else if (!AllDone(ledger)) {
      resp.set_retry_after_ms(kRetryAfterMs);
    }
  }
  const int32_t epochs_done = EpochsDone(ledger);
  if (epochs_done > epochs_before) {
    AddEvent(job,
             absl::StrCat("data: epoch ", epochs_done, " of ", ledger.epochs(), " read (",
                          ledger.done(), " of ", ledger.total_ranges(), " ranges",
                          ledger.reissued() > 0
                              ? absl::StrCat(", ", ledger.reissued(),
                                             " handed out again after their worker was lost")
                              : "",
                          ")"),
             clock_(), &changes);
  }
  resp.set_all_done(AllDone(ledger));
  resp.set_epochs_done(epochs_done);
  resp.set_total_ranges(ledger.total_ranges());
  resp.set_total_clocks(TotalClocks(ledger));
  resp.set_ranges_per_epoch(ledger.ranges_per_epoch());
  resp.set_done(ledger.done());
  changes.jobs.insert(job->number);  // not synced: the WAL survives a crash of the scheduler
  PS_RETURN_IF_ERROR(Commit(&changes));
  return resp;
}

void Scheduler::ReturnDataOf(Job* job, uint32_t worker_id, absl::Time now, Changes* changes) {
  if (!job->info.has_data()) return;
  const int returned = ReturnRanges(worker_id, job->info.mutable_data());
  if (returned == 0) return;
  changes->jobs.insert(job->number);
  AddEvent(job,
           absl::StrCat("data: ", returned, returned == 1 ? " range" : " ranges", " of worker ",
                        worker_id, " handed out again"),
           now, changes);
}

}  // namespace ps
