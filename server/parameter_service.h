// The gRPC ParameterServer service: authorization, the data-plane calls' reactors and their
// hand-off to a thread that may block, and metrics, over DataPlane (Pull, Push, PushPull) and
// thin handlers over TableStore, ConsistencyGate, Checkpointer and Restorer (the control plane).
#ifndef PS_SERVER_PARAMETER_SERVICE_H_
#define PS_SERVER_PARAMETER_SERVICE_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "ps/v1/parameter_server.grpc.pb.h"
#include "server/checkpointer.h"
#include "server/consistency_gate.h"
#include "server/data_plane.h"
#include "server/internal/handoff_pool.h"
#include "server/job_grants.h"
#include "server/replication_backup.h"
#include "server/replication_forwarder.h"
#include "server/replication_map.h"
#include "server/request_deduper.h"
#include "server/restorer.h"
#include "server/server_metrics.h"
#include "server/table_store.h"

namespace ps {

// Thread-safe (gRPC calls handlers concurrently). Pulls may block on the consistency gate.
// DropJob frees a job's state; the job's requests are refused from then on, and those still
// running fail without touching anything (they hold what they use: tables, gate and metrics).
class ParameterService final : public v1::ParameterServer::Service {
 public:
  // `store` and `metrics` (may be null: no metrics) must outlive this. `max_pull_wait` bounds
  // how long a pull waits for slow workers.
  ParameterService(TableStore* store, absl::Duration max_pull_wait,
                   ServerMetrics* metrics = nullptr, CheckpointerOptions checkpoints = {});

  // The tokens calls must carry (null: none). Set before the service is registered.
  void set_authorizer(std::shared_ptr<const Authorizer> authorizer) {
    authorizer_ = std::move(authorizer);
  }

  // The secret the scheduler gave this server at registration (SchedulerLink): its receipts for
  // the checkpoint shards it wrote (CheckpointResponse.receipt) are keyed with it. Empty (the
  // default): no receipts. May be called at any time (a new registration brings a new secret).
  void SetNodeSecret(std::string secret) ABSL_LOCKS_EXCLUDED(secret_mu_) {
    absl::MutexLock l(&secret_mu_);
    node_secret_ = std::move(secret);
  }

  // Wakes pulls waiting on slow workers (UNAVAILABLE), stops checkpoint writes (the running one
  // between slots; queued ones are abandoned) and wakes AwaitCheckpoint calls, so that no
  // handler keeps the gRPC server's shutdown waiting. Call before it shuts down; idempotent.
  void Shutdown();

  grpc::Status ConfigureJob(grpc::ServerContext* ctx, const v1::ConfigureJobRequest* req,
                            v1::ConfigureJobResponse* resp) override;
  grpc::Status CreateTable(grpc::ServerContext* ctx, const v1::CreateTableRequest* req,
                           v1::CreateTableResponse* resp) override;
  grpc::Status DescribeTable(grpc::ServerContext* ctx, const v1::DescribeTableRequest* req,
                             v1::DescribeTableResponse* resp) override;
  grpc::Status Clock(grpc::ServerContext* ctx, const v1::ClockRequest* req,
                     v1::ClockResponse* resp) override;
  grpc::Status Checkpoint(grpc::ServerContext* ctx, const v1::CheckpointRequest* req,
                          v1::CheckpointResponse* resp) override;
  grpc::Status AwaitCheckpoint(grpc::ServerContext* ctx, const v1::AwaitCheckpointRequest* req,
                               v1::CheckpointResponse* resp) override;
  grpc::Status Restore(grpc::ServerContext* ctx, const v1::RestoreRequest* req,
                       v1::RestoreResponse* resp) override;
  grpc::Status DropJob(grpc::ServerContext* ctx, const v1::DropJobRequest* req,
                       v1::DropJobResponse* resp) override;
  // Servers only (the cluster token): a job's credential never writes rows this way.
  grpc::Status Replicate(grpc::ServerContext* ctx, const v1::ReplicateRequest* req,
                         v1::ReplicateResponse* resp) override;

  // The slots this server backs up (server/replication_backup.h), and where its own go.
  ReplicationBackup* replication_backup() { return &backup_; }
  ReplicationForwarder* replication_forwarder() { return &forwarder_; }

  // The data plane behind Pull, Push and PushPull: in-process callers (the fuzzer) serve those
  // calls through it as gRPC's handlers do, with a DataCall (server/data_call.h).
  DataPlane* data_plane() { return &data_plane_; }

 private:
  std::shared_ptr<const Authorizer> authorizer_;
  absl::Mutex secret_mu_;
  std::string node_secret_ ABSL_GUARDED_BY(secret_mu_);
  absl::Time PullDeadline(const grpc::ServerContextBase* ctx) const;
  // A well-formed job id of a job not dropped.
  absl::Status CheckJob(const std::string& job_id) const;
  absl::Status DoConfigureJob(const v1::ConfigureJobRequest& req, v1::ConfigureJobResponse* resp);
  // The job's replica roles from `req` (none: a shard map without a replica map ends them);
  // rows of slots no longer backed up here are dropped.
  absl::Status SetReplicas(const v1::ConfigureJobRequest& req,
                           std::optional<ReplicaRoles> replicas);
  // Failover: the slots a map of `epoch` gives this server that it did not own and holds a
  // backup copy of (ReplicationBackup), and the clock to catch up for them (the one after
  // their copies' clock; -1: none taken over).
  struct Adoption {
    int64_t clock = -1;
    std::vector<bool> slots;  // kNumSlots entries, or empty
  };
  Adoption Adopted(const std::string& job_id, uint64_t epoch, const std::vector<bool>& owned) const;
  // Pull, Push and PushPull are registered as raw callback methods (a client sees plain unary
  // calls and the same bytes). A call is served on the gRPC thread that read it, with no thread
  // hop, unless it would block there (DataCall::Serve): then it goes on from where it stands on
  // a thread of `handoff_`.
  struct Call;
  grpc::ServerUnaryReactor* StartDataCall(ServerMethod method, grpc::CallbackServerContext* ctx,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* answer);
  // Runs the call's next steps; false (the call kept) where it stopped because !may_block.
  bool Advance(Call* call, bool may_block);
  // Counts the call, sends its answer (or its error) and frees it.
  void FinishCall(Call* call);
  absl::Status DoCheckpoint(const v1::CheckpointRequest& req, v1::CheckpointResponse* resp);
  absl::Status DoRestore(const v1::RestoreRequest& req, absl::Time deadline,
                         v1::RestoreResponse* resp);
  absl::Status DoDropJob(const v1::DropJobRequest& req, v1::DropJobResponse* resp);
  // Counts the finished RPC (started at `start`) and converts its status.
  grpc::Status Finish(ServerMethod method, absl::Time start, const google::protobuf::Message& req,
                      const google::protobuf::Message& resp, const absl::Status& status) const;

  TableStore* const store_;
  ServerMetrics* const metrics_;
  const absl::Duration max_pull_wait_;
  // Held shared by ConfigureJob, exclusively by DropJob: a job's consistency state, shards and
  // metrics are not created again while (or after) it is dropped.
  absl::Mutex lifecycle_mu_;
  // Serializes ConfigureJob (rare): slots are taken over by the first call of a map.
  absl::Mutex configure_mu_;
  ConsistencyGate gate_;
  RequestDeduper deduper_;
  DataPlane data_plane_;            // uses store_, gate_, deduper_
  Restorer restorer_;               // uses gate_
  ReplicationBackup backup_;        // uses store_
  ReplicationForwarder forwarder_;  // uses store_; gate_ calls it after each sync clock
  const JobGrants grants_;          // what a job's credential may name: its table ids and folder
  Checkpointer checkpointer_;       // stops its writer thread when destroyed
  HandoffPool handoff_;             // destroyed first: waits for the calls it runs
};

}  // namespace ps

#endif  // PS_SERVER_PARAMETER_SERVICE_H_
