#include "scheduler/grpc_job_dropper.h"

#include <glog/logging.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/blocking_counter.h"
#include "common/security.h"
#include "ps/v1/parameter_server.grpc.pb.h"

namespace ps {

GrpcJobDropper::GrpcJobDropper(GrpcJobDropperOptions options) : options_(options) {
  sender_ = std::thread([this] { Loop(); });
}

GrpcJobDropper::~GrpcJobDropper() {
  size_t abandoned;
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    abandoned = queue_.size();
    done_ += queue_.size();
    queue_.clear();
    changed_.SignalAll();
  }
  sender_.join();
  if (abandoned > 0) {
    LOG(INFO) << "job dropper stopped: " << abandoned << " ended jobs not dropped on their servers";
  }
}

void GrpcJobDropper::Drop(DropOrder order) {
  if (order.servers.empty()) return;
  absl::MutexLock l(&mu_);
  if (stopping_) return;
  if (queue_.size() >= options_.max_queued) {
    LOG_EVERY_N(WARNING, 100) << "job " << order.job_id
                              << " is not dropped on its servers: " << queue_.size()
                              << " ended jobs wait to be dropped already";
    return;
  }
  queue_.push_back(std::move(order));
  ++queued_;
  changed_.SignalAll();
}

bool GrpcJobDropper::Flush(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock l(&mu_);
  const uint64_t target = queued_;
  while (done_ < target) {
    if (changed_.WaitWithDeadline(&mu_, deadline) && done_ < target) return false;
  }
  return true;
}

void GrpcJobDropper::Loop() {
  while (true) {
    DropOrder order;
    {
      absl::MutexLock l(&mu_);
      while (!stopping_ && queue_.empty()) changed_.Wait(&mu_);
      if (stopping_) return;
      order = std::move(queue_.front());
      queue_.pop_front();
    }
    Send(order);
    absl::MutexLock l(&mu_);
    ++done_;
    changed_.SignalAll();
  }
}

void GrpcJobDropper::Send(const DropOrder& order) {
  struct Call {
    std::unique_ptr<v1::ParameterServer::Stub> stub;
    grpc::ClientContext ctx;
    v1::DropJobResponse response;
    grpc::Status status;
  };
  v1::DropJobRequest request;
  request.set_job_id(order.job_id);
  const auto deadline = absl::ToChronoTime(absl::Now() + options_.rpc_deadline);
  std::vector<std::unique_ptr<Call>> calls;
  absl::BlockingCounter pending(static_cast<int>(order.servers.size()));
  // Every server at once: one that does not answer costs rpc_deadline, not one per server.
  for (const std::string& address : order.servers) {
    Call* call = calls.emplace_back(std::make_unique<Call>()).get();
    call->stub = v1::ParameterServer::NewStub(DialChannel(address));
    call->ctx.set_deadline(deadline);
    call->stub->async()->DropJob(&call->ctx, &request, &call->response,
                                 [call, &pending](grpc::Status status) {
                                   call->status = std::move(status);
                                   pending.DecrementCount();
                                 });
  }
  pending.Wait();
  for (size_t i = 0; i < calls.size(); ++i) {
    const Call& call = *calls[i];
    if (call.status.ok()) {
      LOG(INFO) << "job " << order.job_id << " dropped on server " << order.servers[i] << ": "
                << call.response.tables_dropped() << " tables, " << call.response.bytes_freed()
                << " bytes freed";
    } else {
      LOG(WARNING) << "job " << order.job_id << " not dropped on server " << order.servers[i]
                   << " (skipped; best effort): " << call.status.error_message() << " (code "
                   << call.status.error_code() << ")";
    }
  }
}

}  // namespace ps
