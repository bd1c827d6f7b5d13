// psctl drain: a server leaves its jobs once a checkpoint of each is complete, its slots moved
// to a spare or to the jobs' other servers and restored from that checkpoint.
#include <glog/logging.h>

#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "scheduler/placement.h"
#include "scheduler/scheduler.h"

namespace ps {

absl::StatusOr<v1::NodeInfo> Scheduler::DrainNode(uint64_t node_id) {
  absl::MutexLock lock(&mu_);
  v1::NodeInfo* found = membership_.FindMutable(node_id);
  if (found == nullptr) return absl::NotFoundError(absl::StrCat("no node ", node_id));
  v1::NodeInfo& node = *found;
  if (node.role() != v1::SERVER) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node ", node_id, " is a ", absl::AsciiStrToLower(v1::NodeRole_Name(node.role())),
        "; only servers are drained (a worker can be stopped: its job recovers)"));
  }
  if (node.state() != v1::ALIVE) {
    return absl::FailedPreconditionError(absl::StrCat("node ", node_id, " is dead already"));
  }
  const absl::Time now = clock_();
  // A job moves off to a spare, or to its other servers: refuse before anything changes if
  // one would have neither.
  bool spare = false;
  for (uint64_t id : AvailableServers(PlacementNodes())) spare = spare || id != node_id;
  std::vector<Job*> users;
  for (auto& [number, job] : jobs_) {
    if (job.info.state() != v1::RUNNING ||
        absl::c_find(job.info.server_nodes(), node_id) == job.info.server_nodes().end())
      continue;
    bool other = false;
    for (uint64_t id : job.info.server_nodes()) {
      const v1::NodeInfo* n = membership_.Find(id);
      other = other || (id != node_id && n != nullptr && n->state() == v1::ALIVE && !n->draining());
    }
    if (!other && !spare) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job.info.job_id(), " has no other server to take node ", node_id,
                       "'s slots: start another server first, or cancel the job"));
    }
    users.push_back(&job);
  }
  Changes changes;
  changes.nodes.insert(node_id);
  changes.sync = true;
  if (!node.draining()) {
    node.set_draining(true);
    LOG(INFO) << "server node " << node_id << " (" << node.address()
              << ") draining: " << users.size() << " running job(s) move off it";
  }
  for (Job* job : users) {
    const uint64_t seq = job->info.checkpoint_requests() + 1;
    job->info.set_checkpoint_requests(seq);
    job->info.set_drain_request_seq(seq);
    changes.jobs.insert(job->number);
    AddEvent(job,
             absl::StrCat("server node ", node_id, " (", node.address(),
                          ") draining (psctl drain): checkpoint requested (request ", seq,
                          "); once it is complete its slots move to other servers"),
             now, &changes);
  }
  v1::NodeInfo result = node;
  result.clear_node_secret();  // the scheduler's own
  PS_RETURN_IF_ERROR(Commit(&changes));
  return result;
}

void Scheduler::FinishDrain(Job* job, uint64_t request_seq, absl::Time now, Changes* changes) {
  if (job->info.drain_request_seq() == 0 || request_seq < job->info.drain_request_seq()) return;
  if (job->info.state() != v1::RUNNING) return;
  job->info.clear_drain_request_seq();
  changes->jobs.insert(job->number);
  std::vector<uint64_t> draining;
  for (uint64_t id : job->info.server_nodes()) {
    const v1::NodeInfo* n = membership_.Find(id);
    if (n != nullptr && n->draining()) draining.push_back(id);
  }
  for (uint64_t id : draining) {
    if (job->info.state() != v1::RUNNING) break;
    const std::string address = membership_.Get(id).address();
    RecoverFromServerLoss(job, id, "drained by psctl drain", now, changes, /*drained=*/true);
    // The drained server holds the job's tables still: free them.
    if (!address.empty()) changes->drops.push_back(DropOrder{job->info.job_id(), {address}});
  }
}

}  // namespace ps
