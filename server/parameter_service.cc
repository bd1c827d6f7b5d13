#include "server/parameter_service.h"

#include <glog/logging.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/method_handler.h>
#include <grpcpp/support/server_callback.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/node_identity.h"
#include "common/printable.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "common/value_codec.h"
#include "common/wire.h"
#include "server/internal/push_request.h"
#include "server/reject_reason.h"

namespace ps {
namespace {

// Longest an AwaitCheckpoint call waits (for callers that set no deadline).
constexpr absl::Duration kMaxAwait = absl::Minutes(30);

// Method indexes in the generated service (the order of ps.v1.ParameterServer's rpcs).
constexpr int kPullMethod = 3, kPushMethod = 4, kPushPullMethod = 5;

// Bytes of a pull block's values in the answer: float32, or as the table's pull_codec says.
size_t AnswerValueBytes(const TableStore::BlockView& view) {
  return EncodedBytes(view.table->spec.pull_codec(), view.keys.size() * view.table->dim);
}

// Writes a pull block's values at `p` (AnswerValueBytes of room): the rows copied from the store
// straight there, or, for a table with a pull_codec, encoded from a float32 copy.
absl::Status WriteAnswerValues(TableStore* store, const TableStore::BlockView& view, char* p) {
  const v1::CodecSpec& codec = view.table->spec.pull_codec();
  if (codec.codec() == v1::CODEC_NONE) return store->Pull(view, p);
  const size_t n = view.keys.size() * view.table->dim;
  std::unique_ptr<float[]> floats(new float[n]);  // not zeroed: Pull writes every value
  PS_RETURN_IF_ERROR(store->Pull(view, reinterpret_cast<char*>(floats.get())));
  EncodeValueBlock(codec, absl::MakeConstSpan(floats.get(), n), p);
  view.table->CountCodecBytes(/*push=*/false, n * sizeof(float), AnswerValueBytes(view));
  return absl::OkStatus();
}

// A pull block of a table with delta pulls, read before the answer is sized (its size depends on
// what changed): answered with every value in the pull codec, or, where the block's token
// (KeyBlock.since) allows and it is smaller, only those changed since (a delta block).
struct DeltaAnswer {
  std::unique_ptr<float[]> floats;  // the block's values, as float32
  std::vector<uint32_t> changed;    // a delta block: the indices of the values it sends
  bool delta = false;
  uint64_t token = 0;
  size_t bytes = 0;  // of the answer's values field
};
absl::StatusOr<DeltaAnswer> ReadDelta(TableStore* store, const TableStore::BlockView& view,
                                      uint64_t since) {
  const v1::CodecSpec& codec = view.table->spec.pull_codec();
  const size_t n = view.keys.size() * view.table->dim;
  const size_t whole = EncodedBytes(codec, n);
  // The most changed values for which a delta block is smaller than the whole one.
  size_t lo = 0, hi = n;
  while (lo < hi) {
    const size_t mid = hi - (hi - lo) / 2;
    if (DeltaBlockBytes(codec, mid) < whole) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  DeltaAnswer answer;
  answer.floats.reset(new float[n]);  // not zeroed: PullDelta writes every value
  bool full = true;
  PS_RETURN_IF_ERROR(store->PullDelta(view, since, /*max_changed=*/lo, answer.floats.get(),
                                      &answer.changed, &full, &answer.token));
  answer.delta = !full && DeltaBlockBytes(codec, answer.changed.size()) < whole;
  answer.bytes = answer.delta ? DeltaBlockBytes(codec, answer.changed.size()) : whole;
  view.table->CountCodecBytes(/*push=*/false, n * sizeof(float), answer.bytes);
  return answer;
}

// Writes a delta table's answer values at `p` (answer.bytes of room).
void WriteDelta(const TableStore::BlockView& view, const DeltaAnswer& answer, char* p) {
  const v1::CodecSpec& codec = view.table->spec.pull_codec();
  const size_t n = view.keys.size() * view.table->dim;
  if (!answer.delta) return EncodeValueBlock(codec, absl::MakeConstSpan(answer.floats.get(), n), p);
  std::vector<float> values(answer.changed.size());
  for (size_t j = 0; j < values.size(); ++j) values[j] = answer.floats[answer.changed[j]];
  EncodeDeltaBlock(codec, n, answer.changed, values, p);
}

// A PullResponse whose rows are copied from the store straight into one outgoing slice: blocks
// (table_id, values, codec, and for delta pulls since and delta), then min_clock and
// wait_micros, as protobuf writes them.
absl::StatusOr<grpc::ByteBuffer> WritePullAnswer(
    TableStore* store, const google::protobuf::RepeatedPtrField<v1::KeyBlock>& blocks,
    absl::Span<const TableStore::BlockView> views, int64_t min_clock, int64_t wait_micros) {
  std::vector<size_t> block_sizes(views.size());
  std::vector<std::optional<DeltaAnswer>> deltas(views.size());
  size_t total = wire::VarintFieldSize(2, static_cast<uint64_t>(min_clock)) +
                 wire::VarintFieldSize(3, static_cast<uint64_t>(wait_micros));
  for (size_t i = 0; i < views.size(); ++i) {
    size_t extra = 0;
    if (views[i].table->delta) {
      PS_ASSIGN_OR_RETURN(deltas[i], ReadDelta(store, views[i], blocks[i].since()));
      if (deltas[i]->token != 0) extra += 1 + sizeof(uint64_t);  // since: fixed64
      if (deltas[i]->delta) extra += 2;                          // delta: true
    }
    const size_t values = deltas[i].has_value() ? deltas[i]->bytes : AnswerValueBytes(views[i]);
    block_sizes[i] = wire::VarintFieldSize(1, blocks[i].table_id()) +
                     (values == 0 ? 0 : wire::LengthFieldSize(3, values)) +
                     wire::VarintFieldSize(4, blocks[i].codec()) + extra;
    total += wire::LengthFieldSize(1, block_sizes[i]);
  }
  grpc::Slice slice(total);  // uninitialized
  char* const begin = reinterpret_cast<char*>(const_cast<uint8_t*>(slice.begin()));
  char* p = begin;
  for (size_t i = 0; i < views.size(); ++i) {
    const size_t values = deltas[i].has_value() ? deltas[i]->bytes : AnswerValueBytes(views[i]);
    p = wire::EncodeVarint((1 << 3) | wire::kLengthDelimited, p);
    p = wire::EncodeVarint(block_sizes[i], p);
    if (blocks[i].table_id() != 0) {
      p = wire::EncodeVarint((1 << 3) | wire::kVarint, p);
      p = wire::EncodeVarint(blocks[i].table_id(), p);
    }
    if (values != 0) {
      p = wire::EncodeVarint((3 << 3) | wire::kLengthDelimited, p);
      p = wire::EncodeVarint(values, p);
      if (deltas[i].has_value()) {
        WriteDelta(views[i], *deltas[i], p);
      } else {
        PS_RETURN_IF_ERROR(WriteAnswerValues(store, views[i], p));
      }
      p += values;
    }
    if (blocks[i].codec() != v1::CODEC_NONE) {  // checked: the table's pull_codec
      p = wire::EncodeVarint((4 << 3) | wire::kVarint, p);
      p = wire::EncodeVarint(blocks[i].codec(), p);
    }
    if (deltas[i].has_value() && deltas[i]->token != 0) {
      p = wire::EncodeVarint((6 << 3) | wire::kFixed64, p);
      std::memcpy(p, &deltas[i]->token, sizeof(uint64_t));
      p += sizeof(uint64_t);
    }
    if (deltas[i].has_value() && deltas[i]->delta) {
      p = wire::EncodeVarint((7 << 3) | wire::kVarint, p);
      p = wire::EncodeVarint(1, p);
    }
  }
  if (min_clock != 0) {
    p = wire::EncodeVarint((2 << 3) | wire::kVarint, p);
    p = wire::EncodeVarint(static_cast<uint64_t>(min_clock), p);
  }
  if (wait_micros != 0) {
    p = wire::EncodeVarint((3 << 3) | wire::kVarint, p);
    p = wire::EncodeVarint(static_cast<uint64_t>(wait_micros), p);
  }
  CHECK_EQ(static_cast<size_t>(p - begin), total);  // a sizing bug of ours, not input
  return grpc::ByteBuffer(&slice, 1);
}

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

// Most values the encoded blocks of one push request may decode to together (256 MiB of float32,
// the most a request may carry): a small topk or sign block may stand for many values, and a
// server decodes them in memory before it checks their keys.
constexpr size_t kMaxDecodedValues = size_t{64} << 20;

// A push's blocks with their values as float32: those that arrived encoded (KeyBlock.codec set)
// decoded, the others where they arrived.
struct DecodedPush {
  bool used = false;                      // a block was decoded: read `values`
  std::deque<ScatteredValues> values;     // every block's values
  std::deque<std::vector<float>> floats;  // the decoded blocks' values
  size_t decoded_values = 0;              // the values the encoded blocks stand for, summed
  // What each decoded block's values took as float32 and on the wire, counted into its table's
  // stats once the push is applied (CountPushCodecBytes), not for a refused or repeated one.
  struct Bytes {
    int block;
    uint64_t raw, wire;
  };
  std::vector<Bytes> bytes;
};

void CountPushCodecBytes(const DecodedPush& decoded,
                         const std::vector<TableStore::BlockView>& views) {
  for (const DecodedPush::Bytes& b : decoded.bytes) {
    views[b.block].table->CountCodecBytes(/*push=*/true, b.raw, b.wire);
  }
}

// Decodes the encoded blocks of a push read in place, each checked against its table's
// push_codec. INVALID_ARGUMENT for a bad block (nothing is applied then: the caller stops). The
// values they stand for are counted first, and nothing is decoded where they are too many.
absl::Status DecodePushBlocks(const TableStore& store, const v1::PushRequest& req,
                              const std::deque<ScatteredValues>* in_place, DecodedPush* out) {
  std::vector<std::shared_ptr<const TableStore::Table>> tables(req.blocks_size());
  for (int i = 0; i < req.blocks_size(); ++i) {
    const v1::KeyBlock& block = req.blocks(i);
    if (block.codec() == v1::CODEC_NONE) continue;
    if (in_place == nullptr) {
      return absl::InternalError("an encoded push block was not read in place");
    }
    v1::KeyBlock probe;  // no keys: finds the table and checks its job
    probe.set_table_id(block.table_id());
    TableStore::BlockView table;
    PS_RETURN_IF_ERROR(store.Resolve(req.job_id(), probe, /*with_values=*/false, &table));
    PS_RETURN_IF_ERROR(CheckBlockCodec(table.table->spec, block, /*push=*/true));
    const size_t n = block.keys().size() / sizeof(uint64_t) * table.table->dim;
    if (n > kMaxDecodedValues - out->decoded_values) {  // decoded_values <= the cap
      return Rejected(RejectReason::kBadSize,
                      absl::InvalidArgumentError(absl::StrCat(
                          "table ", block.table_id(), ": the request's encoded blocks stand for ",
                          out->decoded_values + n, " values or more; at most ", kMaxDecodedValues,
                          " a request (push fewer keys per request); nothing was applied")));
    }
    out->decoded_values += n;
    tables[i] = std::move(table.table);
  }
  for (int i = 0; i < req.blocks_size(); ++i) {
    if (tables[i] == nullptr) continue;
    const v1::KeyBlock& block = req.blocks(i);
    const std::deque<ScatteredValues>& values = *in_place;
    if (!out->used) out->values = values;
    out->used = true;
    const size_t n = block.keys().size() / sizeof(uint64_t) * tables[i]->dim;
    std::string bytes(values[i].bytes(), '\0');
    values[i].CopyTo(bytes.data());
    std::vector<float>& floats = out->floats.emplace_back(n);
    absl::Status s = DecodeValueBlock(block.codec(), bytes, n, floats.data());
    if (!s.ok()) {
      return Rejected(RejectReason::kBadSize,
                      absl::InvalidArgumentError(absl::StrCat(
                          "table ", block.table_id(), ": bad ", CodecName(block.codec()),
                          " block: ", s.message(), "; nothing was applied")));
    }
    out->values[i] = ScatteredValues();
    if (n > 0) out->values[i].Add(reinterpret_cast<const char*>(floats.data()), n * sizeof(float));
    out->bytes.push_back({i, n * sizeof(float), bytes.size()});
  }
  return absl::OkStatus();
}

// A Push or PushPull request read in place (internal/push_request.h) from a received buffer,
// which must outlive this: the gradients are applied from its slices.
template <typename Request>
struct InPlaceRequest {
  using Parser = absl::Status (*)(wire::SliceReader*, Request*, std::deque<ScatteredValues>*);

  absl::Status Parse(grpc::ByteBuffer* in, Parser parse) {
    if (!CoalesceIfFragmented(in) || !reader.Reset(in)) {
      return absl::InvalidArgumentError("unreadable request");
    }
    return parse(&reader, &req, &values);
  }

  wire::SliceReader reader;
  Request req;
  std::deque<ScatteredValues> values;  // block i's gradients
};

// Parses a request buffer with protobuf.
template <typename Request>
absl::Status ParseRequest(grpc::ByteBuffer* in, Request* req) {
  const size_t bytes = in->Length();
  grpc::Status s = grpc::SerializationTraits<Request>::Deserialize(in, req);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed ", req->GetTypeName(), " (", bytes,
                     " bytes): not the protobuf encoding of that message"));
  }
  return absl::OkStatus();
}

}  // namespace

ParameterService::ParameterService(TableStore* store, absl::Duration max_pull_wait,
                                   ServerMetrics* metrics, CheckpointerOptions checkpoints)
    : store_(store),
      metrics_(metrics),
      max_pull_wait_(max_pull_wait),
      gate_([store](const std::string& job_id, int64_t from, int64_t to) {
        store->ApplyAccumulated(job_id, from, to);
      }),
      restorer_(store, &gate_, metrics, checkpoints.roots),
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
  if (!req.owned_slots().empty()) {
    PS_ASSIGN_OR_RETURN(auto owned, DecodeSlotBitmap(req.owned_slots()));
    PS_RETURN_IF_ERROR(store_->SetJobShards(req.job_id(), std::move(owned), req.shard_epoch()));
  }
  std::vector<uint32_t> workers(req.worker_ids().begin(), req.worker_ids().end());
  PS_RETURN_IF_ERROR(
      gate_.Configure(req.job_id(), req.consistency(), workers, req.membership_epoch()));
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

grpc::Status ParameterService::ConfigureJob(grpc::ServerContext* ctx,
                                            const v1::ConfigureJobRequest* req,
                                            v1::ConfigureJobResponse* resp) {
  PS_AUTHORIZE_JOB(authorizer_.get(), ctx, req->job_id());
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
  return Finish(ServerMethod::kCreateTable, start, *req, *resp, store_->CreateTable(req->spec()));
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

absl::Status ParameterService::DoPush(const v1::PushRequest& req, bool* duplicate,
                                      const std::deque<ScatteredValues>* values) {
  *duplicate = false;
  PS_RETURN_IF_ERROR(CheckJob(req.job_id()));
  const std::shared_ptr<ServerMetrics::Job> job =
      metrics_ == nullptr ? nullptr : metrics_->FindJob(req.job_id());
  // A retry of an applied push is acknowledged before the clock checks: its worker may have
  // advanced since (a PushPull whose answer was lost), which would make it look late.
  if (deduper_.Seen(req.job_id(), req.worker_id(), req.request_id())) {
    *duplicate = true;
    if (job != nullptr) job->duplicate_pushes->Increment();
    return absl::OkStatus();
  }
  PS_RETURN_IF_ERROR(store_->CheckShardEpoch(req.job_id(), req.shard_epoch()));
  return gate_.CheckPushAndRun(req.job_id(), req.worker_id(), req.clock(), req.shard_epoch(),
                               [&] { return ApplyPush(req, values, job.get(), duplicate); });
}

absl::Status ParameterService::ApplyPush(const v1::PushRequest& req,
                                         const std::deque<ScatteredValues>* values,
                                         ServerMetrics::Job* job, bool* duplicate) {
  const float lr_scale = req.lr_scale() == 0.0f ? 1.0f : req.lr_scale();
  if (!std::isfinite(lr_scale) || lr_scale < 0.0f || lr_scale > 1000.0f) {
    return Rejected(RejectReason::kBadLrScale,
                    absl::InvalidArgumentError(absl::StrCat(
                        "lr_scale ", req.lr_scale(), " is not in [0, 1000]; nothing was applied")));
  }
  if (values != nullptr && values->size() != static_cast<size_t>(req.blocks_size())) {
    return absl::InternalError("a push read in place lost track of its blocks' values");
  }
  DecodedPush decoded;
  PS_RETURN_IF_ERROR(DecodePushBlocks(*store_, req, values, &decoded));
  if (decoded.used) values = &decoded.values;
  std::vector<TableStore::BlockView> views(req.blocks_size());
  for (int i = 0; i < req.blocks_size(); ++i) {
    PS_RETURN_IF_ERROR(store_->Resolve(req.job_id(), req.blocks(i), /*with_values=*/true, &views[i],
                                       values == nullptr ? nullptr : &(*values)[i]));
    PS_RETURN_IF_ERROR(CheckBlockCodec(views[i].table->spec, req.blocks(i), true));
  }
  PS_RETURN_IF_ERROR(store_->CheckNewRows(views));
  if (!deduper_.FirstTime(req.job_id(), req.worker_id(), req.request_id())) {
    *duplicate = true;
    if (job != nullptr) job->duplicate_pushes->Increment();
    return absl::OkStatus();
  }
  CountPushCodecBytes(decoded, views);
  PS_ASSIGN_OR_RETURN(auto mode, gate_.ModeOf(req.job_id()));
  size_t keys = 0;
  for (const auto& view : views) {
    // Fails only for a job dropped meanwhile, whose rows are gone anyway.
    PS_RETURN_IF_ERROR(mode == v1::ConsistencySpec::SYNC
                           ? store_->Accumulate(view, req.clock(), lr_scale)
                           : store_->Apply(view, lr_scale));
    keys += view.keys.size();
  }
  if (job != nullptr) job->pushed_keys->Increment(static_cast<double>(keys));
  return absl::OkStatus();
}

absl::Status ParameterService::DoPull(
    const std::string& job_id, int64_t clock,
    const google::protobuf::RepeatedPtrField<v1::KeyBlock>& blocks, absl::Time deadline,
    grpc::ByteBuffer* answer, bool* deferred) {
  // With `deferred`, nothing may change before the pull is handed off: the caller runs it again
  // where it may block. A pull that must wait is handed off before its keys are checked, so a
  // waiting pull (most pulls of a sync job) checks them once, there.
  ConsistencyGate::PullTicket ticket;
  if (deferred != nullptr) {
    PS_ASSIGN_OR_RETURN(std::optional<ConsistencyGate::PullTicket> now,
                        gate_.TryPull(job_id, clock));
    if (!now.has_value()) {
      *deferred = true;
      return absl::OkStatus();
    }
    ticket = *now;
  }
  const std::shared_ptr<ServerMetrics::Job> job =
      metrics_ == nullptr ? nullptr : metrics_->FindJob(job_id);
  std::vector<TableStore::BlockView> views(blocks.size());
  for (int i = 0; i < blocks.size(); ++i) {
    PS_RETURN_IF_ERROR(store_->Resolve(job_id, blocks[i], /*with_values=*/false, &views[i]));
    PS_RETURN_IF_ERROR(CheckBlockCodec(views[i].table->spec, blocks[i], false));
  }
  PS_RETURN_IF_ERROR(store_->CheckPullSize(views));
  PS_RETURN_IF_ERROR(store_->CheckNewRows(views));
  size_t keys = 0;
  size_t bytes = 0;
  for (const auto& view : views) {
    keys += view.keys.size();
    bytes += view.keys.size() * view.table->dim * sizeof(float);
  }
  if (deferred != nullptr && bytes > kServeHereBytes) {
    *deferred = true;
    return absl::OkStatus();
  }
  if (deferred == nullptr) {
    PS_ASSIGN_OR_RETURN(ticket, gate_.WaitForPull(job_id, clock, deadline,
                                                  job == nullptr ? nullptr : job->waiting_pulls));
  }
  const int64_t wait_micros = absl::ToInt64Microseconds(ticket.waited);
  PS_ASSIGN_OR_RETURN(*answer,
                      WritePullAnswer(store_, blocks, views, ticket.min_clock, wait_micros));
  if (job != nullptr) {
    job->pull_wait->Observe(absl::ToDoubleSeconds(ticket.waited));
    job->pulled_keys->Increment(static_cast<double>(keys));
  }
  return absl::OkStatus();
}

absl::Status ParameterService::PushPart(const v1::PushPullRequest& req,
                                        const std::deque<ScatteredValues>* values,
                                        int64_t* pull_clock) {
  const v1::PushRequest& push = req.push();
  PS_RETURN_IF_ERROR(CheckJob(push.job_id()));
  // Before anything else: a retried (duplicate) push skips the clock checks, and the pull's
  // clock is push.clock + 1.
  PS_RETURN_IF_ERROR(ConsistencyGate::CheckClockRange("push clock", push.clock()));
  // Also for a retried (duplicate) push: the pull part must not be served from a stale map.
  PS_RETURN_IF_ERROR(store_->CheckShardEpoch(push.job_id(), push.shard_epoch()));
  bool duplicate = false;
  PS_RETURN_IF_ERROR(DoPush(push, &duplicate, values));
  *pull_clock = push.clock();
  if (req.advance_clock()) {
    *pull_clock = push.clock() + 1;
    if (!duplicate) {
      PS_ASSIGN_OR_RETURN(bool last, gate_.CountClockPart(push.job_id(), push.worker_id(),
                                                          push.clock(), req.clock_parts()));
      if (last) {
        PS_RETURN_IF_ERROR(
            gate_.AdvanceClock(push.job_id(), push.worker_id(), *pull_clock, push.shard_epoch())
                .status());
      }
    }
  }
  return absl::OkStatus();
}

// One Pull, Push or PushPull call, from its callback handler to its answer. The steps run on the
// gRPC thread that read the request where they can (Advance with may_block false), else on a
// thread of `handoff_`.
struct ParameterService::DataCall {
  ServerMethod method;
  grpc::ServerUnaryReactor* reactor = nullptr;
  grpc::ByteBuffer request;  // the received bytes (pushes are applied from its slices)
  grpc::ByteBuffer* answer;  // gRPC's response buffer
  absl::Time start;
  absl::Time deadline;  // of a pull's wait
  size_t request_bytes = 0;
  bool read = false;  // the request read, and its push (if any) applied
  // The pull to serve once read.
  v1::PullRequest pull;
  InPlaceRequest<v1::PushPullRequest> push_pull;
  int64_t pull_clock = 0;
  std::string job_scope;  // the job whose credential the call carries ("": any job)
};

absl::Status ParameterService::CheckScope(const std::string& job_scope, const std::string& job_id) {
  if (job_scope.empty() || job_scope == job_id) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat("the call carries job ", job_scope,
                                                  "'s credential; it cannot act on job '",
                                                  Printable(job_id, 64), "'"));
}

grpc::ServerUnaryReactor* ParameterService::StartDataCall(ServerMethod method,
                                                          grpc::CallbackServerContext* ctx,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* answer) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (authorizer_ != nullptr) {
    if (grpc::Status denied = authorizer_->Check(*ctx, Access::kJob); !denied.ok()) {
      reactor->Finish(denied);
      return reactor;
    }
  }
  auto call = std::make_unique<DataCall>();
  if (authorizer_ != nullptr) call->job_scope = authorizer_->JobScope(*ctx);
  call->method = method;
  call->reactor = reactor;
  call->request = *request;  // shares the slices
  call->answer = answer;
  call->start = absl::Now();
  call->deadline = PullDeadline(ctx);
  call->request_bytes = request->Length();
  if (!Advance(call.get(), /*may_block=*/false)) {
    handoff_.Run([this, c = call.release()] { CHECK(Advance(c, /*may_block=*/true)); });
  } else {
    call.release();  // Advance finished and freed it
  }
  return reactor;
}

bool ParameterService::Advance(DataCall* call, bool may_block) {
  absl::Status s;
  if (!call->read) {
    if (!may_block && call->request_bytes > kServeHereBytes) return false;
    call->read = true;
    switch (call->method) {
      case ServerMethod::kPush:
        FinishCall(call, ServePush(&call->request, call->answer, call->job_scope));
        return true;
      case ServerMethod::kPull:
        s = ParseRequest(&call->request, &call->pull);
        if (s.ok()) s = CheckScope(call->job_scope, call->pull.job_id());
        if (s.ok()) s = CheckJob(call->pull.job_id());
        if (s.ok()) s = store_->CheckShardEpoch(call->pull.job_id(), call->pull.shard_epoch());
        call->pull_clock = call->pull.clock();
        break;
      default:
        s = call->push_pull.Parse(&call->request, ReadPushPullRequest);
        if (s.ok()) s = CheckScope(call->job_scope, call->push_pull.req.push().job_id());
        if (s.ok()) s = PushPart(call->push_pull.req, &call->push_pull.values, &call->pull_clock);
    }
    if (!s.ok()) {
      FinishCall(call, s);
      return true;
    }
  }
  const bool is_pull = call->method == ServerMethod::kPull;
  const std::string& job_id = is_pull ? call->pull.job_id() : call->push_pull.req.push().job_id();
  const auto& blocks = is_pull ? call->pull.blocks() : call->push_pull.req.pull_blocks();
  bool deferred = false;
  s = DoPull(job_id, call->pull_clock, blocks, call->deadline, call->answer,
             may_block ? nullptr : &deferred);
  if (deferred) return false;
  FinishCall(call, s);
  return true;
}

void ParameterService::FinishCall(DataCall* call, const absl::Status& status) {
  std::unique_ptr<DataCall> owned(call);
  if (metrics_ != nullptr) {
    metrics_->RecordRequest(call->method, status, call->request_bytes,
                            status.ok() ? call->answer->Length() : 0, absl::Now() - call->start);
  }
  call->reactor->Finish(ToGrpcStatus(status));
}

absl::Status ParameterService::ServePull(grpc::ByteBuffer* request, absl::Time deadline,
                                         grpc::ByteBuffer* answer) {
  v1::PullRequest req;
  PS_RETURN_IF_ERROR(ParseRequest(request, &req));
  PS_RETURN_IF_ERROR(CheckJob(req.job_id()));
  PS_RETURN_IF_ERROR(store_->CheckShardEpoch(req.job_id(), req.shard_epoch()));
  return DoPull(req.job_id(), req.clock(), req.blocks(), deadline, answer);
}

absl::Status ParameterService::ServePush(grpc::ByteBuffer* request, grpc::ByteBuffer* answer,
                                         const std::string& job_scope) {
  InPlaceRequest<v1::PushRequest> r;
  bool duplicate = false;
  PS_RETURN_IF_ERROR(r.Parse(request, ReadPushRequest));
  PS_RETURN_IF_ERROR(CheckScope(job_scope, r.req.job_id()));
  PS_RETURN_IF_ERROR(DoPush(r.req, &duplicate, &r.values));
  // A PushResponse: `duplicate` (field 1) when set, else nothing.
  static constexpr char kDuplicate[] = {0x08, 0x01};
  grpc::Slice answer_slice(kDuplicate, duplicate ? sizeof(kDuplicate) : 0);
  *answer = grpc::ByteBuffer(&answer_slice, 1);
  return absl::OkStatus();
}

absl::Status ParameterService::ServePushPull(grpc::ByteBuffer* request, absl::Time deadline,
                                             grpc::ByteBuffer* answer) {
  InPlaceRequest<v1::PushPullRequest> r;
  PS_RETURN_IF_ERROR(r.Parse(request, ReadPushPullRequest));
  int64_t pull_clock = 0;
  PS_RETURN_IF_ERROR(PushPart(r.req, &r.values, &pull_clock));
  return DoPull(r.req.push().job_id(), pull_clock, r.req.pull_blocks(), deadline, answer);
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

}  // namespace ps
