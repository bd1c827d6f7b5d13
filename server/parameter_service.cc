#include "server/parameter_service.h"

#include <glog/logging.h>
#include <grpcpp/support/method_handler.h>
#include <grpcpp/support/server_callback.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/grpc_status.h"
#include "common/node_identity.h"
#include "common/printable.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "server/data_call.h"
#include "server/replication_map.h"

namespace ps {
namespace {

// Longest an AwaitCheckpoint call waits (for callers that set no deadline).
constexpr absl::Duration kMaxAwait = absl::Minutes(30);

// Method indexes in the generated service (the order of ps.v1.ParameterServer's rpcs).
constexpr int kPullMethod = 3, kPushMethod = 4, kPushPullMethod = 5;

}  // namespace

ParameterService::ParameterService(TableStore* store, absl::Duration max_pull_wait,
                                   ServerMetrics* metrics, CheckpointerOptions checkpoints)
    : store_(store),
      metrics_(metrics),
      max_pull_wait_(max_pull_wait),
      gate_([this, store](const std::string& job_id, int64_t from, int64_t to) {
        store->ApplyAccumulated(job_id, from, to);
        // Replicas: the clock completes once the backups have it (a no-op without them).
        forwarder_.ForwardClock(job_id, to - 1);
      }),
      data_plane_(store, &gate_, &deduper_, metrics),
      restorer_(store, &gate_, metrics, checkpoints.roots),
      backup_(store),
      forwarder_(store),
      grants_(checkpoints.roots.roots()),
      checkpointer_(store, std::move(checkpoints), metrics) {
  for (const auto& [index, method] :
       {std::pair{kPullMethod, ServerMethod::kPull}, std::pair{kPushMethod, ServerMethod::kPush},
        std::pair{kPushPullMethod, ServerMethod::kPushPull}}) {
    MarkMethodRawCallback(
        index,
        new grpc::internal::CallbackUnaryHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
            [this, method = method](grpc::CallbackServerContext* ctx,
                                    const grpc::ByteBuffer* request, grpc::ByteBuffer* answer) {
              return StartDataCall(method, ctx, request, answer);
            }));
  }
}

void ParameterService::Shutdown() {
  gate_.Shutdown();
  checkpointer_.Shutdown();
}

absl::Time ParameterService::PullDeadline(const grpc::ServerContextBase* ctx) const {
  const absl::Time limit = absl::Now() + max_pull_wait_;
  const absl::Time rpc = absl::FromChrono(ctx->deadline());
  return std::min(limit, rpc);
}

absl::Status ParameterService::CheckJob(const std::string& job_id) const {
  PS_RETURN_IF_ERROR(CheckJobId(job_id));
  return store_->CheckNotDropped(job_id);
}

grpc::Status ParameterService::Finish(ServerMethod method, absl::Time start,
                                      const google::protobuf::Message& req,
                                      const google::protobuf::Message& resp,
                                      const absl::Status& status) const {
  if (metrics_ != nullptr) {
    metrics_->RecordRequest(method, status, req.ByteSizeLong(),
                            status.ok() ? resp.ByteSizeLong() : 0, absl::Now() - start);
  }
  return ToGrpcStatus(status);
}

absl::Status ParameterService::DoConfigureJob(const v1::ConfigureJobRequest& req,
                                              v1::ConfigureJobResponse* resp) {
  PS_RETURN_IF_ERROR(CheckJobId(req.job_id()));
  absl::ReaderMutexLock lifecycle(&lifecycle_mu_);
  PS_RETURN_IF_ERROR(store_->CheckNotDropped(req.job_id()));
  // Checked before anything changes (-1: the caller does not know its clock).
  if (req.caller_clock() != -1) {
    PS_RETURN_IF_ERROR(ConsistencyGate::CheckClockRange("caller_clock", req.caller_clock()));
  }
  std::optional<ReplicaRoles> replicas;
  if (req.has_replicas()) {
    PS_ASSIGN_OR_RETURN(replicas, ResolveReplicaMap(req.replicas()));
    PS_RETURN_IF_ERROR(CheckReplicable(store_->JobTables(req.job_id())));
  }
  // One ConfigureJob at a time: the first of a new map takes slots over (Adopted) and sets up
  // their catch-up before another worker, configured under the same map, can pull from them.
  absl::MutexLock configure(&configure_mu_);
  Adoption adoption;
  if (!req.owned_slots().empty()) {
    PS_ASSIGN_OR_RETURN(auto owned, DecodeSlotBitmap(req.owned_slots()));
    adoption = Adopted(req.job_id(), req.shard_epoch(), owned);
    PS_RETURN_IF_ERROR(store_->SetJobShards(req.job_id(), std::move(owned), req.shard_epoch()));
  }
  // Before the gate: a clock that Configure completes goes to the new map's backups.
  PS_RETURN_IF_ERROR(SetReplicas(req, std::move(replicas)));
  std::vector<uint32_t> workers(req.worker_ids().begin(), req.worker_ids().end());
  PS_RETURN_IF_ERROR(
      gate_.Configure(req.job_id(), req.consistency(), workers, req.membership_epoch()));
  // Before the caller's clock is raised: the workers past the clock owe its re-sent push.
  if (adoption.clock >= 0) {
    absl::Status caught =
        gate_.BeginCatchUp(req.job_id(), adoption.clock, std::move(adoption.slots));
    // The job goes on rather than waiting for re-sends that cannot come; the rows are older.
    if (!caught.ok()) LOG(ERROR) << "job " << req.job_id() << ": no catch-up: " << caught;
  }
  if (!req.owned_slots().empty()) gate_.SetShardEpoch(req.job_id(), req.shard_epoch());
  if (req.caller_clock() >= 0) {
    PS_RETURN_IF_ERROR(gate_.RaiseClock(req.job_id(), req.caller_worker_id(), req.caller_clock()));
  }
  for (const auto& [worker, clock] : gate_.Clocks(req.job_id())) {
    (*resp->mutable_worker_clocks())[worker] = clock;
  }
  if (metrics_ != nullptr) {
    if (std::shared_ptr<ServerMetrics::Job> job = metrics_->AddJob(req.job_id())) {
      job->owned_slots->Set(store_->NumOwnedSlots(req.job_id()));
    }
  }
  return absl::OkStatus();
}

ParameterService::Adoption ParameterService::Adopted(const std::string& job_id, uint64_t epoch,
                                                     const std::vector<bool>& owned) const {
  Adoption adoption;
  if (epoch <= store_->ShardEpoch(job_id)) return adoption;
  const std::vector<bool> before = store_->OwnedSlots(job_id);
  int64_t newest = -1, oldest = -1;
  int taken = 0;
  std::vector<uint32_t> without_copy;  // new here and never backed up here
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    if (!owned[s] || before[s]) continue;
    const ReplicationBackup::SlotProgress progress = backup_.Progress(job_id, s);
    if (progress.seq == 0) {  // not backed up here: nothing to take over
      without_copy.push_back(s);
      continue;
    }
    if (adoption.slots.empty()) adoption.slots.assign(kNumSlots, false);
    adoption.slots[s] = true;
    ++taken;
    newest = std::max(newest, progress.clock);
    oldest = oldest < 0 ? progress.clock : std::min(oldest, progress.clock);
  }
  if (taken == 0) return adoption;
  if (!without_copy.empty()) {
    // A failover (copies were taken over) that also moved slots here whose copy never arrived
    // (a backup left out of forwarding): they start from their initial values unless a restore
    // loads them. Said loudly: the scheduler cannot see it.
    LOG(ERROR) << "job " << job_id << ": shard epoch " << epoch << ": " << without_copy.size()
               << " slots taken over have no copy here (first: slot " << without_copy.front()
               << "); unless a restore loads them their rows start from initial values";
  }
  if (newest != oldest) {
    // One primary forwards all its slots at each clock: copies of different clocks (a backup
    // left out) cannot be caught up as one. The job goes on; the older ones miss clocks.
    LOG(ERROR) << "job " << job_id << ": no catch-up: the " << taken
               << " slots taken over hold clocks " << oldest << " to " << newest;
    return Adoption();
  }
  adoption.clock = oldest + 1;
  LOG(INFO) << "job " << job_id << ": shard epoch " << epoch << ": took over " << taken
            << " slots backed up here (their clock " << oldest << "); the workers re-send clock "
            << adoption.clock << " for them";
  return adoption;
}

absl::Status ParameterService::SetReplicas(const v1::ConfigureJobRequest& req,
                                           std::optional<ReplicaRoles> replicas) {
  // A shard map without a replica map (one server left, or replicas turned off) ends both roles.
  if (!replicas.has_value()) {
    if (req.owned_slots().empty()) return absl::OkStatus();
    replicas.emplace();
    replicas->primaries.assign(kNumSlots, "");
    replicas->backups.assign(kNumSlots, "");
  }
  std::vector<bool> dropped;
  PS_RETURN_IF_ERROR(backup_.SetBackupSlots(req.job_id(), req.shard_epoch(),
                                            std::move(replicas->primaries), &dropped));
  PS_RETURN_IF_ERROR(forwarder_.SetTargets(req.job_id(), req.shard_epoch(), replicas->self,
                                           std::move(replicas->backups)));
  // Rows of slots no longer backed up here, and not owned here now, are dropped.
  const std::vector<bool> owned = store_->OwnedSlots(req.job_id());
  bool any = false;
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    dropped[s] = dropped[s] && !owned[s];
    any = any || dropped[s];
  }
  if (any) PS_RETURN_IF_ERROR(store_->LoadSlots(req.job_id(), dropped, {}));
  return absl::OkStatus();
}

grpc::Status ParameterService::ConfigureJob(grpc::ServerContext* ctx,
                                            const v1::ConfigureJobRequest* req,
                                            v1::ConfigureJobResponse* resp) {
  PS_AUTHORIZE_JOB(authorizer_.get(), ctx, req->job_id());
  if (req->has_replicas() && authorizer_ != nullptr && !authorizer_->JobScope(*ctx).empty()) {
    // The map says where this server sends the job's rows, with the cluster token: a node's.
    authorizer_->CountRefusal("replica_map");
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "a job's credential may not set a replica map");
  }
  const absl::Time start = absl::Now();
  return Finish(ServerMethod::kConfigureJob, start, *req, *resp, DoConfigureJob(*req, resp));
}

grpc::Status ParameterService::CreateTable(grpc::ServerContext* ctx,
                                           const v1::CreateTableRequest* req,
                                           v1::CreateTableResponse* resp) {
  PS_AUTHORIZE_JOB(authorizer_.get(), ctx, req->spec().job_id());
  if (grpc::Status s = grants_.CheckCreateTable(authorizer_.get(), *ctx, req->spec()); !s.ok()) {
    return s;
  }
  const absl::Time start = absl::Now();
  absl::Status created = forwarder_.HasTargets(req->spec().job_id())
                             ? CheckReplicable({req->spec()})
                             : absl::OkStatus();
  if (created.ok()) created = store_->CreateTable(req->spec());
  return Finish(ServerMethod::kCreateTable, start, *req, *resp, created);
}

grpc::Status ParameterService::DescribeTable(grpc::ServerContext* ctx,
                                             const v1::DescribeTableRequest* req,
                                             v1::DescribeTableResponse* resp) {
  PS_AUTHORIZE(authorizer_.get(), ctx, Access::kJob);
  const absl::Time start = absl::Now();
  auto r = store_->Describe(req->table_id());
  if (r.ok() && authorizer_ != nullptr) {
    // A job's credential sees its own tables only.
    if (grpc::Status s = authorizer_->CheckJob(*ctx, r->spec().job_id()); !s.ok()) return s;
  }
  if (r.ok()) *resp = std::move(*r);
  return Finish(ServerMethod::kDescribeTable, start, *req, *resp, r.status());
}

// One Pull, Push or PushPull call on gRPC's side: its reactor, its answer buffer and when it
// started, around the DataCall that serves it.
struct ParameterService::Call {
  Call(grpc::ServerUnaryReactor* reactor, grpc::ByteBuffer* answer, DataPlane* plane,
       ServerMethod method, const grpc::ByteBuffer& request, absl::Time deadline,
       std::string job_scope)
      : reactor(reactor),
        answer(answer),
        data(plane, method, request, answer, deadline, std::move(job_scope)) {}

  grpc::ServerUnaryReactor* const reactor;
  grpc::ByteBuffer* const answer;
  const absl::Time start = absl::Now();
  DataCall data;
};

grpc::ServerUnaryReactor* ParameterService::StartDataCall(ServerMethod method,
                                                          grpc::CallbackServerContext* ctx,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* answer) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::string job_scope;
  if (authorizer_ != nullptr) {
    if (grpc::Status denied = authorizer_->Check(*ctx, Access::kJob); !denied.ok()) {
      reactor->Finish(denied);
      return reactor;
    }
    job_scope = authorizer_->JobScope(*ctx);
  }
  auto call = std::make_unique<Call>(reactor, answer, &data_plane_, method, *request,
                                     PullDeadline(ctx), std::move(job_scope));
  // A push may complete a clock, and with replicas a completed clock is forwarded over the
  // network before it completes: never on gRPC's callback thread.
  const bool inline_ok = method == ServerMethod::kPull || !forwarder_.Active();
  if (!inline_ok || !Advance(call.get(), /*may_block=*/false)) {
    handoff_.Run([this, c = call.release()] { CHECK(Advance(c, /*may_block=*/true)); });
  } else {
    call.release();  // Advance finished and freed it
  }
  return reactor;
}

bool ParameterService::Advance(Call* call, bool may_block) {
  if (!call->data.Serve(may_block)) return false;
  FinishCall(call);
  return true;
}

void ParameterService::FinishCall(Call* call) {
  std::unique_ptr<Call> owned(call);
  const absl::Status& status = call->data.status();
  // The data path's one PERMISSION_DENIED is a job's credential on another job
  // (DataPlane::CheckCaller): counted as the other handlers count theirs.
  if (status.code() == absl::StatusCode::kPermissionDenied && authorizer_ != nullptr) {
    authorizer_->CountRefusal("other_job");
  }
  if (metrics_ != nullptr) {
    metrics_->RecordRequest(call->data.method(), status, call->data.request_bytes(),
                            status.ok() ? call->answer->Length() : 0, absl::Now() - call->start);
  }
  call->reactor->Finish(ToGrpcStatus(status));
}

grpc::Status ParameterService::Clock(grpc::ServerContext* ctx, const v1::ClockRequest* req,
                                     v1::ClockResponse* resp) {
  PS_AUTHORIZE_JOB(authorizer_.get(), ctx, req->job_id());
  const absl::Time start = absl::Now();
  const absl::Status valid = CheckJob(req->job_id());
  absl::StatusOr<int64_t> min_clock =
      valid.ok() ? gate_.AdvanceClock(req->job_id(), req->worker_id(), req->clock())
                 : absl::StatusOr<int64_t>(valid);
  if (min_clock.ok()) resp->set_min_clock(*min_clock);
  return Finish(ServerMethod::kClock, start, *req, *resp, min_clock.status());
}

absl::Status ParameterService::DoCheckpoint(const v1::CheckpointRequest& req,
                                            v1::CheckpointResponse* resp) {
  PS_RETURN_IF_ERROR(CheckJob(req.job_id()));
  PS_RETURN_IF_ERROR(gate_.ModeOf(req.job_id()).status());  // a configured job
  PS_ASSIGN_OR_RETURN(*resp, checkpointer_.Begin(req));
  return absl::OkStatus();
}

grpc::Status ParameterService::Checkpoint(grpc::ServerContext* ctx,
                                          const v1::CheckpointRequest* req,
                                          v1::CheckpointResponse* resp) {
  PS_AUTHORIZE_JOB(authorizer_.get(), ctx, req->job_id());
  if (grpc::Status s = grants_.CheckCheckpoint(authorizer_.get(), *ctx, *req); !s.ok()) return s;
  const absl::Time start = absl::Now();
  return Finish(ServerMethod::kCheckpoint, start, *req, *resp, DoCheckpoint(*req, resp));
}

grpc::Status ParameterService::AwaitCheckpoint(grpc::ServerContext* ctx,
                                               const v1::AwaitCheckpointRequest* req,
                                               v1::CheckpointResponse* resp) {
  PS_AUTHORIZE_JOB(authorizer_.get(), ctx, req->job_id());
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::CheckpointResponse> r =
      CheckJobId(req->job_id()).ok()
          ? checkpointer_.Await(req->job_id(), req->checkpoint_id(),
                                std::min(absl::FromChrono(ctx->deadline()), start + kMaxAwait))
          : absl::StatusOr<v1::CheckpointResponse>(CheckJobId(req->job_id()));
  if (r.ok()) {
    *resp = std::move(*r);
    if (resp->done()) {
      absl::MutexLock l(&secret_mu_);
      resp->set_receipt(CheckpointReceipt(node_secret_, req->job_id(), req->checkpoint_id(),
                                          resp->rows(), resp->bytes()));
    }
  }
  return Finish(ServerMethod::kAwaitCheckpoint, start, *req, *resp, r.status());
}

absl::Status ParameterService::DoRestore(const v1::RestoreRequest& req, absl::Time deadline,
                                         v1::RestoreResponse* resp) {
  PS_RETURN_IF_ERROR(CheckJob(req.job_id()));
  if (!req.order().source_job_id().empty()) {
    PS_RETURN_IF_ERROR(CheckName("restore order source_job_id", req.order().source_job_id(), 1));
  }
  PS_RETURN_IF_ERROR(CheckClientText("restore order reason", req.order().reason(), kMaxReportBytes,
                                     /*ascii_only=*/true));
  PS_ASSIGN_OR_RETURN(*resp, restorer_.Restore(req, deadline));
  return absl::OkStatus();
}

grpc::Status ParameterService::Restore(grpc::ServerContext* ctx, const v1::RestoreRequest* req,
                                       v1::RestoreResponse* resp) {
  PS_AUTHORIZE_JOB(authorizer_.get(), ctx, req->job_id());
  if (authorizer_ != nullptr) {
    // A job's program carries out its scheduler's orders only (never another job's rows).
    if (grpc::Status s = authorizer_->CheckRestoreOrder(*ctx, req->job_id(), req->order());
        !s.ok()) {
      return s;
    }
  }
  const absl::Time start = absl::Now();
  return Finish(ServerMethod::kRestore, start, *req, *resp,
                DoRestore(*req, absl::FromChrono(ctx->deadline()), resp));
}

absl::Status ParameterService::DoDropJob(const v1::DropJobRequest& req, v1::DropJobResponse* resp) {
  PS_RETURN_IF_ERROR(CheckJobId(req.job_id()));
  absl::MutexLock lifecycle(&lifecycle_mu_);
  // The store first: from here on the job's requests are refused and its tables hold no row.
  const TableStore::DroppedJob dropped = store_->DropJob(req.job_id());
  gate_.DropJob(req.job_id());     // waits for the job's pushes past their checks
  deduper_.DropJob(req.job_id());  // no push of the job can record a request id any more
  checkpointer_.ForgetJob(req.job_id());
  restorer_.ForgetJob(req.job_id());
  backup_.ForgetJob(req.job_id());
  forwarder_.ForgetJob(req.job_id());
  if (metrics_ != nullptr && dropped.first) {
    metrics_->DropJob(req.job_id(), dropped.tables, dropped.bytes);
  }
  resp->set_tables_dropped(dropped.tables);
  resp->set_bytes_freed(dropped.bytes);
  if (dropped.first) {
    LOG(INFO) << "job " << req.job_id() << " dropped: " << dropped.tables << " tables, "
              << dropped.bytes << " row bytes freed";
  }
  return absl::OkStatus();
}

grpc::Status ParameterService::DropJob(grpc::ServerContext* ctx, const v1::DropJobRequest* req,
                                       v1::DropJobResponse* resp) {
  PS_AUTHORIZE(authorizer_.get(), ctx, Access::kNode);
  const absl::Time start = absl::Now();
  return Finish(ServerMethod::kDropJob, start, *req, *resp, DoDropJob(*req, resp));
}

grpc::Status ParameterService::Replicate(grpc::ServerContext* ctx, const v1::ReplicateRequest* req,
                                         v1::ReplicateResponse* resp) {
  PS_AUTHORIZE(authorizer_.get(), ctx, Access::kNode);
  absl::Status s = CheckJob(req->job_id());
  if (s.ok()) {
    absl::StatusOr<v1::ReplicateResponse> applied = backup_.Apply(*req);
    s = applied.status();
    if (applied.ok()) *resp = std::move(*applied);
  }
  return ToGrpcStatus(s);
}

}  // namespace ps
