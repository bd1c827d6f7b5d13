// ps_scheduler as a library: Scheduler + its gRPC service on one port + the ticker thread.
#ifndef PS_SCHEDULER_SCHEDULER_SERVER_H_
#define PS_SCHEDULER_SCHEDULER_SERVER_H_

#include <grpcpp/server.h>

#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/grpc_job_dropper.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_options.h"
#include "scheduler/scheduler_service.h"

namespace ps {

// Owns the scheduler, the service, the gRPC server, a thread that calls Scheduler::Tick()
// every options.tick_interval (of real time), and the GrpcJobDropper that tells servers to drop
// the jobs that ended. The server also serves grpc.health.v1.Health
// (SERVING from Start() until Drain()) and server reflection. Thread-safe after Start().
class SchedulerServer {
 public:
  // `metrics` (null: none) must outlive the server.
  static absl::StatusOr<std::unique_ptr<SchedulerServer>> Start(
      const SchedulerOptions& options, Scheduler::Clock clock = absl::Now,
      SchedulerMetrics* metrics = nullptr);
  ~SchedulerServer();

  int port() const { return port_; }
  Scheduler* scheduler() { return scheduler_.get(); }
  // Health turns NOT_SERVING (load balancers and probes stop sending); calls are still served
  // until Shutdown().
  void Drain();
  // Stops serving (waiting up to `grace` for calls in flight) and stops the ticker. Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(1));

 private:
  SchedulerServer() = default;
  void TickLoop(absl::Duration interval);

  std::unique_ptr<GrpcJobDropper> dropper_;  // outlives scheduler_, which uses it
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<SchedulerService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread ticker_;
};

}  // namespace ps

#endif  // PS_SCHEDULER_SCHEDULER_SERVER_H_
