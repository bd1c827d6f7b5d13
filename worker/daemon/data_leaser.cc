#include "worker/daemon/data_leaser.h"

#include <glog/logging.h>
#include <grpcpp/client_context.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"

namespace ps {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(10);
// How long a "not a worker of the job" answer is waited on for the order that stops the run.
constexpr absl::Duration kMembershipGrace = absl::Seconds(10);

}  // namespace

SchedulerDataLeaser::SchedulerDataLeaser(v1::Scheduler::StubInterface* scheduler,
                                         std::function<NodeIdentity()> node, std::string job_id,
                                         uint32_t worker_id, absl::Duration give_up,
                                         std::function<bool()> stopped)
    : scheduler_(scheduler),
      node_(std::move(node)),
      job_id_(std::move(job_id)),
      worker_id_(worker_id),
      give_up_(give_up),
      stopped_(std::move(stopped)) {}

absl::StatusOr<v1::LeaseDataResponse> SchedulerDataLeaser::Lease(v1::LeaseDataRequest request) {
  request.set_job_id(job_id_);
  request.set_worker_id(worker_id_);
  const absl::Time start = absl::Now();
  absl::Duration backoff = absl::Milliseconds(100);
  bool warned = false;
  while (true) {
    const NodeIdentity node = node_();
    request.set_node_id(node.node_id);
    request.set_node_secret(node.secret);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + kCallTimeout));
    v1::LeaseDataResponse response;
    const absl::Status s = FromGrpcStatus(scheduler_->LeaseData(&ctx, request, &response));
    if (s.ok()) {
      if (warned) LOG(INFO) << job_id_ << ": the scheduler answers data leases again";
      return response;
    }
    const bool unreachable = absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
    const bool not_member = absl::IsFailedPrecondition(s) || absl::IsNotFound(s);
    const absl::Duration waited = absl::Now() - start;
    if (!(unreachable && waited < give_up_) && !(not_member && waited < kMembershipGrace)) {
      if (stopped_()) return absl::CancelledError("the job was cancelled");
      return s;
    }
    if (!warned) {
      LOG(WARNING) << job_id_ << ": data lease: " << s << "; asking again for up to "
                   << absl::FormatDuration(unreachable ? give_up_ : kMembershipGrace);
      warned = true;
    }
    for (absl::Duration slept; slept < backoff; slept += absl::Milliseconds(50)) {
      if (stopped_()) return absl::CancelledError("the job was cancelled");
      absl::SleepFor(absl::Milliseconds(50));
    }
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

}  // namespace ps
