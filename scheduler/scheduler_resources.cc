// What the scheduler bounds and frees: the nodes it keeps (--max_nodes, --forget_dead_nodes_after),
// the registrations it takes (--max_registrations_per_minute) and who may take an address, the
// jobs waiting to start (--max_pending_jobs), and the servers' memory of jobs that ended
// (DropJob).
#include <glog/logging.h>

#include <algorithm>
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
    auto node = nodes_.find(info.server_nodes(i));
    if (node == nodes_.end() || node->second.state() != v1::ALIVE) continue;
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

absl::Status Scheduler::CheckNodeSecret(uint64_t node_id, const std::string& secret) const {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || it->second.node_secret().empty() ||
      ConstantTimeEquals(secret, it->second.node_secret())) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat("node_secret does not match node ", node_id,
                                                  "'s (only that daemon may speak for it)"));
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
  auto it = nodes_.find(caller.node_id);
  const bool worker =
      it != nodes_.end() && it->second.role() == v1::WORKER && it->second.state() == v1::ALIVE &&
      absl::c_find(job.info.worker_nodes(), caller.node_id) != job.info.worker_nodes().end();
  if (!worker) {
    return absl::PermissionDeniedError(absl::StrCat("node ", caller.node_id,
                                                    " is not a live worker of job ", job_id, ": ",
                                                    what, " is for the job's own workers"));
  }
  return CheckNodeSecret(caller.node_id, caller.node_secret);
}

absl::Status Scheduler::CheckReceipts(const v1::CheckpointInfo& checkpoint,
                                      const v1::FinishCheckpointRequest& req) const {
  for (int k = 0; k < req.shards_size() && k < checkpoint.shards_size(); ++k) {
    const v1::CheckpointShard& shard = req.shards(k);
    auto node = nodes_.find(checkpoint.shards(k).node_id());
    // A shard begun before receipts existed names no node: nothing to check it against.
    if (checkpoint.shards(k).node_id() == 0) continue;
    const std::string secret = node == nodes_.end() ? "" : node->second.node_secret();
    const std::string expected =
        CheckpointReceipt(secret, req.job_id(), req.checkpoint_id(), shard.rows(), shard.bytes());
    if (node == nodes_.end() ||
        (!secret.empty() && !ConstantTimeEquals(shard.receipt(), expected))) {
      return absl::PermissionDeniedError(absl::StrFormat(
          "shards[%d]: %d rows, %d bytes are not what server node %d reported writing (its "
          "receipt is %s): a checkpoint is complete only on its servers' word",
          k, shard.rows(), shard.bytes(), checkpoint.shards(k).node_id(),
          shard.receipt().empty() ? "missing" : "wrong"));
    }
  }
  return absl::OkStatus();
}

absl::Status Scheduler::CheckRegistrationRate(absl::Time now) {
  while (!registrations_.empty() && now - registrations_.front() >= absl::Minutes(1)) {
    registrations_.pop_front();
  }
  if (registrations_.size() >= static_cast<size_t>(options_.max_registrations_per_minute)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(registrations_.size(),
                     " registrations in the last minute, the cap (ps_scheduler "
                     "--max_registrations_per_minute=",
                     options_.max_registrations_per_minute, "); try again later"));
  }
  registrations_.push_back(now);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint64_t>> Scheduler::ServersToReplace(const v1::RegisterRequest& req,
                                                                  absl::Time now) const {
  std::vector<uint64_t> replaced;
  if (req.role() != v1::SERVER) return replaced;
  // Only one process can listen on an address: an alive server there is gone (restarted) if it
  // went silent, or it is the caller itself registering again (it shows its secret). Anyone
  // else is refused: declaring a live server dead would take its job's slots from it.
  for (const auto& [id, other] : nodes_) {
    if (other.role() != v1::SERVER || other.state() != v1::ALIVE ||
        other.address() != req.address()) {
      continue;
    }
    const absl::Duration silent = now - absl::FromUnixMillis(other.last_heartbeat_unix_ms());
    const bool same_daemon = !other.node_secret().empty() && !req.node_secret().empty() &&
                             ConstantTimeEquals(req.node_secret(), other.node_secret());
    if (!same_daemon && !other.node_secret().empty() && silent <= options_.heartbeat_timeout) {
      return absl::PermissionDeniedError(
          absl::StrCat("address ", req.address(), " belongs to server node ", id, ", alive (heard ",
                       absl::FormatDuration(silent),
                       " ago): registering there needs that node's node_secret, "
                       "or wait until it has been silent for the heartbeat timeout (",
                       absl::FormatDuration(options_.heartbeat_timeout), ")"));
    }
    replaced.push_back(id);
  }
  return replaced;
}

void Scheduler::ForgetDeadNodes(absl::Time now, Changes* changes) {
  if (options_.forget_dead_nodes_after == absl::ZeroDuration()) return;
  const std::set<uint64_t> in_use = NodesInUse();
  std::vector<uint64_t> forget;
  for (const auto& [id, node] : nodes_) {
    if (node.state() == v1::DEAD && in_use.count(id) == 0 &&
        now - absl::FromUnixMillis(node.last_heartbeat_unix_ms()) >
            options_.forget_dead_nodes_after) {
      forget.push_back(id);
    }
  }
  for (uint64_t id : forget) {
    nodes_.erase(id);
    changes->nodes.erase(id);
    changes->batch.DeleteNode(id);
  }
  if (!forget.empty()) {
    LOG(INFO) << "forgot " << forget.size() << " node(s) dead for longer than "
              << absl::FormatDuration(options_.forget_dead_nodes_after)
              << " (--forget_dead_nodes_after)";
  }
}

absl::Status Scheduler::MakeRoomForNode(const v1::RegisterRequest& req, Changes* changes) {
  const size_t max_nodes = static_cast<size_t>(options_.max_nodes);
  if (nodes_.size() < max_nodes) return absl::OkStatus();
  // Dead nodes are history (psctl nodes) until room is needed; those a pending or running job
  // still names stay.
  const std::set<uint64_t> in_use = NodesInUse();
  std::vector<uint64_t> forgettable;  // oldest (lowest id) first
  bool replaces_alive = false;
  size_t alive = 0;
  for (const auto& [id, node] : nodes_) {
    if (node.state() == v1::DEAD && in_use.count(id) == 0) forgettable.push_back(id);
    if (node.state() != v1::ALIVE) continue;
    ++alive;
    // A restarted server registers at its old address: the old entry is marked dead then.
    replaces_alive = replaces_alive || (req.role() == v1::SERVER && node.role() == v1::SERVER &&
                                        node.address() == req.address());
  }
  const size_t needed = nodes_.size() + 1 - max_nodes;
  if (forgettable.size() < needed && !replaces_alive) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the scheduler holds ", nodes_.size(), " nodes (", alive,
                     " alive), its cap (ps_scheduler --max_nodes=", max_nodes,
                     "), and no dead node it may "
                     "forget; this ",
                     req.role() == v1::SERVER ? "server" : "worker",
                     " is not registered (try again once nodes died, or raise --max_nodes)"));
  }
  const size_t forget = std::min(needed, forgettable.size());
  for (size_t i = 0; i < forget; ++i) {
    nodes_.erase(forgettable[i]);
    changes->nodes.erase(forgettable[i]);
    changes->batch.DeleteNode(forgettable[i]);
  }
  if (forget > 0) {
    LOG(INFO) << "forgot " << forget << " dead node(s) (oldest first, from node " << forgettable[0]
              << ") to register a new one under --max_nodes=" << max_nodes;
  }
  return absl::OkStatus();
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
