#include "client/data_plane_wire.h"

#include <memory>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "client/pull_cache.h"
#include "client/rpc_client.h"
#include "common/status_macros.h"
#include "common/value_codec.h"
#include "ps/v1/parameter_server.pb.h"

namespace ps {
namespace {

using wire::LengthFieldSize;
using wire::PutLengthPrefix;
using wire::PutVarintField;
using wire::VarintFieldSize;

// The fields written and read here, by their generated numbers (ps/v1/parameter_server.proto);
// the wire type each is written with is the one its C++ type implies (float: fixed32, ...), and
// the asserts below fail the build if a field's type changes under it.
using v1::KeyBlock;
using v1::PullRequest;
using v1::PullResponse;
using v1::PushPullRequest;
using v1::PushRequest;

// Whether an accessor returning `Returned` reads a field of C++ type T.
template <typename T, typename Returned>
constexpr bool kIs = std::is_same_v<T, std::decay_t<Returned>>;

// Written as varints.
static_assert(kIs<uint32_t, decltype(KeyBlock().table_id())>);
static_assert(kIs<v1::ValueCodec, decltype(KeyBlock().codec())>);
static_assert(kIs<bool, decltype(KeyBlock().delta())>);
static_assert(kIs<uint32_t, decltype(PullRequest().worker_id())>);
static_assert(kIs<int64_t, decltype(PullRequest().clock())>);
static_assert(kIs<uint64_t, decltype(PullRequest().shard_epoch())>);
static_assert(kIs<uint32_t, decltype(PushRequest().worker_id())>);
static_assert(kIs<uint64_t, decltype(PushRequest().request_id())>);
static_assert(kIs<int64_t, decltype(PushRequest().clock())>);
static_assert(kIs<uint64_t, decltype(PushRequest().shard_epoch())>);
static_assert(kIs<bool, decltype(PushPullRequest().advance_clock())>);
static_assert(kIs<uint32_t, decltype(PushPullRequest().clock_parts())>);
static_assert(kIs<int64_t, decltype(PullResponse().min_clock())>);
static_assert(kIs<int64_t, decltype(PullResponse().wait_micros())>);
// Written as fixed32 (float) and fixed64 (since: a fixed64 in the .proto, which the C++ type
// alone cannot tell from a uint64 varint; DataPlaneWireTest checks the declared types).
static_assert(kIs<float, decltype(KeyBlock().momentum())>);
static_assert(kIs<float, decltype(PushRequest().lr_scale())>);
static_assert(kIs<uint64_t, decltype(KeyBlock().since())>);
// Length-delimited: strings, bytes and messages.
static_assert(kIs<std::string, decltype(KeyBlock().keys())>);
static_assert(kIs<std::string, decltype(KeyBlock().values())>);
static_assert(kIs<std::string, decltype(PullRequest().job_id())>);
static_assert(kIs<std::string, decltype(PushRequest().job_id())>);
static_assert(kIs<PushRequest, decltype(PushPullRequest().push())>);

size_t KeyBytes(const KeySegment& seg) { return seg.idx.size() * sizeof(uint64_t); }
size_t ValueBytes(const KeySegment& seg, int dim) {
  return seg.idx.size() * static_cast<size_t>(dim) * sizeof(float);
}
// The bytes of a push block's values field: its gradients, or their encoding.
size_t PushValueBytes(const KeySegment& seg, int dim) {
  return seg.codec == v1::CODEC_NONE ? ValueBytes(seg, dim) : seg.encoded.size();
}

size_t BlockSize(const TableOp& op, const KeySegment& seg, int dim, bool with_values) {
  size_t n = VarintFieldSize(KeyBlock::kTableIdFieldNumber, op.table_id) +
             LengthFieldSize(KeyBlock::kKeysFieldNumber, KeyBytes(seg));
  if (with_values && !seg.idx.empty()) {
    n += LengthFieldSize(KeyBlock::kValuesFieldNumber, PushValueBytes(seg, dim));
  }
  n += VarintFieldSize(KeyBlock::kCodecFieldNumber, seg.codec);
  if (with_values) n += wire::FloatFieldSize(KeyBlock::kMomentumFieldNumber, seg.momentum);
  if (!with_values) n += wire::Fixed64FieldSize(KeyBlock::kSinceFieldNumber, seg.since);
  return n;
}

size_t BlocksSize(uint32_t field, const std::vector<TableOp>& ops, const std::vector<int>& dims,
                  const std::vector<KeySegment>& segments, bool with_values) {
  size_t n = 0;
  for (const KeySegment& seg : segments) {
    n += LengthFieldSize(field, BlockSize(ops[seg.op], seg, dims[seg.op], with_values));
  }
  return n;
}

// Calls fn(first, count) for each run of consecutive indices in `idx`.
template <typename Fn>
void ForEachRun(const std::vector<uint32_t>& idx, Fn fn) {
  size_t i = 0;
  while (i < idx.size()) {
    size_t j = i + 1;
    while (j < idx.size() && idx[j] == idx[j - 1] + 1) ++j;
    fn(idx[i], j - i);
    i = j;
  }
}

void AppendBlocks(uint32_t field, const std::vector<TableOp>& ops, const std::vector<int>& dims,
                  const std::vector<KeySegment>& segments, bool with_values,
                  wire::MessageBuilder* b) {
  for (const KeySegment& seg : segments) {
    const TableOp& op = ops[seg.op];
    const int dim = dims[seg.op];
    std::string* out = b->out();
    PutLengthPrefix(field, BlockSize(op, seg, dim, with_values), out);
    PutVarintField(KeyBlock::kTableIdFieldNumber, op.table_id, out);
    PutLengthPrefix(KeyBlock::kKeysFieldNumber, KeyBytes(seg), out);
    const size_t at = out->size();
    out->resize(at + KeyBytes(seg));
    char* k = out->data() + at;
    for (uint32_t i : seg.idx) {
      std::memcpy(k, &op.keys[i], sizeof(uint64_t));
      k += sizeof(uint64_t);
    }
    if (with_values && !seg.idx.empty()) {
      PutLengthPrefix(KeyBlock::kValuesFieldNumber, PushValueBytes(seg, dim), b->out());
      if (seg.codec != v1::CODEC_NONE) {
        b->out()->append(seg.encoded);  // copied: the segment does not outlive this request
      } else {
        const size_t row = static_cast<size_t>(dim) * sizeof(float);
        ForEachRun(seg.idx, [&](uint32_t first, size_t count) {
          b->Append(op.grads + static_cast<size_t>(first) * dim, count * row);
        });
      }
    }
    PutVarintField(KeyBlock::kCodecFieldNumber, seg.codec, b->out());
    if (with_values) wire::PutFloatField(KeyBlock::kMomentumFieldNumber, seg.momentum, b->out());
    if (!with_values) wire::PutFixed64Field(KeyBlock::kSinceFieldNumber, seg.since, b->out());
  }
}

// PushRequest's fields before its blocks.
void PutPushHeader(const RequestHeader& h, std::string* out) {
  PutLengthPrefix(PushRequest::kJobIdFieldNumber, h.job_id.size(), out);
  out->append(h.job_id);
  PutVarintField(PushRequest::kWorkerIdFieldNumber, h.worker_id, out);
  PutVarintField(PushRequest::kRequestIdFieldNumber, h.request_id, out);
  PutVarintField(PushRequest::kClockFieldNumber, static_cast<uint64_t>(h.clock), out);
  PutVarintField(PushRequest::kShardEpochFieldNumber, h.shard_epoch, out);
  if (h.resend_parts > 0) PutVarintField(PushRequest::kResendPartsFieldNumber, h.resend_parts, out);
}

}  // namespace

void EncodePullRequest(const RequestHeader& h, const std::vector<TableOp>& ops,
                       const std::vector<int>& dims, const std::vector<KeySegment>& segments,
                       wire::MessageBuilder* b) {
  std::string* out = b->out();
  PutLengthPrefix(PullRequest::kJobIdFieldNumber, h.job_id.size(), out);
  out->append(h.job_id);
  PutVarintField(PullRequest::kWorkerIdFieldNumber, h.worker_id, out);
  PutVarintField(PullRequest::kClockFieldNumber, static_cast<uint64_t>(h.clock), out);
  PutVarintField(PullRequest::kShardEpochFieldNumber, h.shard_epoch, out);
  AppendBlocks(PullRequest::kBlocksFieldNumber, ops, dims, segments, /*with_values=*/false, b);
  if (h.prefetch) PutVarintField(PullRequest::kPrefetchFieldNumber, 1, b->out());
}

void EncodePushRequest(const RequestHeader& h, const std::vector<TableOp>& ops,
                       const std::vector<int>& dims, const std::vector<KeySegment>& segments,
                       wire::MessageBuilder* b) {
  PutPushHeader(h, b->out());
  AppendBlocks(PushRequest::kBlocksFieldNumber, ops, dims, segments, /*with_values=*/true, b);
  wire::PutFloatField(PushRequest::kLrScaleFieldNumber, h.lr_scale, b->out());
}

void EncodePushPullRequest(const RequestHeader& h, uint32_t clock_parts,
                           const std::vector<TableOp>& push_ops, const std::vector<int>& push_dims,
                           const std::vector<KeySegment>& push_segments,
                           const std::vector<TableOp>& pull_ops, const std::vector<int>& pull_dims,
                           const std::vector<KeySegment>& pull_segments, wire::MessageBuilder* b) {
  std::string header;
  PutPushHeader(h, &header);
  std::string lr;
  wire::PutFloatField(PushRequest::kLrScaleFieldNumber, h.lr_scale, &lr);
  const size_t push_size =
      header.size() +
      BlocksSize(PushRequest::kBlocksFieldNumber, push_ops, push_dims, push_segments, true) +
      lr.size();
  PutLengthPrefix(PushPullRequest::kPushFieldNumber, push_size, b->out());
  b->out()->append(header);
  AppendBlocks(PushRequest::kBlocksFieldNumber, push_ops, push_dims, push_segments,
               /*with_values=*/true, b);
  b->out()->append(lr);
  PutVarintField(PushPullRequest::kAdvanceClockFieldNumber, 1, b->out());
  PutVarintField(PushPullRequest::kClockPartsFieldNumber, clock_parts, b->out());
  AppendBlocks(PushPullRequest::kPullBlocksFieldNumber, pull_ops, pull_dims, pull_segments,
               /*with_values=*/false, b);
}

namespace {

absl::Status Malformed(absl::string_view what) {
  return absl::InternalError(absl::StrCat("malformed pull answer: ", what));
}

// The `len` bytes of an encoded values field, decoded into the `out` rows of `seg`.
// INTERNAL unless `len` is the bytes of the values of seg's rows in seg's codec.
absl::Status CheckAnswerBytes(size_t len, int dim, const KeySegment& seg) {
  v1::CodecSpec codec;
  codec.set_codec(seg.codec);
  if (len == EncodedBytes(codec, seg.idx.size() * static_cast<size_t>(dim))) {
    return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat("server answered ", len, " bytes of values for ",
                                          seg.idx.size(), " keys of dim ", dim, " (",
                                          CodecName(seg.codec), ")"));
}

// `bytes`, the encoded values of seg's rows, decoded into the `out` rows of `seg`.
absl::Status DecodeIntoRows(absl::string_view bytes, const TableOp& op, int dim,
                            const KeySegment& seg) {
  const size_t n = seg.idx.size() * static_cast<size_t>(dim);
  bool one_run = n > 0;
  for (size_t j = 1; j < seg.idx.size() && one_run; ++j) one_run = seg.idx[j] == seg.idx[0] + j;
  if (one_run) {
    // One run of rows (indices increase): decoded straight into the caller's buffer.
    absl::Status s =
        DecodeValueBlock(seg.codec, bytes, n, op.out + static_cast<size_t>(seg.idx.front()) * dim);
    return s.ok() ? absl::OkStatus() : Malformed(s.message());
  }
  std::unique_ptr<float[]> values(new float[n]);
  absl::Status s = DecodeValueBlock(seg.codec, bytes, n, values.get());
  if (!s.ok()) return Malformed(s.message());
  const float* from = values.get();
  ForEachRun(seg.idx, [&](uint32_t first, size_t count) {
    std::memcpy(op.out + static_cast<size_t>(first) * dim, from, count * dim * sizeof(float));
    from += count * dim;
  });
  return absl::OkStatus();
}

// The `len` bytes of an encoded values field, decoded into the `out` rows of `seg`.
absl::Status DecodeEncodedBlock(wire::SliceReader* r, size_t len, const TableOp& op, int dim,
                                const KeySegment& seg) {
  std::string bytes;
  if (!r->ReadString(len, &bytes)) return Malformed("truncated values");
  return DecodeIntoRows(bytes, op, dim, seg);
}

// One KeyBlock of a PullResponse to a delta segment: its values (whole or a delta block) and
// its token, through `cache` to the `out` rows of `seg`.
absl::Status DecodeDeltaSegmentBlock(wire::SliceReader* r, const TableOp& op, int dim,
                                     const KeySegment& seg, PullCache* cache) {
  std::string values;
  bool seen_values = false, delta = false;
  uint64_t token = 0;
  while (!r->done()) {
    uint32_t field;
    wire::WireType type;
    if (!r->ReadTag(&field, &type)) return Malformed("bad tag in a block");
    if (field == KeyBlock::kValuesFieldNumber && type == wire::kLengthDelimited) {
      size_t len;
      if (!r->ReadLength(&len)) return Malformed("truncated values");
      if (seen_values) return Malformed("two values fields in one block");
      seen_values = true;
      if (!r->ReadString(len, &values)) return Malformed("truncated values");
    } else if (field == KeyBlock::kSinceFieldNumber && type == wire::kFixed64) {
      if (!r->Copy(&token, sizeof(token))) return Malformed("truncated token");
    } else if (field == KeyBlock::kDeltaFieldNumber && type == wire::kVarint) {
      uint64_t v;
      if (!r->ReadVarint(&v)) return Malformed("truncated delta flag");
      delta = v != 0;
    } else if (!r->SkipField(type)) {
      return Malformed("truncated block");
    }
  }
  if (delta) return cache->ApplyDelta(op, seg, dim, seg.num_rows, values, token);
  PS_RETURN_IF_ERROR(CheckAnswerBytes(values.size(), dim, seg));
  PS_RETURN_IF_ERROR(DecodeIntoRows(values, op, dim, seg));
  cache->StoreWhole(op, seg, dim, seg.num_rows, token);
  return absl::OkStatus();
}

// One KeyBlock of a PullResponse: its values go to the `out` rows of `seg`.
absl::Status DecodeBlock(wire::SliceReader* r, const TableOp& op, int dim, const KeySegment& seg) {
  bool seen_values = false;
  while (!r->done()) {
    uint32_t field;
    wire::WireType type;
    if (!r->ReadTag(&field, &type)) return Malformed("bad tag in a block");
    if (field != KeyBlock::kValuesFieldNumber || type != wire::kLengthDelimited) {
      if (!r->SkipField(type)) return Malformed("truncated block");
      continue;
    }
    size_t len;
    if (!r->ReadLength(&len)) return Malformed("truncated values");
    if (seen_values) return Malformed("two values fields in one block");
    seen_values = true;
    PS_RETURN_IF_ERROR(CheckAnswerBytes(len, dim, seg));
    if (seg.codec != v1::CODEC_NONE) {
      PS_RETURN_IF_ERROR(DecodeEncodedBlock(r, len, op, dim, seg));
      continue;
    }
    const size_t row = static_cast<size_t>(dim) * sizeof(float);
    bool ok = true;
    ForEachRun(seg.idx, [&](uint32_t first, size_t count) {
      ok = ok && r->Copy(op.out + static_cast<size_t>(first) * dim, count * row);
    });
    if (!ok) return Malformed("truncated values");
  }
  if (!seen_values && !seg.idx.empty()) {
    return absl::InternalError(absl::StrCat("server answered 0 bytes of values for ",
                                            seg.idx.size(), " keys of dim ", dim));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DecodePullResponse(grpc::ByteBuffer* response, const std::vector<TableOp>& ops,
                                const std::vector<int>& dims,
                                const std::vector<KeySegment>& segments, PullCache* cache,
                                int64_t* min_clock, int64_t* wait_micros) {
  *min_clock = 0;
  *wait_micros = 0;
  wire::SliceReader r;
  if (!r.Reset(response)) return Malformed("unreadable buffer");
  size_t blocks = 0;
  while (!r.done()) {
    uint32_t field;
    wire::WireType type;
    if (!r.ReadTag(&field, &type)) return Malformed("bad tag");
    uint64_t v;
    if (field == PullResponse::kBlocksFieldNumber && type == wire::kLengthDelimited) {
      size_t len;
      if (!r.ReadLength(&len)) return Malformed("truncated block");
      if (blocks == segments.size()) {
        return absl::InternalError(
            absl::StrCat("server answered more than the ", segments.size(), " blocks asked"));
      }
      const KeySegment& seg = segments[blocks++];
      const size_t outer = r.PushLimit(len);
      absl::Status s = seg.delta && cache != nullptr
                           ? DecodeDeltaSegmentBlock(&r, ops[seg.op], dims[seg.op], seg, cache)
                           : DecodeBlock(&r, ops[seg.op], dims[seg.op], seg);
      r.PopLimit(outer);
      if (!s.ok()) return s;
    } else if ((field == PullResponse::kMinClockFieldNumber ||
                field == PullResponse::kWaitMicrosFieldNumber) &&
               type == wire::kVarint) {
      if (!r.ReadVarint(&v)) return Malformed("truncated clock");
      *(field == PullResponse::kMinClockFieldNumber ? min_clock : wait_micros) =
          static_cast<int64_t>(v);
    } else if (!r.SkipField(type)) {
      return Malformed("truncated field");
    }
  }
  if (blocks != segments.size()) {
    return absl::InternalError(
        absl::StrCat("server answered ", blocks, " blocks for ", segments.size()));
  }
  return absl::OkStatus();
}

}  // namespace ps
