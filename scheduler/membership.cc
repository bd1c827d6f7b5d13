#include "scheduler/membership.h"

#include <glog/logging.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/node_identity.h"
#include "common/security.h"
#include "common/status_macros.h"
#include "scheduler/scheduler_internal.h"

namespace ps {
namespace {

using scheduler_internal::ToMs;

absl::Duration SilentFor(const v1::NodeInfo& node, absl::Time now) {
  return now - absl::FromUnixMillis(node.last_heartbeat_unix_ms());
}

}  // namespace

Membership::Membership(const SchedulerOptions& options) : options_(options) {}

std::vector<uint64_t> Membership::Load(std::vector<v1::NodeInfo> nodes, uint64_t next_node_id,
                                       absl::Time now) {
  std::vector<uint64_t> refreshed;
  next_node_id_ = next_node_id;
  for (v1::NodeInfo& node : nodes) {
    if (node.state() == v1::ALIVE) {
      node.set_last_heartbeat_unix_ms(ToMs(now));
      refreshed.push_back(node.node_id());
    }
    next_node_id_ = std::max(next_node_id_, node.node_id() + 1);
    nodes_[node.node_id()] = std::move(node);
  }
  return refreshed;
}

const v1::NodeInfo* Membership::Find(uint64_t id) const {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

v1::NodeInfo* Membership::FindMutable(uint64_t id) {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

const v1::NodeInfo& Membership::Get(uint64_t id) const {
  const v1::NodeInfo* node = Find(id);
  return node == nullptr ? v1::NodeInfo::default_instance() : *node;
}

absl::StatusOr<Membership::Registration> Membership::Register(const v1::RegisterRequest& req,
                                                              absl::Time now,
                                                              const std::set<uint64_t>& in_use) {
  PS_RETURN_IF_ERROR(CheckRegistrationRate(now));
  Registration registration;
  PS_ASSIGN_OR_RETURN(registration.replaced, ServersToReplace(req, now));
  last_heard_ = now;
  PS_ASSIGN_OR_RETURN(registration.forgotten, MakeRoom(req, in_use));
  const uint64_t id = next_node_id_++;
  v1::NodeInfo& node = nodes_[id];
  node.set_node_id(id);
  node.set_role(req.role());
  node.set_state(v1::ALIVE);
  node.set_address(req.address());
  node.set_hostname(req.hostname());
  node.set_pid(req.pid());
  node.set_metrics_address(req.metrics_address());
  node.set_version(req.version());
  node.set_last_heartbeat_unix_ms(ToMs(now));
  node.set_registered_unix_ms(ToMs(now));
  node.set_node_secret(NewSecret());
  registration.node_id = id;
  return registration;
}

absl::Status Membership::CheckRegistrationRate(absl::Time now) {
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

absl::StatusOr<std::vector<uint64_t>> Membership::ServersToReplace(const v1::RegisterRequest& req,
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
    const absl::Duration silent = SilentFor(other, now);
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

absl::StatusOr<std::vector<uint64_t>> Membership::MakeRoom(const v1::RegisterRequest& req,
                                                           const std::set<uint64_t>& in_use) {
  const size_t max_nodes = static_cast<size_t>(options_.max_nodes);
  if (nodes_.size() < max_nodes) return std::vector<uint64_t>();
  // Dead nodes are history (psctl nodes) until room is needed; those a pending or running job
  // still names stay.
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
  forgettable.resize(std::min(needed, forgettable.size()));
  for (uint64_t id : forgettable) nodes_.erase(id);
  if (!forgettable.empty()) {
    LOG(INFO) << "forgot " << forgettable.size() << " dead node(s) (oldest first, from node "
              << forgettable[0] << ") to register a new one under --max_nodes=" << max_nodes;
  }
  return forgettable;
}

absl::Status Membership::CheckHeartbeatSecret(uint64_t node_id, const std::string& secret) const {
  const v1::NodeInfo& node = Get(node_id);
  // Only the daemon that registered as this node may speak for it (nodes registered before
  // secrets existed have none).
  if (!node.node_secret().empty() && !ConstantTimeEquals(secret, node.node_secret())) {
    return absl::PermissionDeniedError(
        absl::StrCat("heartbeat for node ", node_id,
                     ": node_secret does not match (only the daemon that registered as that node "
                     "may heartbeat for it)"));
  }
  return absl::OkStatus();
}

absl::Status Membership::CheckNodeSecret(uint64_t node_id, const std::string& secret) const {
  const v1::NodeInfo* node = Find(node_id);
  if (node == nullptr || node->node_secret().empty() ||
      ConstantTimeEquals(secret, node->node_secret())) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat("node_secret does not match node ", node_id,
                                                  "'s (only that daemon may speak for it)"));
}

Membership::Heard Membership::RecordHeartbeat(uint64_t node_id, absl::Time now) {
  Heard heard;
  last_heard_ = now;
  if (cut_off_) {
    // The first heartbeat after the scheduler heard nobody: it was the one cut off. Every node
    // gets a fresh grace period, as after a scheduler restart.
    cut_off_ = false;
    LOG(WARNING) << "scheduler: heartbeats again after "
                 << absl::FormatDuration(now - cut_off_since_)
                 << " of silence from every node; nobody was declared dead meanwhile";
    for (auto& [id, other] : nodes_) {
      if (other.state() == v1::ALIVE) {
        other.set_last_heartbeat_unix_ms(ToMs(now));
        heard.refreshed.push_back(id);
      }
    }
  }
  v1::NodeInfo& node = nodes_.at(node_id);
  heard.lag = SilentFor(node, now);
  node.set_last_heartbeat_unix_ms(ToMs(now));
  heard.refreshed.push_back(node_id);
  return heard;
}

std::vector<uint64_t> Membership::DeclareSilentNodesDead(absl::Time now) {
  std::vector<uint64_t> dead;
  int alive = 0;
  for (const auto& [id, node] : nodes_) {
    if (node.state() != v1::ALIVE) continue;
    ++alive;
    if (SilentFor(node, now) > options_.heartbeat_timeout) dead.push_back(id);
  }
  // Nobody of several live nodes heard for two heartbeat intervals (at most half the timeout):
  // the scheduler is the one cut off (a partition, a frozen process), not all of them dead.
  // Heartbeats are staggered, so waiting for all to time out together would declare the first
  // ones dead one by one. Declare nobody dead until a heartbeat arrives, which then gives
  // everyone a fresh grace period.
  if (options_.suspect_own_partition && alive >= 2 && !dead.empty() &&
      last_heard_ != absl::InfinitePast() &&
      now - last_heard_ >
          std::min(2 * options_.heartbeat_interval, options_.heartbeat_timeout / 2)) {
    if (!cut_off_) {
      cut_off_ = true;
      cut_off_since_ = last_heard_;
      LOG(WARNING) << "scheduler: no heartbeat from any of the " << alive << " live nodes for "
                   << absl::FormatDuration(now - last_heard_)
                   << ": this scheduler is probably cut off from them; declaring nobody dead "
                      "until they are heard again";
    }
    dead.clear();
  }
  for (uint64_t id : dead) MarkDead(id);
  return dead;
}

void Membership::MarkDead(uint64_t node_id) {
  v1::NodeInfo* node = FindMutable(node_id);
  if (node != nullptr) node->set_state(v1::DEAD);
}

std::vector<uint64_t> Membership::ForgetDeadNodes(absl::Time now,
                                                  const std::set<uint64_t>& in_use) {
  std::vector<uint64_t> forget;
  if (options_.forget_dead_nodes_after == absl::ZeroDuration()) return forget;
  for (const auto& [id, node] : nodes_) {
    if (node.state() == v1::DEAD && in_use.count(id) == 0 &&
        SilentFor(node, now) > options_.forget_dead_nodes_after) {
      forget.push_back(id);
    }
  }
  for (uint64_t id : forget) nodes_.erase(id);
  if (!forget.empty()) {
    LOG(INFO) << "forgot " << forget.size() << " node(s) dead for longer than "
              << absl::FormatDuration(options_.forget_dead_nodes_after)
              << " (--forget_dead_nodes_after)";
  }
  return forget;
}

}  // namespace ps
