#include "server/data_plane.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/node_identity.h"
#include "common/printable.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "common/value_codec.h"
#include "server/reject_reason.h"

namespace ps {
namespace {

// Most values the encoded blocks of one push request may decode to together (256 MiB of float32,
// the most a request may carry): a small topk or sign block may stand for many values, and a
// server decodes them in memory before it checks their keys.
constexpr size_t kMaxDecodedValues = size_t{64} << 20;

// INVALID_ARGUMENT where a block's codec is not its table's for that direction: a client that
// does not know the table's codec (a plain protobuf client sends and asks for float32) learns
// which one it is. A push block must also say the table's topk momentum correction
// (KeyBlock.momentum): a client that does not apply it learns so.
absl::Status CheckBlockCodec(const v1::TableSpec& spec, const v1::KeyBlock& block, bool push) {
  const v1::ValueCodec want = push ? spec.push_codec().codec() : spec.pull_codec().codec();
  const v1::ValueCodec sent = block.codec();
  if (sent == want) {
    const float momentum = spec.push_codec().momentum();
    if (!push || block.momentum() == momentum) return absl::OkStatus();
    return Rejected(
        RejectReason::kOther,
        absl::InvalidArgumentError(absl::StrCat(
            "table ", spec.table_id(), " ('", spec.name(), "') takes topk pushes with momentum ",
            "correction ", momentum, " (its push_codec.momentum, applied by the workers), but the ",
            "request's block says ", block.momentum(),
            block.momentum() == 0.0f
                ? ": this client does not say that it applies it (KeyBlock.momentum); use a "
                  "client that does (docs/data-plane.md)"
                : "",
            "; nothing was applied")));
  }
  return Rejected(
      RejectReason::kOther,
      absl::InvalidArgumentError(absl::StrCat(
          "table ", spec.table_id(), " ('", spec.name(), "') ",
          push ? "takes pushes encoded as " : "answers pulls encoded as ", CodecName(want),
          " (its ", push ? "push_codec" : "pull_codec", "), but the request's block is ",
          CodecName(sent), ": use a client that knows value codecs (docs/data-plane.md)",
          push ? "; nothing was applied" : "")));
}

absl::Status CheckLrScale(const v1::PushRequest& req, float* lr_scale) {
  *lr_scale = req.lr_scale() == 0.0f ? 1.0f : req.lr_scale();
  if (std::isfinite(*lr_scale) && *lr_scale >= 0.0f && *lr_scale <= 1000.0f) {
    return absl::OkStatus();
  }
  return Rejected(RejectReason::kBadLrScale,
                  absl::InvalidArgumentError(absl::StrCat(
                      "lr_scale ", req.lr_scale(), " is not in [0, 1000]; nothing was applied")));
}

// Decodes an encoded push block of `n` values (its codec checked) into `floats`.
absl::Status DecodeBlock(const v1::KeyBlock& block, const ScatteredValues& values, size_t n,
                         std::vector<float>* floats) {
  std::string bytes(values.bytes(), '\0');
  values.CopyTo(bytes.data());
  floats->resize(n);
  const absl::Status s = DecodeValueBlock(block.codec(), bytes, n, floats->data());
  if (s.ok()) return s;
  return Rejected(RejectReason::kBadSize,
                  absl::InvalidArgumentError(
                      absl::StrCat("table ", block.table_id(), ": bad ", CodecName(block.codec()),
                                   " block: ", s.message(), "; nothing was applied")));
}

}  // namespace

DataPlane::DataPlane(TableStore* store, ConsistencyGate* gate, RequestDeduper* deduper,
                     ServerMetrics* metrics)
    : store_(store), gate_(gate), deduper_(deduper), metrics_(metrics) {}

absl::Status DataPlane::CheckCaller(const std::string& job_scope, const std::string& job_id) const {
  if (!job_scope.empty() && job_scope != job_id) {
    return absl::PermissionDeniedError(absl::StrCat("the call carries job ", job_scope,
                                                    "'s credential; it cannot act on job '",
                                                    Printable(job_id, 64), "'"));
  }
  PS_RETURN_IF_ERROR(CheckJobId(job_id));
  PS_RETURN_IF_ERROR(store_->CheckNotDropped(job_id));
  return store_->CheckNotLost(job_id);
}

std::shared_ptr<ServerMetrics::Job> DataPlane::JobMetrics(const std::string& job_id) const {
  return metrics_ == nullptr ? nullptr : metrics_->FindJob(job_id);
}

absl::StatusOr<bool> DataPlane::Push(const std::string& job_scope, const v1::PushRequest& req,
                                     const std::deque<ScatteredValues>& values) {
  PS_RETURN_IF_ERROR(CheckCaller(job_scope, req.job_id()));
  const std::shared_ptr<ServerMetrics::Job> job = JobMetrics(req.job_id());
  // A retry of an applied push is acknowledged before the clock and shard checks: its worker may
  // have advanced since (a PushPull whose answer was lost), which would make it look late.
  if (Repeated(req, job.get())) return true;
  PS_RETURN_IF_ERROR(store_->CheckShardEpoch(req.job_id(), req.shard_epoch()));
  if (req.resend_parts() > 0) return Resend(req, values, job.get());
  return ResolveAndApply(req, values, job.get());
}

absl::StatusOr<bool> DataPlane::Resend(const v1::PushRequest& req,
                                       const std::deque<ScatteredValues>& values,
                                       ServerMetrics::Job* job) {
  PS_ASSIGN_OR_RETURN(
      const bool ran,
      gate_->ResendAndRun(req.job_id(), req.worker_id(), req.clock(), req.resend_parts(),
                          req.shard_epoch(), [&]() -> absl::StatusOr<bool> {
                            ResolvedPush push;
                            PS_RETURN_IF_ERROR(ResolvePush(req, values, &push));
                            // Only the slots taken over: the others have this clock already.
                            const std::vector<bool> slots = gate_->CatchUpSlots(req.job_id());
                            for (const TableStore::BlockView& view : push.views) {
                              for (uint64_t key : view.keys) {
                                const uint32_t slot = SlotOf(view.table->spec.table_id(), key);
                                if (slot < slots.size() && slots[slot]) continue;
                                return absl::InvalidArgumentError(absl::StrCat(
                                    "a re-sent push of clock ", req.clock(), " holds key ", key,
                                    " of table ", view.table->spec.table_id(), ", in slot ", slot,
                                    ", which this server did not take over; nothing was applied"));
                              }
                            }
                            bool duplicate = false;
                            PS_RETURN_IF_ERROR(Apply(push, job, &duplicate));
                            return !duplicate;
                          }));
  return !ran;  // nothing owed here: ignored, answered as a duplicate
}

absl::StatusOr<PendingPull> DataPlane::PushPull(const std::string& job_scope,
                                                const v1::PushPullRequest& req,
                                                const std::deque<ScatteredValues>& values,
                                                absl::Time deadline) {
  const v1::PushRequest& push = req.push();
  PS_RETURN_IF_ERROR(CheckCaller(job_scope, push.job_id()));
  // Before anything else: a retried (duplicate) push skips the clock checks, and the pull's
  // clock is push.clock + 1.
  PS_RETURN_IF_ERROR(ConsistencyGate::CheckClockRange("push clock", push.clock()));
  if (push.resend_parts() > 0) {
    return absl::InvalidArgumentError(
        "a re-sent push (resend_parts) is sent as a Push, not a PushPull; nothing was applied");
  }
  // Also for a retried (duplicate) push: the pull part must not be served from a stale map.
  PS_RETURN_IF_ERROR(store_->CheckShardEpoch(push.job_id(), push.shard_epoch()));
  PendingPull pull;
  pull.job = JobMetrics(push.job_id());
  bool duplicate = Repeated(push, pull.job.get());
  if (!duplicate) {
    PS_ASSIGN_OR_RETURN(duplicate, ResolveAndApply(push, values, pull.job.get()));
  }
  pull.job_id = &push.job_id();
  pull.clock = push.clock();
  pull.blocks = &req.pull_blocks();
  pull.deadline = deadline;
  if (!req.advance_clock()) return pull;
  pull.clock = push.clock() + 1;
  if (duplicate) return pull;  // its clock was counted when it was applied
  PS_ASSIGN_OR_RETURN(bool last, gate_->CountClockPart(push.job_id(), push.worker_id(),
                                                       push.clock(), req.clock_parts()));
  if (last) {
    PS_RETURN_IF_ERROR(
        gate_->AdvanceClock(push.job_id(), push.worker_id(), pull.clock, push.shard_epoch())
            .status());
  }
  return pull;
}

absl::StatusOr<PendingPull> DataPlane::StartPull(const std::string& job_scope,
                                                 const v1::PullRequest& req, absl::Time deadline) {
  PS_RETURN_IF_ERROR(CheckCaller(job_scope, req.job_id()));
  PS_RETURN_IF_ERROR(store_->CheckShardEpoch(req.job_id(), req.shard_epoch()));
  PendingPull pull;
  pull.job_id = &req.job_id();
  pull.clock = req.clock();
  pull.blocks = &req.blocks();
  pull.deadline = deadline;
  pull.job = JobMetrics(req.job_id());
  pull.prefetch = req.prefetch();
  if (pull.prefetch) {
    size_t keys = 0;
    for (const v1::KeyBlock& block : req.blocks()) keys += block.keys().size() / sizeof(uint64_t);
    if (keys > kMaxPrefetchKeys) {
      return Rejected(RejectReason::kBadSize,
                      absl::InvalidArgumentError(absl::StrCat(
                          "a prefetch of ", keys, " keys; at most ", kMaxPrefetchKeys,
                          " a request (prefetch fewer keys per request); nothing was read")));
    }
  }
  return pull;
}

bool DataPlane::Repeated(const v1::PushRequest& req, ServerMetrics::Job* job) {
  if (!deduper_->Seen(req.job_id(), req.worker_id(), req.request_id())) return false;
  if (job != nullptr) job->duplicate_pushes->Increment();
  return true;
}

absl::StatusOr<std::vector<size_t>> DataPlane::CountEncodedValues(
    const v1::PushRequest& req) const {
  std::vector<size_t> counts(req.blocks_size(), 0);
  size_t total = 0;
  for (int i = 0; i < req.blocks_size(); ++i) {
    const v1::KeyBlock& block = req.blocks(i);
    if (block.codec() == v1::CODEC_NONE) continue;
    v1::KeyBlock probe;  // no keys: finds the table (its dim) and checks its job
    probe.set_table_id(block.table_id());
    TableStore::BlockView table;
    PS_RETURN_IF_ERROR(store_->Resolve(req.job_id(), probe, /*with_values=*/false, &table));
    PS_RETURN_IF_ERROR(CheckBlockCodec(table.table->spec, block, /*push=*/true));
    const size_t n = block.keys().size() / sizeof(uint64_t) * table.table->dim;
    if (n > kMaxDecodedValues - total) {  // total <= the cap
      return Rejected(RejectReason::kBadSize,
                      absl::InvalidArgumentError(absl::StrCat(
                          "table ", block.table_id(), ": the request's encoded blocks stand for ",
                          total + n, " values or more; at most ", kMaxDecodedValues,
                          " a request (push fewer keys per request); nothing was applied")));
    }
    total += n;
    counts[i] = n;
  }
  return counts;
}

absl::Status DataPlane::ResolvePush(const v1::PushRequest& req,
                                    const std::deque<ScatteredValues>& values,
                                    ResolvedPush* out) const {
  out->req = &req;
  PS_RETURN_IF_ERROR(CheckLrScale(req, &out->lr_scale));
  const int n = req.blocks_size();
  if (values.size() != static_cast<size_t>(n)) {
    return absl::InternalError("a push read in place lost track of its blocks' values");
  }
  // The encoded blocks' tables and codecs first, and the values they stand for counted: nothing
  // is decoded where they are too many. Then block i's gradients: decoded, or where they arrived.
  PS_ASSIGN_OR_RETURN(const std::vector<size_t> counts, CountEncodedValues(req));
  std::vector<const ScatteredValues*> grads(n);
  for (int i = 0; i < n; ++i) {
    grads[i] = &values[i];
    if (req.blocks(i).codec() == v1::CODEC_NONE) continue;
    std::vector<float>& floats = out->floats.emplace_back();
    PS_RETURN_IF_ERROR(DecodeBlock(req.blocks(i), values[i], counts[i], &floats));
    ScatteredValues& decoded = out->decoded.emplace_back();
    if (!floats.empty()) {
      decoded.Add(reinterpret_cast<const char*>(floats.data()), floats.size() * sizeof(float));
    }
    grads[i] = &decoded;
    out->codec_bytes.push_back(
        {static_cast<size_t>(i), floats.size() * sizeof(float), values[i].bytes()});
  }
  out->views.resize(n);
  for (int i = 0; i < n; ++i) {
    const v1::KeyBlock& block = req.blocks(i);
    TableStore::BlockView& view = out->views[i];
    PS_RETURN_IF_ERROR(store_->Resolve(req.job_id(), block, /*with_values=*/true, &view, grads[i]));
    if (block.codec() == v1::CODEC_NONE) {  // an encoded block's codec was checked above
      PS_RETURN_IF_ERROR(CheckBlockCodec(view.table->spec, block, /*push=*/true));
    }
    out->keys += view.keys.size();
  }
  return store_->CheckNewRows(out->views);
}

absl::StatusOr<ResolvedPull> DataPlane::ResolvePull(
    const std::string& job_id,
    const google::protobuf::RepeatedPtrField<v1::KeyBlock>& blocks) const {
  ResolvedPull pull;
  pull.views.resize(blocks.size());
  for (int i = 0; i < blocks.size(); ++i) {
    TableStore::BlockView& view = pull.views[i];
    PS_RETURN_IF_ERROR(store_->Resolve(job_id, blocks[i], /*with_values=*/false, &view));
    PS_RETURN_IF_ERROR(CheckBlockCodec(view.table->spec, blocks[i], /*push=*/false));
    pull.keys += view.keys.size();
    pull.bytes += view.keys.size() * view.table->dim * sizeof(float);
  }
  PS_RETURN_IF_ERROR(store_->CheckPullSize(pull.views));
  PS_RETURN_IF_ERROR(store_->CheckNewRows(pull.views));
  return pull;
}

absl::StatusOr<ResolvedPull> DataPlane::ResolvePrefetch(
    const std::string& job_id,
    const google::protobuf::RepeatedPtrField<v1::KeyBlock>& blocks) const {
  ResolvedPull pull;
  pull.views.resize(blocks.size());
  for (int i = 0; i < blocks.size(); ++i) {
    PS_RETURN_IF_ERROR(store_->Resolve(job_id, blocks[i], /*with_values=*/false, &pull.views[i]));
    pull.keys += pull.views[i].keys.size();
  }
  // Rows read back from disk take RAM as a pull's new rows do: the same cap per job.
  PS_RETURN_IF_ERROR(store_->CheckNewRows(pull.views));
  return pull;
}

absl::StatusOr<std::optional<PullAnswer>> DataPlane::Prefetch(PendingPull* pull, bool may_block) {
  if (!pull->resolved.has_value()) {
    PS_ASSIGN_OR_RETURN(pull->resolved, ResolvePrefetch(*pull->job_id, *pull->blocks));
  }
  const std::vector<TableStore::BlockView>& views = pull->resolved->views;
  const bool reads_disk = std::any_of(views.begin(), views.end(), [](const auto& v) {
    return v.table->tier != nullptr && !v.keys.empty();
  });
  if (reads_disk && !may_block) return std::nullopt;
  for (const TableStore::BlockView& view : views) {
    PS_RETURN_IF_ERROR(store_->Prefetch(view, store_->prefetch_pin()));
  }
  // No blocks: the answer is a PullResponse with nothing but its (zero) clock fields.
  static const auto* const kNoBlocks = new google::protobuf::RepeatedPtrField<v1::KeyBlock>();
  return PullAnswer::Read(store_, *kNoBlocks, {}, /*min_clock=*/0, /*wait_micros=*/0);
}

absl::StatusOr<bool> DataPlane::ResolveAndApply(const v1::PushRequest& req,
                                                const std::deque<ScatteredValues>& values,
                                                ServerMetrics::Job* job) {
  bool duplicate = false;
  // The gate checks the worker and its clock first (a push of a job not configured, or from a
  // worker that is not live, is told so whatever its blocks hold), and holds the job's sync
  // applies off until the push's last row: a push that passed cannot land in a clock that
  // another request applied meanwhile.
  PS_RETURN_IF_ERROR(gate_->CheckPushAndRun(req.job_id(), req.worker_id(), req.clock(),
                                            req.shard_epoch(), [&]() -> absl::Status {
                                              ResolvedPush push;
                                              PS_RETURN_IF_ERROR(ResolvePush(req, values, &push));
                                              return Apply(push, job, &duplicate);
                                            }));
  return duplicate;
}

absl::Status DataPlane::Apply(const ResolvedPush& push, ServerMetrics::Job* job, bool* duplicate) {
  const v1::PushRequest& req = *push.req;
  if (!deduper_->FirstTime(req.job_id(), req.worker_id(), req.request_id())) {
    *duplicate = true;
    if (job != nullptr) job->duplicate_pushes->Increment();
    return absl::OkStatus();
  }
  for (const ResolvedPush::CodecBytes& b : push.codec_bytes) {
    push.views[b.block].table->CountCodecBytes(/*push=*/true, b.raw, b.wire);
  }
  PS_ASSIGN_OR_RETURN(auto mode, gate_->ModeOf(req.job_id()));
  for (const TableStore::BlockView& view : push.views) {
    // Fails only for a job dropped meanwhile, whose rows are gone anyway.
    PS_RETURN_IF_ERROR(mode == v1::ConsistencySpec::SYNC
                           ? store_->Accumulate(view, req.clock(), push.lr_scale)
                           : store_->Apply(view, push.lr_scale));
  }
  if (job != nullptr) job->pushed_keys->Increment(static_cast<double>(push.keys));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<PullAnswer>> DataPlane::Pull(PendingPull* pull, bool may_block) {
  if (pull->prefetch) return Prefetch(pull, may_block);
  // A pull that must wait is handed off before its blocks are resolved; there they are resolved
  // once, before the wait, so that a bad block is refused at once rather than after a wait that
  // holds a thread (and then reported as the gate's time-out instead of what was wrong with it).
  if (!pull->ticket.has_value()) {
    if (may_block) {
      if (!pull->resolved.has_value()) {
        PS_ASSIGN_OR_RETURN(pull->resolved, ResolvePull(*pull->job_id, *pull->blocks));
      }
      PS_ASSIGN_OR_RETURN(
          pull->ticket,
          gate_->WaitForPull(*pull->job_id, pull->clock, pull->deadline,
                             pull->job == nullptr ? nullptr : pull->job->waiting_pulls));
    } else {
      PS_ASSIGN_OR_RETURN(pull->ticket, gate_->TryPull(*pull->job_id, pull->clock));
      if (!pull->ticket.has_value()) return std::nullopt;
    }
  }
  if (!pull->resolved.has_value()) {
    PS_ASSIGN_OR_RETURN(pull->resolved, ResolvePull(*pull->job_id, *pull->blocks));
  }
  if (!may_block && pull->resolved->bytes > kServeHereBytes) return std::nullopt;
  const ConsistencyGate::PullTicket& ticket = *pull->ticket;
  PS_ASSIGN_OR_RETURN(PullAnswer answer,
                      PullAnswer::Read(store_, *pull->blocks, pull->resolved->views,
                                       ticket.min_clock, absl::ToInt64Microseconds(ticket.waited)));
  if (pull->job != nullptr) {
    pull->job->pull_wait->Observe(absl::ToDoubleSeconds(ticket.waited));
    pull->job->pulled_keys->Increment(static_cast<double>(pull->resolved->keys));
  }
  return answer;
}

}  // namespace ps
