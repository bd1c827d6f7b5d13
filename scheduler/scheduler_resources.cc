// What the scheduler bounds and frees: the servers' memory of jobs that ended (DropJob).
#include <utility>

#include "scheduler/scheduler.h"

namespace ps {

void Scheduler::DropOnServers(const Job& job) const {
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
  dropper_->Drop(std::move(order));
}

}  // namespace ps
