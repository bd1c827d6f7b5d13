// The server's data plane, with no gRPC in it. A push or a pull is resolved once into one
// object (its tables found, codecs checked, values decoded, keys validated), after its caller's
// job is checked, a retried push acknowledged and the consistency gate has let it through; a
// resolved push is applied once (the request deduper) to the store, a resolved pull answered
// from it. Requests reach it read from gRPC's bytes by DataCall (server/data_call.h); pull
// answers are written by PullAnswer (server/pull_answer.h).
#ifndef PS_SERVER_DATA_PLANE_H_
#define PS_SERVER_DATA_PLANE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ps/v1/parameter_server.pb.h"
#include "server/consistency_gate.h"
#include "server/internal/scattered_values.h"
#include "server/pull_answer.h"
#include "server/request_deduper.h"
#include "server/server_metrics.h"
#include "server/table_store.h"

namespace ps {

// A push resolved (DataPlane::ResolvePush): each block's table found and its codec checked, its
// values decoded (a block encoded with its table's push_codec) or left where they arrived, its
// keys validated, and the rows it would create checked against the job's cap. Holds its tables;
// borrows the request and its values, which must outlive it. Not movable (the views point into
// `decoded`).
struct ResolvedPush {
  ResolvedPush() = default;
  ResolvedPush(const ResolvedPush&) = delete;
  ResolvedPush& operator=(const ResolvedPush&) = delete;

  const v1::PushRequest* req = nullptr;
  float lr_scale = 1.0f;                     // the request's, 0 read as 1
  std::vector<TableStore::BlockView> views;  // one per block, with its gradients
  size_t keys = 0;
  // The encoded blocks' values as float32, and as the views read them.
  std::deque<std::vector<float>> floats;
  std::deque<ScatteredValues> decoded;
  // What each decoded block's values took as float32 and on the wire: counted into its table's
  // stats once the push is applied, not for a refused or repeated one.
  struct CodecBytes {
    size_t block;
    uint64_t raw, wire;
  };
  std::vector<CodecBytes> codec_bytes;
};

// A pull's blocks resolved (tables found, codecs checked against the tables' pull_codec, keys
// validated, the answer's size and the rows it would create checked against their caps).
struct ResolvedPull {
  std::vector<TableStore::BlockView> views;
  size_t keys = 0;
  size_t bytes = 0;  // the values as float32
};

// A Pull, or a PushPull's pull, from its caller's checks to its answer, kept across a hand-off
// from a thread that must not block to one that may (DataPlane::Pull goes on where it stopped).
// Borrows the request's job id and blocks.
struct PendingPull {
  const std::string* job_id = nullptr;
  int64_t clock = 0;
  // PullRequest.prefetch: its rows read from the disk tier into RAM, no values answered
  // (DataPlane::Prefetch).
  bool prefetch = false;
  const google::protobuf::RepeatedPtrField<v1::KeyBlock>* blocks = nullptr;
  absl::Time deadline;                      // of the wait in the consistency gate
  std::shared_ptr<ServerMetrics::Job> job;  // its metrics (null: none)
  // Set as it goes: the gate let it through, then its blocks were resolved.
  std::optional<ConsistencyGate::PullTicket> ticket;
  std::optional<ResolvedPull> resolved;
};

// Thread-safe (as the parts it borrows are). Nothing here starts a thread; only Pull with
// may_block waits (in the consistency gate, until a pull's deadline).
class DataPlane {
 public:
  // A request or pull answer larger than this, or a pull that must wait in the consistency gate,
  // is not served on a thread that must not block (DataCall, ParameterService's reactors): our
  // clients' parts (2 MiB by default) stay below it. Handed off to another thread, a 2 MiB part
  // took longer in ps_bench runs (docs/benchmarks.md, "Fifth round").
  static constexpr size_t kServeHereBytes = size_t{4} << 20;
  // Most keys of one prefetch request (PullRequest.prefetch), all blocks together: 8 MiB of
  // keys. Our clients' parts hold fewer (a part is cut at max_part_bytes of pulled values).
  static constexpr size_t kMaxPrefetchKeys = size_t{1} << 20;

  // All must outlive this; `metrics` may be null (no metrics).
  DataPlane(TableStore* store, ConsistencyGate* gate, RequestDeduper* deduper,
            ServerMetrics* metrics);

  // A Push read in place (block i's values are values[i]; the blocks' own are empty). True where
  // it is a retry of an applied push (acknowledged, nothing applied again). `job_scope`
  // (non-empty): the job whose credential the call carries; a push for another job is
  // PERMISSION_DENIED.
  absl::StatusOr<bool> Push(const std::string& job_scope, const v1::PushRequest& req,
                            const std::deque<ScatteredValues>& values);
  // A PushPull read in place: its push, with its clock counted where it advances it; returns
  // its pull, for Pull to serve (it borrows `req`).
  absl::StatusOr<PendingPull> PushPull(const std::string& job_scope, const v1::PushPullRequest& req,
                                       const std::deque<ScatteredValues>& values,
                                       absl::Time deadline);
  // A Pull's caller checked (a prefetch's keys counted against kMaxPrefetchKeys too); returns
  // it for Pull to serve (it borrows `req`).
  absl::StatusOr<PendingPull> StartPull(const std::string& job_scope, const v1::PullRequest& req,
                                        absl::Time deadline);
  // Serves a pull up to its answer: lets the consistency gate pass it (waiting there only with
  // `may_block`), then resolves its blocks, once, and reads what the answer's size depends on.
  // Without `may_block`, returns nullopt where it would block (the gate would wait, or the
  // answer is over kServeHereBytes), having changed nothing but `pull`'s progress: call it again
  // with `may_block` to go on. The answer borrows `pull`, which must outlive it. A prefetch
  // (pull->prefetch) goes to Prefetch instead.
  absl::StatusOr<std::optional<PullAnswer>> Pull(PendingPull* pull, bool may_block);
  // Serves a prefetch: resolves its blocks once (ResolvePrefetch), then has the store read the
  // rows of tables with a disk tier back into RAM and pin them for the store's prefetch_pin
  // (TableStore::Prefetch), and answers an empty PullResponse. It never waits in the
  // consistency gate, but its disk reads block: without `may_block`, returns nullopt where a
  // block's table has a disk tier (call it again with `may_block`). Blocks of tables without
  // one are checked and otherwise ignored.
  absl::StatusOr<std::optional<PullAnswer>> Prefetch(PendingPull* pull, bool may_block);

  // The steps above, for tests of each. The caller: PERMISSION_DENIED unless `job_scope` is
  // empty (not a job's credential) or `job_id`; then a well-formed job id of a job not dropped.
  absl::Status CheckCaller(const std::string& job_scope, const std::string& job_id) const;
  // Resolves a push (see ResolvedPush); INVALID_ARGUMENT (or RESOURCE_EXHAUSTED for rows past
  // the job's cap) for a bad one, with nothing applied.
  absl::Status ResolvePush(const v1::PushRequest& req, const std::deque<ScatteredValues>& values,
                           ResolvedPush* out) const;
  absl::StatusOr<ResolvedPull> ResolvePull(
      const std::string& job_id,
      const google::protobuf::RepeatedPtrField<v1::KeyBlock>& blocks) const;
  // A prefetch's blocks resolved: tables found (the job's own), keys validated (this server's
  // slots, in range), as a pull's, and the job's row cap (--max_job_bytes) checked for its keys
  // not in RAM (rows it would read back take RAM as a pull's new rows do: RESOURCE_EXHAUSTED);
  // codecs and the answer's size are not (a prefetch answers no value). `bytes` stays 0.
  absl::StatusOr<ResolvedPull> ResolvePrefetch(
      const std::string& job_id,
      const google::protobuf::RepeatedPtrField<v1::KeyBlock>& blocks) const;

 private:
  // The values each encoded block of `req` stands for (0 for a plain block), its table's codec
  // checked; INVALID_ARGUMENT where they are more than a request may decode to.
  absl::StatusOr<std::vector<size_t>> CountEncodedValues(const v1::PushRequest& req) const;
  // True (counted) where the request id of `req`'s worker was applied before.
  bool Repeated(const v1::PushRequest& req, ServerMetrics::Job* job);
  // A push not seen before: checked by the consistency gate, resolved, and applied once (true:
  // a repeat after all, found once it was resolved).
  absl::StatusOr<bool> ResolveAndApply(const v1::PushRequest& req,
                                       const std::deque<ScatteredValues>& values,
                                       ServerMetrics::Job* job);
  // A re-sent push after a failover (PushRequest.resend_parts): accumulated into its clock's sums
  // for the slots this server took over, if its worker owes it (ConsistencyGate::ResendAndRun);
  // true (a duplicate) where it is ignored. INVALID_ARGUMENT for a key of another slot.
  absl::StatusOr<bool> Resend(const v1::PushRequest& req, const std::deque<ScatteredValues>& values,
                              ServerMetrics::Job* job);
  // Applies a resolved push that passed the gate, unless its request id was applied meanwhile.
  absl::Status Apply(const ResolvedPush& push, ServerMetrics::Job* job, bool* duplicate);
  std::shared_ptr<ServerMetrics::Job> JobMetrics(const std::string& job_id) const;

  TableStore* const store_;
  ConsistencyGate* const gate_;
  RequestDeduper* const deduper_;
  ServerMetrics* const metrics_;
};

}  // namespace ps

#endif  // PS_SERVER_DATA_PLANE_H_
