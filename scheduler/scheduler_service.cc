#include "scheduler/scheduler_service.h"

#include <utility>

#include "common/grpc_status.h"
#include "common/security.h"

namespace ps {
namespace {

// Moves an OK value into *out; converts the status once.
template <typename T>
grpc::Status Answer(absl::StatusOr<T> result, T* out) {
  if (result.ok()) *out = std::move(*result);
  return ToGrpcStatus(result.status());
}

}  // namespace

JobCaller SchedulerService::Caller(const grpc::ServerContext& ctx, uint64_t node_id,
                                   const std::string& node_secret) const {
  // A daemon naming itself is checked as that node, whatever its token.
  if (node_id != 0) return JobCaller::Node(node_id, node_secret);
  if (authorizer_ == nullptr || authorizer_->IsAdmin(ctx)) return JobCaller::Admin();
  return JobCaller();  // neither: refused by the scheduler, naming what it needs
}

grpc::Status SchedulerService::Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                                        v1::RegisterResponse* resp) {
  PS_AUTHORIZE(authorizer_, ctx, Access::kNode);
  return Answer(scheduler_->Register(*req), resp);
}

grpc::Status SchedulerService::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                         v1::HeartbeatResponse* resp) {
  PS_AUTHORIZE(authorizer_, ctx, Access::kNode);
  return Answer(scheduler_->Heartbeat(*req), resp);
}

grpc::Status SchedulerService::SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                                         v1::SubmitJobResponse* resp) {
  PS_AUTHORIZE(authorizer_, ctx, Access::kAdmin);
  return Answer(scheduler_->SubmitJob(req->spec()), resp->mutable_job_id());
}

grpc::Status SchedulerService::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                                      v1::JobInfo* resp) {
  PS_AUTHORIZE(authorizer_, ctx, Access::kNode);
  return Answer(scheduler_->GetJob(req->job_id()), resp);
}

grpc::Status SchedulerService::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest*,
                                        v1::ListJobsResponse* resp) {
  PS_AUTHORIZE(authorizer_, ctx, Access::kNode);
  for (v1::JobInfo& job : scheduler_->ListJobs()) *resp->add_jobs() = std::move(job);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                                         v1::JobInfo* resp) {
  PS_AUTHORIZE(authorizer_, ctx, Access::kAdmin);
  return Answer(scheduler_->CancelJob(req->job_id()), resp);
}

grpc::Status SchedulerService::GetJobLogs(grpc::ServerContext* ctx,
                                          const v1::GetJobLogsRequest* req,
                                          v1::GetJobLogsResponse* resp) {
  PS_AUTHORIZE(authorizer_, ctx, Access::kNode);
  return Answer(scheduler_->GetJobLogs(*req), resp);
}

grpc::Status SchedulerService::ListNodes(grpc::ServerContext* ctx, const v1::ListNodesRequest*,
                                         v1::ListNodesResponse* resp) {
  PS_AUTHORIZE(authorizer_, ctx, Access::kNode);
  for (v1::NodeInfo& node : scheduler_->ListNodes()) *resp->add_nodes() = std::move(node);
  resp->set_metrics_address(scheduler_->metrics_address());
  return grpc::Status::OK;
}

grpc::Status SchedulerService::RequestCheckpoint(grpc::ServerContext* ctx,
                                                 const v1::RequestCheckpointRequest* req,
                                                 v1::RequestCheckpointResponse* resp) {
  // A worker daemon asks for its own job's checkpoint with the cluster token; psctl with admin's.
  PS_AUTHORIZE(authorizer_, ctx, req->node_id() != 0 ? Access::kNode : Access::kAdmin);
  return Answer(scheduler_->RequestCheckpoint(req->job_id(),
                                              Caller(*ctx, req->node_id(), req->node_secret())),
                resp);
}

grpc::Status SchedulerService::DrainNode(grpc::ServerContext* ctx, const v1::DrainNodeRequest* req,
                                         v1::NodeInfo* resp) {
  PS_AUTHORIZE(authorizer_, ctx, Access::kAdmin);
  return Answer(scheduler_->DrainNode(req->node_id()), resp);
}

grpc::Status SchedulerService::ListCheckpoints(grpc::ServerContext* ctx,
                                               const v1::ListCheckpointsRequest* req,
                                               v1::ListCheckpointsResponse* resp) {
  PS_AUTHORIZE(authorizer_, ctx, Access::kNode);
  auto list = scheduler_->ListCheckpoints(req->job_id());
  if (!list.ok()) return ToGrpcStatus(list.status());
  for (v1::CheckpointInfo& c : *list) *resp->add_checkpoints() = std::move(c);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::RestoreJob(grpc::ServerContext* ctx,
                                          const v1::RestoreJobRequest* req, v1::JobInfo* resp) {
  PS_AUTHORIZE(authorizer_, ctx, Access::kAdmin);
  return Answer(scheduler_->RestoreJob(req->job_id(), req->checkpoint_id()), resp);
}

grpc::Status SchedulerService::LeaseData(grpc::ServerContext* ctx, const v1::LeaseDataRequest* req,
                                         v1::LeaseDataResponse* resp) {
  PS_AUTHORIZE(authorizer_, ctx, Access::kNode);
  return Answer(scheduler_->LeaseData(*req), resp);
}

grpc::Status SchedulerService::BeginCheckpoint(grpc::ServerContext* ctx,
                                               const v1::BeginCheckpointRequest* req,
                                               v1::CheckpointInfo* resp) {
  PS_AUTHORIZE(authorizer_, ctx, Access::kNode);
  return Answer(scheduler_->BeginCheckpoint(*req, Caller(*ctx, req->node_id(), req->node_secret())),
                resp);
}

grpc::Status SchedulerService::FinishCheckpoint(grpc::ServerContext* ctx,
                                                const v1::FinishCheckpointRequest* req,
                                                v1::CheckpointInfo* resp) {
  PS_AUTHORIZE(authorizer_, ctx, Access::kNode);
  return Answer(
      scheduler_->FinishCheckpoint(*req, Caller(*ctx, req->node_id(), req->node_secret())), resp);
}

grpc::Status SchedulerService::ReportRestoreFailure(grpc::ServerContext* ctx,
                                                    const v1::ReportRestoreFailureRequest* req,
                                                    v1::JobInfo* resp) {
  PS_AUTHORIZE(authorizer_, ctx, Access::kNode);
  return Answer(
      scheduler_->ReportRestoreFailure(*req, Caller(*ctx, req->node_id(), req->node_secret())),
      resp);
}

}  // namespace ps
