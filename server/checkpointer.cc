#include "server/checkpointer.h"

#include <glog/logging.h>

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/shard_map.h"

namespace ps {

Checkpointer::Checkpointer(TableStore* store, CheckpointerOptions options, ServerMetrics* metrics)
    : store_(store), metrics_(metrics), options_(std::move(options)) {
  writer_ = std::thread([this] { WriterLoop(); });
}

Checkpointer::~Checkpointer() { Shutdown(); }

void Checkpointer::Shutdown() {
  std::vector<std::unique_ptr<JobSnapshot>> abandoned;  // freed without the lock
  {
    absl::MutexLock l(&mu_);
    if (!shutdown_) {
      shutdown_ = true;
      cancel_.store(true);
      for (const auto& [job_id, id] : queue_) {
        Entry& entry = *jobs_[job_id][id];
        entry.state = State::kDone;
        entry.status = absl::UnavailableError(absl::StrCat(
            "the server shut down before writing checkpoint ", id, " of job ", job_id));
        abandoned.push_back(std::move(entry.snapshot));
      }
      queue_.clear();
      changed_.SignalAll();
    }
  }
  std::call_once(join_once_, [this] { writer_.join(); });
}

int Checkpointer::InFlight() const {
  int n = 0;
  for (const auto& [job_id, entries] : jobs_) {
    for (const auto& [id, entry] : entries) n += entry->state != State::kDone;
  }
  return n;
}

void Checkpointer::Forget(JobEntries& entries) {
  for (auto it = entries.begin();
       static_cast<int>(entries.size()) > options_.keep_per_job && it != entries.end();) {
    if (it->second->state == State::kDone) {
      it = entries.erase(it);
    } else {
      ++it;
    }
  }
}

absl::StatusOr<v1::CheckpointResponse> Checkpointer::Begin(const v1::CheckpointRequest& req) {
  if (req.path().empty()) return absl::InvalidArgumentError("checkpoint path is empty");
  if (req.checkpoint_id() == 0) return absl::InvalidArgumentError("checkpoint_id must be > 0");
  if (absl::Status s = options_.roots.Check(req.path(), "checkpoint path"); !s.ok()) return s;
  Entry* entry = nullptr;
  {
    absl::MutexLock l(&mu_);
    while (true) {
      if (shutdown_) return absl::UnavailableError("the server is shutting down");
      JobEntries& entries = jobs_[req.job_id()];
      auto it = entries.find(req.checkpoint_id());
      if (it == entries.end()) break;
      const Entry& e = *it->second;
      if (e.path != req.path()) {
        return absl::FailedPreconditionError(absl::StrCat("checkpoint ", req.checkpoint_id(),
                                                          " of job ", req.job_id(),
                                                          " was already taken to ", e.path));
      }
      if (e.state != State::kSnapshotting) return e.response;  // a retry
      changed_.Wait(&mu_);  // the first call is copying the rows; then re-check
    }
    if (const int n = InFlight(); n >= options_.max_in_flight) {
      return absl::ResourceExhaustedError(absl::StrCat(
          n, " checkpoints are being written; at most ", options_.max_in_flight,
          " at once (checkpoint ", req.checkpoint_id(), " of job ", req.job_id(), " not taken)"));
    }
    auto added = std::make_unique<Entry>();
    added->path = req.path();
    added->clock = req.clock();
    entry = added.get();
    jobs_[req.job_id()][req.checkpoint_id()] = std::move(added);
  }
  absl::StatusOr<v1::CheckpointResponse> response = Snapshot(req, entry);
  absl::MutexLock l(&mu_);
  changed_.SignalAll();
  if (!response.ok() || shutdown_) {
    Erase(req.job_id(), req.checkpoint_id());
    if (response.ok()) return absl::UnavailableError("the server is shutting down");
    return response.status();
  }
  entry->response = *response;
  entry->state = State::kQueued;
  queue_.emplace_back(req.job_id(), req.checkpoint_id());
  return response;
}

absl::StatusOr<v1::CheckpointResponse> Checkpointer::Snapshot(const v1::CheckpointRequest& req,
                                                              Entry* entry) {
  const absl::Time start = absl::Now();
  const auto stale = [&](uint64_t epoch) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint of job ", req.job_id(), " requested at shard map epoch ",
                     req.shard_epoch(), "; this server is at ", epoch));
  };
  if (const uint64_t epoch = store_->ShardEpoch(req.job_id()); epoch != req.shard_epoch()) {
    return stale(epoch);
  }
  std::error_code ec;
  if (std::filesystem::exists(req.path(), ec)) {
    return absl::AlreadyExistsError(
        absl::StrCat("checkpoint path ", req.path(), " already exists"));
  }
  auto snapshot = std::make_unique<JobSnapshot>(store_->Snapshot(req.job_id()));
  if (snapshot->shard_epoch != req.shard_epoch()) return stale(snapshot->shard_epoch);
  if (!snapshot->status.ok()) return snapshot->status;  // a disk tier that could not be read
  // DropJob marks the job before it erases any row: unmarked now, the copy was whole.
  if (absl::Status s = store_->CheckNotDropped(req.job_id()); !s.ok()) return s;
  v1::CheckpointResponse response;
  response.set_rows(snapshot->num_rows);
  response.set_bytes(snapshot->bytes);
  response.set_slots(EncodeSlotBitmap(snapshot->slots));
  response.set_snapshot_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  LOG(INFO) << "checkpoint " << req.checkpoint_id() << " of job " << req.job_id() << ": copied "
            << snapshot->num_rows << " rows (" << snapshot->bytes << " bytes) in "
            << response.snapshot_seconds() << " s";
  entry->snapshot = std::move(snapshot);  // entry is ours until it is queued
  return response;
}

void Checkpointer::WriterLoop() {
  while (true) {
    Entry* entry;
    v1::CheckpointShardMeta meta;
    {
      absl::MutexLock l(&mu_);
      while (!shutdown_ && queue_.empty()) changed_.Wait(&mu_);
      if (shutdown_) return;  // Shutdown() settled the queued entries
      const auto [job_id, id] = queue_.front();
      queue_.pop_front();
      entry = jobs_[job_id][id].get();
      entry->state = State::kWriting;
      meta.set_job_id(job_id);
      meta.set_checkpoint_id(id);
      meta.set_clock(entry->clock);
    }
    Write(entry, meta);
  }
}

void Checkpointer::Write(Entry* entry, const v1::CheckpointShardMeta& meta) {
  absl::Status status;
  if (options_.write_delay > absl::ZeroDuration()) {
    const absl::Time until = absl::Now() + options_.write_delay;
    LOG(INFO) << "checkpoint " << meta.checkpoint_id() << " of job " << meta.job_id()
              << ": write delayed by " << options_.write_delay << " (--checkpoint_write_delay)";
    absl::MutexLock l(&mu_);
    while (!shutdown_ && absl::Now() < until) changed_.WaitWithDeadline(&mu_, until);
  }
  CheckpointWriteOptions write = options_.write;
  write.cancel = &cancel_;
  // The entry stays while it is being written; its snapshot is the writer's alone.
  absl::StatusOr<CheckpointWriteStats> stats =
      cancel_.load() ? absl::CancelledError("checkpoint write cancelled")
                     : WriteCheckpoint(*entry->snapshot, entry->path, meta, write);
  if (stats.ok()) {
    LOG(INFO) << "checkpoint " << meta.checkpoint_id() << " of job " << meta.job_id() << ": wrote "
              << stats->rows << " rows (" << stats->bytes << " bytes, " << stats->disk_bytes
              << " on disk) to " << entry->path << " in " << stats->seconds << " s";
  } else {
    LOG(WARNING) << "checkpoint " << meta.checkpoint_id() << " of job " << meta.job_id()
                 << ": writing " << entry->path << " failed: " << stats.status();
  }
  if (metrics_ != nullptr) {
    metrics_->RecordCheckpointWrite(stats.status(), stats.ok() ? stats->seconds : 0,
                                    stats.ok() ? stats->bytes : 0);
  }
  // The disk tier's views (tiered tables) are released before the write is said to be done;
  // the copy of the rows is freed without the lock.
  entry->snapshot->disk_reader.reset();
  std::unique_ptr<JobSnapshot> written;
  absl::MutexLock l(&mu_);
  written = std::move(entry->snapshot);
  entry->state = State::kDone;
  entry->status = stats.status();
  if (stats.ok()) {
    entry->response.set_done(true);
    // As written (a snapshot counts a tiered table's rows on disk before it reads them).
    entry->response.set_rows(stats->rows);
    entry->response.set_bytes(stats->bytes);
    entry->response.set_write_seconds(stats->seconds);
  }
  if (dropped_.contains(meta.job_id())) {
    KeepLate(meta.job_id(), meta.checkpoint_id());
  } else {
    Forget(jobs_[meta.job_id()]);
  }
  changed_.SignalAll();
}

void Checkpointer::Erase(const std::string& job_id, uint64_t id) {
  auto job = jobs_.find(job_id);
  if (job == jobs_.end()) return;
  job->second.erase(id);
  if (!job->second.empty()) return;
  jobs_.erase(job);
  dropped_.erase(job_id);
}

void Checkpointer::KeepLate(const std::string& job_id, uint64_t id) {
  late_.emplace_back(job_id, id);
  while (late_.size() > kKeepLate) {
    Erase(late_.front().first, late_.front().second);
    late_.pop_front();
  }
}

void Checkpointer::ForgetJob(const std::string& job_id) {
  absl::MutexLock l(&mu_);
  auto job = jobs_.find(job_id);
  if (job == jobs_.end()) return;
  JobEntries& entries = job->second;
  for (auto it = entries.begin(); it != entries.end();) {
    if (it->second->state == State::kDone) {
      it = entries.erase(it);
    } else {
      ++it;
    }
  }
  if (entries.empty()) {
    jobs_.erase(job);
    dropped_.erase(job_id);
  } else {
    dropped_.insert(job_id);
  }
}

absl::StatusOr<v1::CheckpointResponse> Checkpointer::Await(const std::string& job_id,
                                                           uint64_t checkpoint_id,
                                                           absl::Time deadline) {
  absl::MutexLock l(&mu_);
  while (true) {
    auto job = jobs_.find(job_id);
    auto it = job == jobs_.end() ? JobEntries::iterator() : job->second.find(checkpoint_id);
    if (job == jobs_.end() || it == job->second.end()) {
      return absl::NotFoundError(absl::StrCat("checkpoint ", checkpoint_id, " of job ", job_id,
                                              " is unknown on this server"));
    }
    const Entry& entry = *it->second;
    if (entry.state == State::kDone) {
      if (!entry.status.ok()) return entry.status;
      return entry.response;
    }
    if (shutdown_) {
      return absl::UnavailableError(absl::StrCat("the server is shutting down; checkpoint ",
                                                 checkpoint_id, " of job ", job_id,
                                                 " was not written"));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("checkpoint ", checkpoint_id, " of job ",
                                                      job_id, " is still being written"));
    }
    changed_.WaitWithDeadline(&mu_, deadline);  // then look the entry up again
  }
}

}  // namespace ps
