// Placement: which nodes each job gets, decided from a snapshot of the nodes and jobs. Pure
// functions (no clock, no lock, no state store): the Scheduler takes the snapshot under its
// mutex and applies the answer (events, metrics, persistence).
#ifndef PS_SCHEDULER_PLACEMENT_H_
#define PS_SCHEDULER_PLACEMENT_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ps {

struct PlacementNode {
  uint64_t id = 0;
  bool server = false;  // else a worker
  bool alive = false;
  bool draining = false;  // a server that takes no new job (psctl drain)
  bool in_job = false;    // a worker that serves a job
};

struct PlacementJob {
  uint64_t number = 0;                 // jobs are considered in ascending number: submit order
  bool running = false;                // else pending (ended jobs are not in the snapshot)
  int num_workers = 0;                 // the spec's
  int num_servers = 0;                 // the spec's: 0 = every alive server
  int workers = 0;                     // running: how many it has now
  std::vector<uint64_t> server_nodes;  // running: the servers it uses
  // Pending: the job cannot start (its from_checkpoint no longer resolves). It ends FAILED
  // when its nodes would be free, taking none of them.
  bool fails_at_start = false;
};

struct Placement {
  struct Start {
    std::vector<uint64_t> servers;  // ascending
    std::vector<uint64_t> workers;  // worker i is workers[i]
  };
  // Running jobs short of workers: the idle workers each takes (lowest ids first).
  std::map<uint64_t, std::vector<uint64_t>> joins;
  std::map<uint64_t, Start> starts;  // pending jobs that start now
  std::vector<uint64_t> failures;    // pending jobs with fails_at_start whose turn came
  // What the jobs still pending see after this round: idle workers left, and alive servers.
  size_t idle_left = 0;
  size_t servers_available = 0;
};

// Running jobs short of workers come first (they are older than any pending job) and take idle
// workers, lowest node id first. Then each pending job in submit order starts if enough idle
// workers and alive, undrained servers remain (a job that cannot start does not hold back later,
// smaller ones). A job that asks for N servers gets the N least loaded (fewest running jobs,
// counting the ones started in this round; then lowest id); one that asks for 0 gets them all.
Placement Place(const std::vector<PlacementNode>& nodes, const std::vector<PlacementJob>& jobs);

// Alive servers that take new work (not draining), ascending ids.
std::vector<uint64_t> AvailableServers(const std::vector<PlacementNode>& nodes);

// How many running jobs each server serves.
std::map<uint64_t, int> ServerLoad(const std::vector<PlacementJob>& jobs);

// A spare for a job that lost a server: an available server outside `job_servers`, the least
// loaded, then the lowest id; 0 if there is none.
uint64_t ChooseSpare(const std::vector<PlacementNode>& nodes, const std::vector<PlacementJob>& jobs,
                     const std::vector<uint64_t>& job_servers);

// Backups of a replicated job's slots (JobSpec.replication): `owners[s]` is the index of slot
// s's primary among `num_servers` (>= 2) servers; the answer, the index of its backup, is never
// the primary, and the slots of one primary have their backups on each other server in turn, so
// that a dead server's slots fall back on all the others, evenly.
std::vector<uint32_t> BackupOwners(const std::vector<int>& owners, int num_servers);

// Failover of a replicated job: server `dead` (an index among the job's servers) died. Each
// slot it owned goes to its backup (`backups[s]`, an index, kNumSlots entries with `owners`);
// `alive[i]` says whether the job's server i is alive. The answer is the new owner of every
// slot, as an index into the job's servers without `dead` (those after it move down by one),
// or nullopt, with `*why_not` set, where a slot of `dead` has no backup alive on another
// server (no backups at all, a backup on `dead` itself or on a server that died too).
std::optional<std::vector<int>> PromotedOwners(const std::vector<int>& owners,
                                               const std::vector<uint32_t>& backups, int dead,
                                               const std::vector<bool>& alive,
                                               std::string* why_not);

}  // namespace ps

#endif  // PS_SCHEDULER_PLACEMENT_H_
