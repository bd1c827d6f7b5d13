// A daemon's link to the scheduler: registration, then a heartbeat every interval.
#ifndef PS_COMMON_SCHEDULER_LINK_H_
#define PS_COMMON_SCHEDULER_LINK_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "ps/v1/scheduler.grpc.pb.h"

namespace ps {

// A node as the scheduler registered it: calls made on its behalf carry both (node_id 0: not
// registered yet).
struct NodeIdentity {
  uint64_t node_id = 0;
  std::string secret;
};

struct SchedulerLinkOptions {
  std::string scheduler;  // host:port
  v1::NodeRole role = v1::ROLE_UNSPECIFIED;
  std::string address;  // servers: the data-plane address workers reach them at
  std::string hostname;
  int64_t pid = 0;
  std::string metrics_address;  // host:port of the node's /metrics (empty: none)
  absl::Duration rpc_timeout = absl::Seconds(3);
  // Called (on the link's thread) as soon as a heartbeat answer says the scheduler does not
  // know this node: it was declared dead, and what it held is someone else's now. May be empty.
  std::function<void()> on_declared_dead;
  // Called (on the link's thread) after each successful registration, with the answer and the
  // new node id. May be empty.
  std::function<void(const v1::RegisterResponse&)> on_registered;
};

// The host:port peers reach a daemon listening on `listen` at, once bound to `port`: the listen
// host, or `hostname` when it listens on every interface ("0.0.0.0", "[::]", "").
std::string AdvertisedAddress(const std::string& listen, int port, const std::string& hostname);

// Registers (retrying while the scheduler is away) and heartbeats on its own thread. The data
// plane never waits on it: a scheduler that is down only delays orders. Thread-safe.
class SchedulerLink {
 public:
  // Fills the request (node_id and node_secret are set by the link) before each heartbeat.
  using FillFn = std::function<void(v1::HeartbeatRequest*)>;
  // Sees every heartbeat answer. `reregistered` is true for the first answer after the node had
  // to register again (the scheduler declared it dead: whatever it was doing is void).
  using AnswerFn = std::function<void(const v1::HeartbeatResponse&, bool reregistered)>;

  SchedulerLink(SchedulerLinkOptions options, FillFn fill, AnswerFn answer);
  ~SchedulerLink();  // stops the thread

  void Start();
  uint64_t node_id() const;
  // The secret the scheduler gave this node at its last registration (empty before the first):
  // heartbeats carry it, and calls made on this node's behalf may.
  std::string node_secret() const;
  NodeIdentity identity() const;

 private:
  void Loop();
  absl::Status Register();

  const SchedulerLinkOptions options_;
  const FillFn fill_;
  const AnswerFn answer_;
  std::unique_ptr<v1::Scheduler::Stub> stub_;
  absl::Notification stop_;
  std::thread thread_;
  mutable absl::Mutex mu_;
  uint64_t node_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::string node_secret_ ABSL_GUARDED_BY(mu_);
  absl::Duration interval_ ABSL_GUARDED_BY(mu_) = absl::Seconds(1);
};

}  // namespace ps

#endif  // PS_COMMON_SCHEDULER_LINK_H_
