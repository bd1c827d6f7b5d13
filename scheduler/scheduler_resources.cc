// What the scheduler bounds and frees: the nodes it keeps (--max_nodes), the jobs waiting to
// start (--max_pending_jobs), and the servers' memory of jobs that ended (DropJob).
#include <glog/logging.h>

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
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

absl::Status Scheduler::MakeRoomForNode(const v1::RegisterRequest& req, Changes* changes) {
  const size_t max_nodes = static_cast<size_t>(options_.max_nodes);
  if (nodes_.size() < max_nodes) return absl::OkStatus();
  // Dead nodes are history (psctl nodes) until room is needed; those a pending or running job
  // still names stay.
  std::set<uint64_t> in_use;
  for (const auto& [number, job] : jobs_) {
    if (job.info.state() != v1::PENDING && job.info.state() != v1::RUNNING) continue;
    in_use.insert(job.info.worker_nodes().begin(), job.info.worker_nodes().end());
    in_use.insert(job.info.server_nodes().begin(), job.info.server_nodes().end());
  }
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
