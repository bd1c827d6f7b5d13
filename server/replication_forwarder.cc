#include "server/replication_forwarder.h"

#include <glog/logging.h>
#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/security.h"
#include "common/shard_map.h"

namespace ps {
namespace {

constexpr int kAttempts = 3;

}  // namespace

ReplicationForwarder::ReplicationForwarder(const TableStore* store, absl::Duration rpc_timeout)
    : store_(store), rpc_timeout_(rpc_timeout) {}

absl::Status ReplicationForwarder::SetTargets(const std::string& job_id, uint64_t epoch,
                                              const std::string& self,
                                              std::vector<std::string> backups) {
  if (backups.size() != kNumSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot backups: ", backups.size(), " entries, want ", kNumSlots));
  }
  absl::MutexLock l(&mu_);
  Job& job = jobs_[job_id];
  if (epoch < job.epoch) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, ": shard epoch ", epoch, " is older than this server's (", job.epoch, ")"));
  }
  // A new map gives the backups left out another chance: their next update seeds them.
  if (epoch > job.epoch) job.left_out.clear();
  job.epoch = epoch;
  job.backups = std::move(backups);
  // The numbering goes on across maps: a backup that keeps a slot expects its next number.
  if (job.source == nullptr) job.source = std::make_shared<ReplicationSource>(store_, self);
  return absl::OkStatus();
}

void ReplicationForwarder::ForwardClock(const std::string& job_id, int64_t clock) {
  std::shared_ptr<absl::Mutex> forward_mu;
  {
    absl::MutexLock l(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end() || it->second.source == nullptr) return;  // no replicas: nothing
    forward_mu = it->second.forward_mu;
  }
  absl::MutexLock order(forward_mu.get());
  std::map<std::string, std::vector<bool>> by_backup;
  std::shared_ptr<ReplicationSource> source;
  {
    absl::MutexLock l(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end() || it->second.source == nullptr) return;
    const Job& job = it->second;
    for (uint32_t s = 0; s < kNumSlots; ++s) {
      const std::string& backup = job.backups[s];
      if (backup.empty() || job.left_out.count(backup) > 0) continue;
      std::vector<bool>& slots = by_backup[backup];
      slots.resize(kNumSlots, false);
      slots[s] = true;
    }
    source = job.source;
  }
  for (const auto& [backup, slots] : by_backup) {
    absl::StatusOr<v1::ReplicateRequest> req = source->Prepare(job_id, slots, clock);
    absl::Status sent = req.ok() ? Send(backup, *req) : req.status();
    absl::MutexLock l(&mu_);
    if (sent.ok()) {
      counts_.slots += req->slots_size();
      counts_.bytes += req->ByteSizeLong();
      continue;
    }
    ++counts_.failures;
    auto it = jobs_.find(job_id);
    if (it != jobs_.end()) it->second.left_out[backup] = true;
    LOG(WARNING) << "job " << job_id << ": backup " << backup
                 << " left out of replication at clock " << clock << ": " << sent;
  }
}

absl::Status ReplicationForwarder::Send(const std::string& address,
                                        const v1::ReplicateRequest& req) {
  v1::ParameterServer::Stub* stub;
  {
    absl::MutexLock l(&mu_);
    stub = StubFor(address);
  }
  absl::Status last;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + rpc_timeout_));
    v1::ReplicateResponse resp;
    last = FromGrpcStatus(stub->Replicate(&ctx, req, &resp));
    if (last.ok()) return last;
    // Unreachable for a moment, or not configured for this map yet (the workers configure the
    // servers one after the other): ask again.
    if (last.code() != absl::StatusCode::kUnavailable &&
        last.code() != absl::StatusCode::kFailedPrecondition) {
      return last;
    }
    absl::SleepFor(absl::Milliseconds(100) * attempt);
  }
  return last;
}

v1::ParameterServer::Stub* ReplicationForwarder::StubFor(const std::string& address) {
  std::unique_ptr<v1::ParameterServer::Stub>& stub = stubs_[address];
  if (stub == nullptr) stub = v1::ParameterServer::NewStub(DialChannel(address));
  return stub.get();
}

void ReplicationForwarder::ForgetJob(const std::string& job_id) {
  absl::MutexLock l(&mu_);
  jobs_.erase(job_id);
}

ReplicationForwarder::Counts ReplicationForwarder::counts() const {
  absl::MutexLock l(&mu_);
  return counts_;
}

}  // namespace ps
