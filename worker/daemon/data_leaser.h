// Dynamic data assignment through the scheduler: a DataLeaser that calls its LeaseData RPC.
#ifndef PS_WORKER_DAEMON_DATA_LEASER_H_
#define PS_WORKER_DAEMON_DATA_LEASER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/time/time.h"
#include "common/scheduler_link.h"
#include "ps/v1/scheduler.grpc.pb.h"
#include "worker/daemon/job_runner.h"

namespace ps {

// Leases from the scheduler for one worker of one job. While the scheduler cannot be reached
// (restarting, a network blip) it retries for up to `give_up`; an answer that says the worker
// is no longer one of the job's (it was declared dead) is waited on for a few seconds, since
// the order that stops the run is then on its way; `stopped()` ends both waits with CANCELLED.
class SchedulerDataLeaser final : public DataLeaser {
 public:
  SchedulerDataLeaser(v1::Scheduler::StubInterface* scheduler, std::function<NodeIdentity()> node,
                      std::string job_id, uint32_t worker_id, absl::Duration give_up,
                      std::function<bool()> stopped);
  absl::StatusOr<v1::LeaseDataResponse> Lease(v1::LeaseDataRequest request) override;

 private:
  v1::Scheduler::StubInterface* const scheduler_;
  const std::function<NodeIdentity()> node_;
  const std::string job_id_;
  const uint32_t worker_id_;
  const absl::Duration give_up_;
  const std::function<bool()> stopped_;
};

}  // namespace ps

#endif  // PS_WORKER_DAEMON_DATA_LEASER_H_
