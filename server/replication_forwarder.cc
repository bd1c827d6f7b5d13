#include "server/replication_forwarder.h"

#include <glog/logging.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>
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
  const bool any =
      std::any_of(backups.begin(), backups.end(), [](const std::string& b) { return !b.empty(); });
  absl::MutexLock l(&mu_);
  if (!any && !jobs_.contains(job_id)) return absl::OkStatus();  // never forwarded
  Job& job = jobs_[job_id];
  if (epoch < job.epoch) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, ": shard epoch ", epoch, " is older than this server's (", job.epoch, ")"));
  }
  // A new map gives the backups left out another chance: their next update seeds them.
  if (epoch > job.epoch) job.left_out.clear();
  job.epoch = epoch;
  job.backups = std::move(backups);
  if (!any) {
    // No backups (one server left, or a map without replicas): the job forwards nothing, and
    // its apply path takes no lock.
    if (job.source != nullptr) active_.fetch_sub(1);
    job.source = nullptr;
    return absl::OkStatus();
  }
  // The numbering goes on across maps; a backup accepts any number past its last one.
  if (job.source == nullptr) {
    job.source = std::make_shared<ReplicationSource>(store_, self);
    active_.fetch_add(1);
  }
  return absl::OkStatus();
}

bool ReplicationForwarder::HasTargets(const std::string& job_id) const {
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(job_id);
  return it != jobs_.end() && it->second.source != nullptr;
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
  // Copied and numbered one backup after the other (the order of the numbers), then sent to
  // every backup at once: a clock waits for the slowest backup, not for their sum.
  std::vector<std::pair<std::string, absl::StatusOr<v1::ReplicateRequest>>> reqs;
  for (const auto& [backup, slots] : by_backup) {
    reqs.emplace_back(backup, source->Prepare(job_id, slots, clock));
  }
  std::vector<absl::Status> sent(reqs.size());
  const absl::Time deadline = absl::Now() + rpc_timeout_;
  std::vector<std::thread> senders;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& [backup, req] = reqs[i];
    if (!req.ok()) {
      sent[i] = req.status();
      continue;
    }
    if (i + 1 == reqs.size()) {
      sent[i] = Send(backup, *req, deadline);
    } else {
      senders.emplace_back([this, &sent, &reqs, i, deadline] {
        sent[i] = Send(reqs[i].first, *reqs[i].second, deadline);
      });
    }
  }
  for (std::thread& t : senders) t.join();
  absl::MutexLock l(&mu_);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& [backup, req] = reqs[i];
    if (sent[i].ok()) {
      counts_.slots += req->slots_size();
      counts_.bytes += req->ByteSizeLong();
      continue;
    }
    ++counts_.failures;
    auto it = jobs_.find(job_id);
    if (it != jobs_.end()) it->second.left_out[backup] = true;
    LOG(WARNING) << "job " << job_id << ": backup " << backup
                 << " left out of replication at clock " << clock << ": " << sent[i];
  }
}

absl::Status ReplicationForwarder::Send(const std::string& address, const v1::ReplicateRequest& req,
                                        absl::Time deadline) {
  v1::ParameterServer::Stub* stub;
  {
    absl::MutexLock l(&mu_);
    stub = StubFor(address);
  }
  absl::Status last;
  for (int attempt = 1; attempt <= kAttempts && absl::Now() < deadline; ++attempt) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    v1::ReplicateResponse resp;
    last = FromGrpcStatus(stub->Replicate(&ctx, req, &resp));
    if (last.ok()) return last;
    // Unreachable for a moment, or not configured for this map yet (the workers configure the
    // servers one after the other): ask again.
    if (last.code() != absl::StatusCode::kUnavailable &&
        last.code() != absl::StatusCode::kFailedPrecondition) {
      return last;
    }
    absl::SleepFor(std::min(absl::Milliseconds(100) * attempt, deadline - absl::Now()));
  }
  if (last.ok()) return absl::DeadlineExceededError("no time left to send");
  return last;
}

v1::ParameterServer::Stub* ReplicationForwarder::StubFor(const std::string& address) {
  std::unique_ptr<v1::ParameterServer::Stub>& stub = stubs_[address];
  if (stub == nullptr) stub = v1::ParameterServer::NewStub(DialChannel(address));
  return stub.get();
}

void ReplicationForwarder::ForgetJob(const std::string& job_id) {
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  if (it->second.source != nullptr) active_.fetch_sub(1);
  jobs_.erase(it);
}

ReplicationForwarder::Counts ReplicationForwarder::counts() const {
  absl::MutexLock l(&mu_);
  return counts_;
}

}  // namespace ps
