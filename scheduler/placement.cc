#include "scheduler/placement.h"

#include <glog/logging.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ps {

std::vector<uint64_t> AvailableServers(const std::vector<PlacementNode>& nodes) {
  std::vector<uint64_t> servers;
  for (const PlacementNode& node : nodes) {
    if (node.server && node.alive && !node.draining) servers.push_back(node.id);
  }
  std::sort(servers.begin(), servers.end());
  return servers;
}

std::map<uint64_t, int> ServerLoad(const std::vector<PlacementJob>& jobs) {
  std::map<uint64_t, int> load;
  for (const PlacementJob& job : jobs) {
    if (!job.running) continue;
    for (uint64_t id : job.server_nodes) ++load[id];
  }
  return load;
}

uint64_t ChooseSpare(const std::vector<PlacementNode>& nodes, const std::vector<PlacementJob>& jobs,
                     const std::vector<uint64_t>& job_servers) {
  std::map<uint64_t, int> load = ServerLoad(jobs);
  uint64_t spare = 0;
  for (uint64_t id : AvailableServers(nodes)) {
    if (std::find(job_servers.begin(), job_servers.end(), id) != job_servers.end()) continue;
    if (spare == 0 || load[id] < load[spare]) spare = id;
  }
  return spare;
}

namespace {

std::vector<uint64_t> IdleWorkers(const std::vector<PlacementNode>& nodes) {
  std::vector<uint64_t> idle;
  for (const PlacementNode& node : nodes) {
    if (!node.server && node.alive && !node.in_job) idle.push_back(node.id);
  }
  std::sort(idle.begin(), idle.end());
  return idle;
}

std::vector<const PlacementJob*> InSubmitOrder(const std::vector<PlacementJob>& jobs) {
  std::vector<const PlacementJob*> ordered;
  for (const PlacementJob& job : jobs) ordered.push_back(&job);
  std::stable_sort(
      ordered.begin(), ordered.end(),
      [](const PlacementJob* a, const PlacementJob* b) { return a->number < b->number; });
  return ordered;
}

}  // namespace

Placement Place(const std::vector<PlacementNode>& nodes, const std::vector<PlacementJob>& jobs) {
  Placement placement;
  std::vector<uint64_t> idle = IdleWorkers(nodes);
  const std::vector<uint64_t> servers = AvailableServers(nodes);
  const std::vector<const PlacementJob*> ordered = InSubmitOrder(jobs);

  size_t next_idle = 0;  // idle[next_idle..] are still free
  for (const PlacementJob* job : ordered) {
    if (!job->running) continue;
    int workers = job->workers;
    while (next_idle < idle.size() && workers < job->num_workers) {
      placement.joins[job->number].push_back(idle[next_idle++]);
      ++workers;
    }
  }

  std::map<uint64_t, int> load = ServerLoad(jobs);
  for (const PlacementJob* job : ordered) {
    if (job->running) continue;
    const size_t num_workers = std::max(0, job->num_workers);
    const size_t num_servers = std::max(1, job->num_servers);
    if (idle.size() - next_idle < num_workers || servers.size() < num_servers) continue;
    if (job->fails_at_start) {
      placement.failures.push_back(job->number);
      continue;
    }
    Placement::Start& start = placement.starts[job->number];
    start.servers = servers;
    if (job->num_servers > 0) {  // the least loaded: fewest running jobs, then lowest id
      std::stable_sort(start.servers.begin(), start.servers.end(),
                       [&load](uint64_t a, uint64_t b) { return load[a] < load[b]; });
      start.servers.resize(num_servers);
      std::sort(start.servers.begin(), start.servers.end());
    }
    for (uint64_t id : start.servers) ++load[id];
    start.workers.assign(idle.begin() + next_idle, idle.begin() + next_idle + num_workers);
    next_idle += num_workers;
  }
  placement.idle_left = idle.size() - next_idle;
  placement.servers_available = servers.size();
  return placement;
}

std::vector<uint32_t> BackupOwners(const std::vector<int>& owners, int num_servers) {
  CHECK_GE(num_servers, 2) << "a backup needs another server";
  std::vector<uint32_t> backups(owners.size());
  std::vector<int> seen(num_servers, 0);  // slots of each primary so far
  for (size_t s = 0; s < owners.size(); ++s) {
    const int primary = owners[s];
    CHECK(primary >= 0 && primary < num_servers) << "slot " << s << " owner " << primary;
    // The k-th slot of a primary goes to the (k mod (n - 1))-th server after it.
    const int step = 1 + seen[primary]++ % (num_servers - 1);
    backups[s] = static_cast<uint32_t>((primary + step) % num_servers);
  }
  return backups;
}

std::optional<std::vector<int>> PromotedOwners(const std::vector<int>& owners,
                                               const std::vector<uint32_t>& backups, int dead,
                                               const std::vector<bool>& alive,
                                               std::string* why_not) {
  if (backups.empty() || backups.size() != owners.size()) {
    *why_not = "the job's slots have no backups";
    return std::nullopt;
  }
  std::vector<int> promoted(owners.size());
  for (size_t s = 0; s < owners.size(); ++s) {
    int owner = owners[s];
    if (owner == dead) {
      const int backup = static_cast<int>(backups[s]);
      if (backup == dead || backup < 0 || backup >= static_cast<int>(alive.size()) ||
          !alive[backup]) {
        *why_not = absl::StrCat("the backup of slot ", s, " is not on a live server");
        return std::nullopt;
      }
      owner = backup;
    }
    promoted[s] = owner > dead ? owner - 1 : owner;
  }
  return promoted;
}

}  // namespace ps
