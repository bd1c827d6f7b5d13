// The gRPC Scheduler service: thin handlers over Scheduler.
#ifndef PS_SCHEDULER_SCHEDULER_SERVICE_H_
#define PS_SCHEDULER_SCHEDULER_SERVICE_H_

#include "common/security.h"
#include "ps/v1/scheduler.grpc.pb.h"
#include "scheduler/scheduler.h"

namespace ps {

// Thread-safe (Scheduler is).
class SchedulerService final : public v1::Scheduler::Service {
 public:
  // `scheduler` must outlive this; `authorizer` (may be null: no tokens) checks every call's
  // token.
  explicit SchedulerService(Scheduler* scheduler, const Authorizer* authorizer = nullptr)
      : scheduler_(scheduler), authorizer_(authorizer) {}

  grpc::Status Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                        v1::RegisterResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;
  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                      v1::JobInfo* resp) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                         v1::JobInfo* resp) override;
  grpc::Status ListNodes(grpc::ServerContext* ctx, const v1::ListNodesRequest* req,
                         v1::ListNodesResponse* resp) override;
  grpc::Status GetJobLogs(grpc::ServerContext* ctx, const v1::GetJobLogsRequest* req,
                          v1::GetJobLogsResponse* resp) override;
  grpc::Status RequestCheckpoint(grpc::ServerContext* ctx, const v1::RequestCheckpointRequest* req,
                                 v1::RequestCheckpointResponse* resp) override;
  grpc::Status ListCheckpoints(grpc::ServerContext* ctx, const v1::ListCheckpointsRequest* req,
                               v1::ListCheckpointsResponse* resp) override;
  grpc::Status RestoreJob(grpc::ServerContext* ctx, const v1::RestoreJobRequest* req,
                          v1::JobInfo* resp) override;
  grpc::Status BeginCheckpoint(grpc::ServerContext* ctx, const v1::BeginCheckpointRequest* req,
                               v1::CheckpointInfo* resp) override;
  grpc::Status FinishCheckpoint(grpc::ServerContext* ctx, const v1::FinishCheckpointRequest* req,
                                v1::CheckpointInfo* resp) override;
  grpc::Status LeaseData(grpc::ServerContext* ctx, const v1::LeaseDataRequest* req,
                         v1::LeaseDataResponse* resp) override;
  grpc::Status DrainNode(grpc::ServerContext* ctx, const v1::DrainNodeRequest* req,
                         v1::NodeInfo* resp) override;
  grpc::Status ReportRestoreFailure(grpc::ServerContext* ctx,
                                    const v1::ReportRestoreFailureRequest* req,
                                    v1::JobInfo* resp) override;

 private:
  // Who makes a job call: the node it names (node_id != 0, checked by the scheduler with its
  // secret), else an admin if the call carries the admin token (or the cluster needs none),
  // else nobody the scheduler accepts.
  JobCaller Caller(const grpc::ServerContext& ctx, uint64_t node_id,
                   const std::string& node_secret) const;

  Scheduler* const scheduler_;
  const Authorizer* const authorizer_;
};

}  // namespace ps

#endif  // PS_SCHEDULER_SCHEDULER_SERVICE_H_
