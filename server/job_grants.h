// What a job's credential may name on a server besides its job id: the table ids and the
// checkpoint folder the scheduler gives that job, never ids or folders of its own choosing. So a
// program of job A cannot squat the table id the scheduler will give a later job's table, nor the
// folder another job checkpoints into (either would make that job's own call fail).
//
// Both follow from the job id alone, as the scheduler makes them: a job's tables are numbered
// from FirstTableIdOf(job) (common/job_tables.h; at most kTableIdsPerJob of them), and its
// checkpoint shards are written to <checkpoint root>/<job>.<submit time ms>/ckpt-<id>/shard-<k>
// (scheduler_checkpoints.cc). Calls with the cluster token (the daemons', psctl's) are not
// checked here: their holder may name any id and any path under the checkpoint roots.
#ifndef PS_SERVER_JOB_GRANTS_H_
#define PS_SERVER_JOB_GRANTS_H_

#include <grpcpp/server_context.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/security.h"
#include "ps/v1/parameter_server.pb.h"

namespace ps {

// The ids of one job's tables: FirstTableIdOf(job) .. FirstTableIdOf(job) + this - 1.
inline constexpr uint32_t kTableIdsPerJob = 1000;

// OK if `table_id` is one of the ids the scheduler numbers `job_id`'s tables with, else
// PERMISSION_DENIED naming both and the job's range.
absl::Status CheckJobTableId(const std::string& job_id, uint32_t table_id);

// OK if `path` (made absolute, lexically normalized, the symlinks of its existing part resolved)
// lies under one of `roots` (normalized and resolved, as CheckpointRoots keeps them) and ends in
// <job_id>.<digits>/ckpt-<digits>/shard-<digits>, with no other "ckpt-N", "shard-N" or
// "X.<digits>" part below the root (so that no path of the job's creates anything in another
// job's folder). Else PERMISSION_DENIED naming the path and the shape it must have.
absl::Status CheckJobCheckpointPath(const std::string& job_id, const std::string& path,
                                    const std::vector<std::string>& roots);

// The two checks above for a server's CreateTable and Checkpoint handlers, on calls that carry a
// job's credential (Authorizer::JobScope); a refusal is counted in
// ps_auth_refused_total{reason="table_id"|"checkpoint_path"}. Immutable: thread-safe.
class JobGrants {
 public:
  explicit JobGrants(std::vector<std::string> checkpoint_roots)
      : roots_(std::move(checkpoint_roots)) {}

  // `authorizer` may be null (no tokens: every call passes).
  grpc::Status CheckCreateTable(const Authorizer* authorizer,
                                const grpc::ServerContextBase& context,
                                const v1::TableSpec& spec) const;
  grpc::Status CheckCheckpoint(const Authorizer* authorizer, const grpc::ServerContextBase& context,
                               const v1::CheckpointRequest& req) const;

 private:
  const std::vector<std::string> roots_;
};

}  // namespace ps

#endif  // PS_SERVER_JOB_GRANTS_H_
