#include "client/job_admin.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/packed_bytes.h"
#include "common/shard_map.h"
#include "common/status_macros.h"

namespace ps {

void JobAdmin::FillReplicaMap(int server, v1::ReplicaMap* map) const {
  map->Clear();
  const ShardMap& shards = client_.shard_map();
  for (const std::string& address : shards.servers()) map->add_servers(address);
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    map->add_slot_owners(static_cast<uint32_t>(shards.OwnerOfSlot(s)));
  }
  for (uint32_t b : slot_backups_) map->add_slot_backups(b);
  map->set_server_index(static_cast<uint32_t>(server));
}

absl::Status JobAdmin::ConfigureJob(const v1::ConsistencySpec& consistency,
                                    const std::vector<uint32_t>& worker_ids,
                                    uint64_t membership_epoch, int64_t* worker_clock,
                                    int64_t caller_clock, bool even_out_clock) {
  if (worker_clock != nullptr) *worker_clock = -1;
  v1::ConfigureJobRequest req;
  req.set_job_id(client_.options().job_id);
  req.set_caller_worker_id(client_.options().worker_id);
  req.set_caller_clock(caller_clock);
  *req.mutable_consistency() = consistency;
  for (uint32_t w : worker_ids) req.add_worker_ids(w);
  req.set_membership_epoch(membership_epoch);
  req.set_shard_epoch(client_.shard_map().epoch());
  // This worker's clock as each server has it (-1: not in its set).
  std::vector<int64_t> clocks(client_.num_servers(), -1);
  auto configure_all = [&]() {
    return client_.ForEachServer(
        configure_timeout_, [&](int i, v1::ParameterServer::Stub* stub, grpc::ClientContext* ctx) {
          v1::ConfigureJobResponse resp;
          req.set_owned_slots(EncodeSlotBitmap(client_.shard_map().SlotsOf(i)));
          if (!slot_backups_.empty()) FillReplicaMap(i, req.mutable_replicas());
          grpc::Status s = stub->ConfigureJob(ctx, req, &resp);
          auto it = resp.worker_clocks().find(client_.options().worker_id);
          clocks[i] = s.ok() && it != resp.worker_clocks().end() ? it->second : -1;
          return s;
        });
  };
  PS_RETURN_IF_ERROR(configure_all());
  const int64_t highest = *std::max_element(clocks.begin(), clocks.end());
  const int64_t lowest = *std::min_element(clocks.begin(), clocks.end());
  if (even_out_clock && lowest >= 0 && lowest < highest && caller_clock < highest) {
    // The servers disagree: a worker joining a sync job starts at each server's applied clock,
    // and those differ when the worker it replaces died between its pushes to two servers. A
    // pull at the higher clock would wait forever on the servers that have the lower one, so
    // raise it there (the dead worker's share of that clock is then missing on those servers).
    req.set_caller_clock(highest);
    PS_RETURN_IF_ERROR(configure_all());
  }
  if (worker_clock != nullptr) *worker_clock = *std::max_element(clocks.begin(), clocks.end());
  return absl::OkStatus();
}

namespace {

// Runs rpc(i) for every server on its own thread; the first error (by server order), named.
template <typename Fn>
absl::Status OnEveryServerAtOnce(size_t n, const std::vector<std::string>& servers, Fn rpc) {
  std::vector<absl::Status> results(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] { results[i] = rpc(i); });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < n; ++i) {
    if (!results[i].ok()) {
      return WithPrefix(results[i], absl::StrCat("server ", servers[i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<v1::CheckpointResponse>> JobAdmin::SnapshotCheckpoint(
    uint64_t id, int64_t clock, const std::vector<std::string>& paths) {
  const size_t n = client_.num_servers();
  if (paths.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", id, " names ", paths.size(), " paths for ", n, " servers"));
  }
  std::vector<v1::CheckpointResponse> out(n);
  PS_RETURN_IF_ERROR(OnEveryServerAtOnce(n, client_.shard_map().servers(), [&](size_t i) {
    v1::CheckpointRequest req;
    req.set_job_id(client_.options().job_id);
    req.set_checkpoint_id(id);
    req.set_clock(clock);
    req.set_path(paths[i]);
    req.set_shard_epoch(client_.shard_map().epoch());
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + client_.options().rpc_timeout));
    return FromGrpcStatus(client_.admin_stub(i)->Checkpoint(&ctx, req, &out[i]));
  }));
  return out;
}

absl::StatusOr<std::vector<v1::CheckpointResponse>> JobAdmin::AwaitCheckpoint(
    uint64_t id, absl::Duration timeout) {
  const size_t n = client_.num_servers();
  std::vector<v1::CheckpointResponse> out(n);
  PS_RETURN_IF_ERROR(OnEveryServerAtOnce(n, client_.shard_map().servers(), [&](size_t i) {
    v1::AwaitCheckpointRequest req;
    req.set_job_id(client_.options().job_id);
    req.set_checkpoint_id(id);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    return FromGrpcStatus(client_.admin_stub(i)->AwaitCheckpoint(&ctx, req, &out[i]));
  }));
  return out;
}

absl::StatusOr<int64_t> JobAdmin::Restore(const v1::RestoreOrder& order, absl::Duration timeout) {
  const size_t n = client_.num_servers();
  std::vector<int64_t> clocks(client_.num_servers(), -1);
  PS_RETURN_IF_ERROR(OnEveryServerAtOnce(n, client_.shard_map().servers(), [&](size_t i) {
    v1::RestoreRequest req;
    req.set_job_id(client_.options().job_id);
    *req.mutable_order() = order;
    v1::RestoreResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    grpc::Status s = client_.admin_stub(i)->Restore(&ctx, req, &resp);
    auto it = resp.worker_clocks().find(client_.options().worker_id);
    if (s.ok() && it != resp.worker_clocks().end()) clocks[i] = it->second;
    return FromGrpcStatus(s);
  }));
  return *std::max_element(clocks.begin(), clocks.end());
}

}  // namespace ps
