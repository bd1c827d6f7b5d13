// Membership: the scheduler's node table. Nodes register (under a rate cap and a cap on the
// nodes kept), heartbeat, fall silent and are declared dead, and are forgotten in time. No
// clock, no lock, no state store: time comes in as arguments; the Scheduler persists what
// changed and handles what a dead node means for its jobs.
#ifndef PS_SCHEDULER_MEMBERSHIP_H_
#define PS_SCHEDULER_MEMBERSHIP_H_

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ps/v1/scheduler.pb.h"
#include "scheduler/scheduler_options.h"

namespace ps {

// Invariants:
//   - every node is keyed by its node_id, and ids are never reused: each is below
//     next_node_id(), which only grows;
//   - a node's identity (id, role, address, secret, registration time) is set once, at
//     registration; ALIVE -> DEAD is its only change of state (a daemon that comes back
//     registers as a new node);
//   - at most options.max_nodes nodes are kept: room is made by forgetting the oldest dead nodes
//     no job uses (a server taking the address of an alive one is let in beyond the cap, as that
//     one is declared dead);
//   - at most options.max_registrations_per_minute registrations are accepted in any minute;
//   - only dead nodes that no job uses are forgotten.
// The Scheduler owns the fields jobs give a node (job_id, draining, checkpoint_probe) and sets
// them through FindMutable().
//
// Not thread-safe: the Scheduler's mutex guards it.
class Membership {
 public:
  using Nodes = std::map<uint64_t, v1::NodeInfo>;  // by node id

  // Uses the heartbeat interval and timeout, suspect_own_partition, max_nodes,
  // max_registrations_per_minute and forget_dead_nodes_after of `options`.
  explicit Membership(const SchedulerOptions& options);

  // The nodes as stored, and the next id to give. Every ALIVE node gets a fresh grace period
  // (last heartbeat = `now`): nobody is declared dead for the scheduler's own absence. Returns
  // their ids (changed, to be written back).
  std::vector<uint64_t> Load(std::vector<v1::NodeInfo> nodes, uint64_t next_node_id,
                             absl::Time now);

  const Nodes& nodes() const { return nodes_; }
  uint64_t next_node_id() const { return next_node_id_; }
  // Null for an unknown id.
  const v1::NodeInfo* Find(uint64_t id) const;
  v1::NodeInfo* FindMutable(uint64_t id);
  // The node, or an empty NodeInfo for an unknown id.
  const v1::NodeInfo& Get(uint64_t id) const;

  struct Registration {
    uint64_t node_id = 0;             // the new node, ALIVE, with a new secret
    std::vector<uint64_t> replaced;   // alive servers at its address: the caller declares them dead
    std::vector<uint64_t> forgotten;  // dead nodes forgotten to make room
  };
  // Registers the node `req` describes (already checked: CheckRegisterRequest) at `now`.
  // `in_use`: the nodes a pending or running job names (never forgotten). In order:
  // RESOURCE_EXHAUSTED past the registration rate (an accepted registration counts, even if
  // refused later); PERMISSION_DENIED for a server at the address of an alive one that is
  // heard from and whose secret it does not show (ServersToReplace); RESOURCE_EXHAUSTED if no
  // room can be made. Past the first two checks it counts as hearing from a node (the cut-off
  // rule of DeclareSilentNodesDead), even if no room is found.
  absl::StatusOr<Registration> Register(const v1::RegisterRequest& req, absl::Time now,
                                        const std::set<uint64_t>& in_use);

  // PERMISSION_DENIED unless `secret` is the node's (nodes registered before secrets existed
  // have none: anything goes). `node_id` must be known.
  absl::Status CheckHeartbeatSecret(uint64_t node_id, const std::string& secret) const;
  // OK if `node_id` is unknown or has no secret, or `secret` is its; PERMISSION_DENIED otherwise.
  absl::Status CheckNodeSecret(uint64_t node_id, const std::string& secret) const;

  struct Heard {
    absl::Duration lag;  // since the node's previous heartbeat
    // Nodes whose last heartbeat changed: the node, and every live one after a cut-off.
    std::vector<uint64_t> refreshed;
  };
  // A heartbeat from ALIVE node `node_id` at `now`. The first one after the scheduler was cut
  // off (see DeclareSilentNodesDead) gives every live node a fresh grace period.
  Heard RecordHeartbeat(uint64_t node_id, absl::Time now);

  // The live nodes silent for longer than the heartbeat timeout, now DEAD (all of them before
  // the caller handles any: a server that died in the same tick must not take another one's
  // slots). With options.suspect_own_partition, when none of several live nodes was heard for
  // min(2 heartbeat intervals, timeout / 2), the scheduler is the one cut off: nobody is
  // declared dead until a heartbeat arrives.
  std::vector<uint64_t> DeclareSilentNodesDead(absl::Time now);
  // ALIVE -> DEAD (no-op for a dead or unknown node).
  void MarkDead(uint64_t node_id);
  // Forgets the nodes dead for longer than options.forget_dead_nodes_after (0: never) that are
  // not `in_use`; returns their ids.
  std::vector<uint64_t> ForgetDeadNodes(absl::Time now, const std::set<uint64_t>& in_use);

  // A server registering at the address of alive ones: those it replaces if the caller shows
  // their node secret or they have been silent for the heartbeat timeout (or have no secret:
  // registered before secrets existed); PERMISSION_DENIED otherwise. Empty for a worker.
  absl::StatusOr<std::vector<uint64_t>> ServersToReplace(const v1::RegisterRequest& req,
                                                         absl::Time now) const;

 private:
  // RESOURCE_EXHAUSTED past options.max_registrations_per_minute; else counts this one.
  absl::Status CheckRegistrationRate(absl::Time now);
  // Room for one more node under options.max_nodes: forgets the oldest dead nodes not `in_use`
  // and returns them; RESOURCE_EXHAUSTED if that is not enough (a server that replaces an alive
  // one at its address is let in).
  absl::StatusOr<std::vector<uint64_t>> MakeRoom(const v1::RegisterRequest& req,
                                                 const std::set<uint64_t>& in_use);

  const SchedulerOptions options_;
  Nodes nodes_;
  uint64_t next_node_id_ = 1;
  // When each registration of the last minute was accepted (oldest first). In memory only.
  std::deque<absl::Time> registrations_;
  // The last heartbeat (or registration) from any node, and whether the scheduler thinks itself
  // cut off (every live node silent at once) and since when.
  absl::Time last_heard_ = absl::InfinitePast();
  bool cut_off_ = false;
  absl::Time cut_off_since_;
};

}  // namespace ps

#endif  // PS_SCHEDULER_MEMBERSHIP_H_
