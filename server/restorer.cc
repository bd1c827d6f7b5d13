#include "server/restorer.h"

#include <glog/logging.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/checkpoint_io.h"

namespace ps {

namespace {

// The order without the fields that do not change what it does.
v1::RestoreOrder Essentials(const v1::RestoreOrder& order) {
  v1::RestoreOrder e = order;
  e.clear_reason();
  e.clear_signature();  // checked by the service; it follows from the rest
  for (v1::CheckpointShard& shard : *e.mutable_shards()) {
    shard.clear_address();
    shard.clear_rows();
    shard.clear_bytes();
  }
  return e;
}

std::string Describe(const v1::RestoreOrder& order) {
  return absl::StrCat("checkpoint ", order.checkpoint_id(),
                      order.source_job_id().empty() ? "" : " of job " + order.source_job_id(),
                      ", clock ", order.clock(), order.rollback() ? ", rollback" : "", ", ",
                      order.shards_size(), " shard(s)");
}

}  // namespace

Restorer::Restorer(TableStore* store, ConsistencyGate* gate, ServerMetrics* metrics,
                   CheckpointRoots roots)
    : store_(store), gate_(gate), metrics_(metrics), roots_(std::move(roots)) {}

absl::Status Restorer::Check(const v1::RestoreRequest& req, std::vector<bool>* slots) const {
  const v1::RestoreOrder& order = req.order();
  if (req.job_id().empty()) return absl::InvalidArgumentError("restore: job_id is empty");
  PS_RETURN_IF_ERROR(gate_->ModeOf(req.job_id()).status());  // a configured job
  if (order.shard_epoch() == 0) return absl::InvalidArgumentError("restore: shard_epoch is 0");
  if (const uint64_t epoch = store_->ShardEpoch(req.job_id()); epoch != order.shard_epoch()) {
    return absl::FailedPreconditionError(absl::StrCat("restore order of shard map epoch ",
                                                      order.shard_epoch(), " for job ",
                                                      req.job_id(), "; this server is at ", epoch));
  }
  if (order.rollback()) {
    slots->assign(kNumSlots, true);
  } else if (order.slots().empty()) {
    slots->assign(kNumSlots, false);
  } else {
    auto decoded = DecodeSlotBitmap(order.slots());
    if (!decoded.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("restore order slots: ", decoded.status().message()));
    }
    *slots = std::move(*decoded);
  }
  if (order.rollback() && order.clock() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("restore order rolls back to clock ", order.clock(), "; clocks are >= 0"));
  }
  PS_RETURN_IF_ERROR(HeldSlots({order.shards().begin(), order.shards().end()}).status());
  if (order.checkpoint_id() != 0) {
    if (order.shards().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("restore order for checkpoint ", order.checkpoint_id(), " lists no shards"));
    }
    for (const v1::CheckpointShard& shard : order.shards()) {
      PS_RETURN_IF_ERROR(roots_.Check(shard.path(), "restore order shard path"));
    }
    if (store_->JobTables(req.job_id()).empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", req.job_id(), " has no tables on this server yet (create them, then Restore)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::RestoreResponse> Restorer::Restore(const v1::RestoreRequest& req,
                                                      absl::Time deadline) {
  std::vector<bool> slots;
  PS_RETURN_IF_ERROR(Check(req, &slots));
  const uint64_t epoch = req.order().shard_epoch();
  std::shared_ptr<Outcome> outcome;
  {
    absl::MutexLock l(&mu_);
    auto& outcomes = outcomes_[req.job_id()];
    v1::RestoreOrder essentials = Essentials(req.order());
    if (auto it = outcomes.find(epoch); it != outcomes.end()) {
      // Outcomes are only trimmed once done; ForgetJob leaves this one to its holders.
      const std::shared_ptr<Outcome> first = it->second;
      if (!google::protobuf::util::MessageDifferencer::Equals(first->order, essentials)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "job ", req.job_id(), " already had a restore order for shard epoch ", epoch, " (",
            Describe(first->order), "); this different order (", Describe(essentials),
            ") is refused: a new order needs a new shard epoch"));
      }
      while (!first->done) {
        if (done_.WaitWithDeadline(&mu_, deadline) && !first->done) {
          return absl::UnavailableError(absl::StrCat("the restore of job ", req.job_id(),
                                                     " for shard epoch ", epoch,
                                                     " is still running; call again"));
        }
      }
      return first->result;
    }
    outcome = std::make_shared<Outcome>();
    outcome->order = std::move(essentials);
    outcomes.emplace(epoch, outcome);
  }
  absl::StatusOr<v1::RestoreResponse> result = Run(req, slots);
  absl::MutexLock l(&mu_);
  outcome->result = result;
  outcome->done = true;
  done_.SignalAll();
  auto job = outcomes_.find(req.job_id());
  if (job == outcomes_.end()) return result;  // forgotten meanwhile (ForgetJob)
  auto& outcomes = job->second;
  while (static_cast<int>(outcomes.size()) > kKeepPerJob && outcomes.begin()->second->done &&
         outcomes.begin()->first != epoch) {
    outcomes.erase(outcomes.begin());
  }
  return result;
}

void Restorer::ForgetJob(const std::string& job_id) {
  absl::MutexLock l(&mu_);
  outcomes_.erase(job_id);
}

absl::StatusOr<v1::RestoreResponse> Restorer::Run(const v1::RestoreRequest& req,
                                                  const std::vector<bool>& slots) {
  const absl::Time start = absl::Now();
  const v1::RestoreOrder& order = req.order();
  const std::string& job_id = req.job_id();
  std::vector<bool> load = store_->OwnedSlots(job_id);
  uint32_t num_load = 0;
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    load[s] = load[s] && slots[s];
    num_load += load[s];
  }
  LOG(INFO) << "restore of job " << job_id << " (shard epoch " << order.shard_epoch() << ", "
            << order.reason() << "): " << num_load << " slots from checkpoint "
            << order.checkpoint_id() << (order.rollback() ? ", rolling back to clock " : "")
            << (order.rollback() ? absl::StrCat(order.clock()) : "");
  CheckpointRows rows;
  absl::Status status;
  if (order.checkpoint_id() != 0 && num_load > 0) {
    CheckpointReadOptions options;
    options.job_id = order.source_job_id().empty() ? job_id : order.source_job_id();
    options.checkpoint_id = order.checkpoint_id();
    auto read = ReadCheckpointSlots({order.shards().begin(), order.shards().end()}, load,
                                    store_->JobTables(job_id), options);
    if (read.ok()) {
      rows = std::move(*read);
    } else {
      status = read.status();
    }
  }
  v1::RestoreResponse response;
  if (status.ok() && order.rollback()) {
    auto clocks = gate_->ResetClocks(job_id, order.clock(), [&]() -> absl::Status {
      PS_RETURN_IF_ERROR(store_->LoadSlots(job_id, load, rows.rows));
      store_->ClearPending(job_id);
      return absl::OkStatus();
    });
    status = clocks.status();
  } else if (status.ok()) {
    status = store_->LoadSlots(job_id, load, rows.rows);
  }
  if (!status.ok()) {
    // A job dropped meanwhile loses its tables: say so, not that the checkpoint is bad.
    if (absl::Status dropped = store_->CheckNotDropped(job_id); !dropped.ok()) status = dropped;
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (metrics_ != nullptr) metrics_->RecordRestore(status, seconds);
  if (!status.ok()) {
    LOG(WARNING) << "restore of job " << job_id << " (shard epoch " << order.shard_epoch()
                 << ") failed; no row changed: " << status;
    return status;
  }
  response.set_rows(rows.num_rows);
  response.set_bytes(rows.bytes);
  response.set_seconds(seconds);
  for (const auto& [worker, clock] : gate_->Clocks(job_id)) {
    (*response.mutable_worker_clocks())[worker] = clock;
  }
  LOG(INFO) << "restore of job " << job_id << " (shard epoch " << order.shard_epoch()
            << "): loaded " << rows.num_rows << " rows (" << rows.bytes << " bytes) in " << seconds
            << " s";
  return response;
}

}  // namespace ps
