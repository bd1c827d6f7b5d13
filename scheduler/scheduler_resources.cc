// What the scheduler bounds and frees, and who may speak for a job: the jobs waiting to start
// (--max_pending_jobs), the servers' memory of jobs that ended (DropJob), the nodes Membership
// forgets (--max_nodes, --forget_dead_nodes_after; membership.cc decides which), and the
// callers and receipts a job's checkpoints need.

#include <set>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/node_identity.h"
#include "common/printable.h"
#include "common/security.h"
#include "common/status_macros.h"
#include "scheduler/scheduler.h"

namespace ps {

void Scheduler::DropOnServers(const Job& job, Changes* changes) const {
  if (dropper_ == nullptr) return;
  const v1::JobInfo& info = job.info;
  DropOrder order;
  order.job_id = info.job_id();
  for (int i = 0; i < info.server_nodes_size() && i < info.server_addresses_size(); ++i) {
    // A server that died took the job's memory with it.
    const v1::NodeInfo* node = membership_.Find(info.server_nodes(i));
    if (node == nullptr || node->state() != v1::ALIVE) continue;
    order.servers.push_back(info.server_addresses(i));
  }
  if (order.servers.empty()) return;  // never started, or no server left
  changes->drops.push_back(std::move(order));
}

void Scheduler::SendDrops(Changes* changes) {
  if (dropper_ == nullptr) return;
  for (DropOrder& order : changes->drops) dropper_->Drop(std::move(order));
  changes->drops.clear();
}

absl::Status CheckRegisterRequest(const v1::RegisterRequest& req) {
  if (req.role() != v1::SERVER && req.role() != v1::WORKER) {
    return absl::InvalidArgumentError("role must be SERVER or WORKER");
  }
  if (req.role() == v1::SERVER && req.address().empty()) {
    return absl::InvalidArgumentError("a server must give its address (host:port)");
  }
  // Stored, listed (psctl nodes), logged and given to workers: bounded printable ASCII, and an
  // address must be one (workers dial it; psctl and Prometheus scrape the metrics address).
  PS_RETURN_IF_ERROR(CheckClientText("address", req.address(), kMaxAddressBytes, true));
  if (!req.address().empty()) PS_RETURN_IF_ERROR(ValidateHostPort("address", req.address()));
  PS_RETURN_IF_ERROR(CheckClientText("hostname", req.hostname(), kMaxNameBytes, true));
  PS_RETURN_IF_ERROR(
      CheckClientText("metrics_address", req.metrics_address(), kMaxAddressBytes, true));
  if (!req.metrics_address().empty()) {
    PS_RETURN_IF_ERROR(ValidateHostPort("metrics_address", req.metrics_address()));
  }
  PS_RETURN_IF_ERROR(CheckClientText("version", req.version(), kMaxNameBytes, true));
  return CheckClientText("node_secret", req.node_secret(), kMaxNameBytes, true);
}

std::set<uint64_t> Scheduler::NodesInUse() const {
  std::set<uint64_t> in_use;
  for (const auto& [number, job] : jobs_) {
    if (job.info.state() != v1::PENDING && job.info.state() != v1::RUNNING) continue;
    in_use.insert(job.info.worker_nodes().begin(), job.info.worker_nodes().end());
    in_use.insert(job.info.server_nodes().begin(), job.info.server_nodes().end());
  }
  return in_use;
}

absl::Status Scheduler::CheckWorkerOf(const Job& job, const JobCaller& caller,
                                      absl::string_view what) const {
  if (caller.admin) return absl::OkStatus();
  const std::string& job_id = job.info.job_id();
  if (caller.node_id == 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(what, " of job ", job_id,
                     " needs the admin token, or a worker of the job (node_id and node_secret)"));
  }
  const v1::NodeInfo* node = membership_.Find(caller.node_id);
  const bool worker =
      node != nullptr && node->role() == v1::WORKER && node->state() == v1::ALIVE &&
      absl::c_find(job.info.worker_nodes(), caller.node_id) != job.info.worker_nodes().end();
  if (!worker) {
    return absl::PermissionDeniedError(absl::StrCat("node ", caller.node_id,
                                                    " is not a live worker of job ", job_id, ": ",
                                                    what, " is for the job's own workers"));
  }
  return membership_.CheckNodeSecret(caller.node_id, caller.node_secret);
}

absl::Status Scheduler::CheckReceipts(const v1::CheckpointInfo& checkpoint,
                                      const v1::FinishCheckpointRequest& req) const {
  for (int k = 0; k < req.shards_size() && k < checkpoint.shards_size(); ++k) {
    const v1::CheckpointShard& shard = req.shards(k);
    const v1::NodeInfo* node = membership_.Find(checkpoint.shards(k).node_id());
    // A shard begun before receipts existed names no node: nothing to check it against.
    if (checkpoint.shards(k).node_id() == 0) continue;
    const std::string secret = node == nullptr ? "" : node->node_secret();
    const std::string expected =
        CheckpointReceipt(secret, req.job_id(), req.checkpoint_id(), shard.rows(), shard.bytes());
    if (node == nullptr || (!secret.empty() && !ConstantTimeEquals(shard.receipt(), expected))) {
      return absl::PermissionDeniedError(absl::StrFormat(
          "shards[%d]: %d rows, %d bytes are not what server node %d reported writing (its "
          "receipt is %s): a checkpoint is complete only on its servers' word",
          k, shard.rows(), shard.bytes(), checkpoint.shards(k).node_id(),
          shard.receipt().empty() ? "missing" : "wrong"));
    }
  }
  return absl::OkStatus();
}

void Scheduler::DeleteNodes(const std::vector<uint64_t>& ids, Changes* changes) {
  for (uint64_t id : ids) {
    changes->nodes.erase(id);
    changes->batch.DeleteNode(id);
  }
}

absl::Status Scheduler::CheckPendingRoom() const {
  int64_t pending = 0;
  for (const auto& [number, job] : jobs_) pending += job.info.state() == v1::PENDING;
  if (pending < options_.max_pending_jobs) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      pending,
      " jobs are pending, the cap (ps_scheduler --max_pending_jobs=", options_.max_pending_jobs,
      "); the job is not submitted (wait for pending jobs to start, or cancel some)"));
}

}  // namespace ps
