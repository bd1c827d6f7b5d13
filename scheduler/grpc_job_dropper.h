// Sends the scheduler's drop orders to the parameter servers (ParameterServer.DropJob).
#ifndef PS_SCHEDULER_GRPC_JOB_DROPPER_H_
#define PS_SCHEDULER_GRPC_JOB_DROPPER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/job_dropper.h"

namespace ps {

struct GrpcJobDropperOptions {
  // Longest one DropJob call may take; a server that does not answer by then is skipped.
  absl::Duration rpc_deadline = absl::Seconds(5);
  // Orders waiting to be sent; more are refused (logged): dropping is best effort.
  size_t max_queued = 10000;
};

// Thread-safe. Drop() only queues; one background thread sends each order's DropJob calls to
// all its servers at once and waits for them (each bounded by rpc_deadline) before the next
// order. A call that fails (a server down, a deadline) is logged and skipped: a server that
// died lost the job's memory anyway, and a job's checkpoints (files) are not touched.
class GrpcJobDropper final : public JobDropper {
 public:
  explicit GrpcJobDropper(GrpcJobDropperOptions options = {});
  // Abandons the orders not yet sent and waits for the calls in flight (bounded by rpc_deadline).
  ~GrpcJobDropper() override;
  GrpcJobDropper(const GrpcJobDropper&) = delete;
  GrpcJobDropper& operator=(const GrpcJobDropper&) = delete;

  void Drop(DropOrder order) override;
  // Waits until every order queued before the call was sent and answered (or failed), or until
  // `timeout`; false on timeout. For tests and orderly shutdowns.
  bool Flush(absl::Duration timeout);

 private:
  void Loop();
  void Send(const DropOrder& order);

  const GrpcJobDropperOptions options_;
  absl::Mutex mu_;
  absl::CondVar changed_;  // an order was queued or sent, or stopping began
  std::deque<DropOrder> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_ ABSL_GUARDED_BY(mu_) = 0;  // orders queued so far
  uint64_t done_ ABSL_GUARDED_BY(mu_) = 0;    // orders sent (or refused) so far
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread sender_;
};

}  // namespace ps

#endif  // PS_SCHEDULER_GRPC_JOB_DROPPER_H_
