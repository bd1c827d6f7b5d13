#include "client/request_codec.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/value_codec.h"
#include "client/pull_cache.h"
#include "client/rpc_client.h"

namespace ps {
namespace {

using wire::LengthFieldSize;
using wire::PutLengthPrefix;
using wire::PutVarintField;
using wire::VarintFieldSize;

// KeyBlock fields.
constexpr uint32_t kBlockTableId = 1, kBlockKeys = 2, kBlockValues = 3, kBlockCodec = 4,
                   kBlockMomentum = 5, kBlockSince = 6, kBlockDelta = 7;

// A fixed64 field: its bytes (none for 0, as protobuf leaves it out).
size_t Fixed64FieldSize(uint32_t field, uint64_t v) {
  return v == 0 ? 0 : wire::VarintSize((uint64_t{field} << 3) | wire::kFixed64) + 8;
}
void PutFixed64Field(uint32_t field, uint64_t v, std::string* out) {
  if (v == 0) return;
  wire::PutTag(field, wire::kFixed64, out);
  char bytes[8];
  std::memcpy(bytes, &v, 8);  // little-endian hosts only, as the rest of the wire code
  out->append(bytes, 8);
}

size_t KeyBytes(const KeySegment& seg) { return seg.idx.size() * sizeof(uint64_t); }
size_t ValueBytes(const KeySegment& seg, int dim) {
  return seg.idx.size() * static_cast<size_t>(dim) * sizeof(float);
}
// The bytes of a push block's values field: its gradients, or their encoding.
size_t PushValueBytes(const KeySegment& seg, int dim) {
  return seg.codec == v1::CODEC_NONE ? ValueBytes(seg, dim) : seg.encoded.size();
}

size_t BlockSize(const TableOp& op, const KeySegment& seg, int dim, bool with_values) {
  size_t n =
      VarintFieldSize(kBlockTableId, op.table_id) + LengthFieldSize(kBlockKeys, KeyBytes(seg));
  if (with_values && !seg.idx.empty()) {
    n += LengthFieldSize(kBlockValues, PushValueBytes(seg, dim));
  }
  n += VarintFieldSize(kBlockCodec, seg.codec);
  if (with_values) n += wire::FloatFieldSize(kBlockMomentum, seg.momentum);
  if (!with_values) n += Fixed64FieldSize(kBlockSince, seg.since);
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
    PutVarintField(kBlockTableId, op.table_id, out);
    PutLengthPrefix(kBlockKeys, KeyBytes(seg), out);
    const size_t at = out->size();
    out->resize(at + KeyBytes(seg));
    char* k = out->data() + at;
    for (uint32_t i : seg.idx) {
      std::memcpy(k, &op.keys[i], sizeof(uint64_t));
      k += sizeof(uint64_t);
    }
    if (with_values && !seg.idx.empty()) {
      PutLengthPrefix(kBlockValues, PushValueBytes(seg, dim), b->out());
      if (seg.codec != v1::CODEC_NONE) {
        b->out()->append(seg.encoded);  // copied: the segment does not outlive this request
      } else {
        const size_t row = static_cast<size_t>(dim) * sizeof(float);
        ForEachRun(seg.idx, [&](uint32_t first, size_t count) {
          b->Append(op.grads + static_cast<size_t>(first) * dim, count * row);
        });
      }
    }
    PutVarintField(kBlockCodec, seg.codec, b->out());
    if (with_values) wire::PutFloatField(kBlockMomentum, seg.momentum, b->out());
    if (!with_values) PutFixed64Field(kBlockSince, seg.since, b->out());
  }
}

// PushRequest fields 1-5 (job_id, worker_id, request_id, clock, shard_epoch).
void PutPushHeader(const RequestHeader& h, std::string* out) {
  PutLengthPrefix(1, h.job_id.size(), out);
  out->append(h.job_id);
  PutVarintField(2, h.worker_id, out);
  PutVarintField(3, h.request_id, out);
  PutVarintField(4, static_cast<uint64_t>(h.clock), out);
  PutVarintField(5, h.shard_epoch, out);
}

}  // namespace

void EncodePullRequest(const RequestHeader& h, const std::vector<TableOp>& ops,
                       const std::vector<int>& dims, const std::vector<KeySegment>& segments,
                       wire::MessageBuilder* b) {
  std::string* out = b->out();
  PutLengthPrefix(1, h.job_id.size(), out);
  out->append(h.job_id);
  PutVarintField(2, h.worker_id, out);
  PutVarintField(3, static_cast<uint64_t>(h.clock), out);
  PutVarintField(4, h.shard_epoch, out);
  AppendBlocks(5, ops, dims, segments, /*with_values=*/false, b);
}

void EncodePushRequest(const RequestHeader& h, const std::vector<TableOp>& ops,
                       const std::vector<int>& dims, const std::vector<KeySegment>& segments,
                       wire::MessageBuilder* b) {
  PutPushHeader(h, b->out());
  AppendBlocks(6, ops, dims, segments, /*with_values=*/true, b);
  wire::PutFloatField(7, h.lr_scale, b->out());
}

void EncodePushPullRequest(const RequestHeader& h, uint32_t clock_parts,
                           const std::vector<TableOp>& push_ops, const std::vector<int>& push_dims,
                           const std::vector<KeySegment>& push_segments,
                           const std::vector<TableOp>& pull_ops, const std::vector<int>& pull_dims,
                           const std::vector<KeySegment>& pull_segments, wire::MessageBuilder* b) {
  std::string header;
  PutPushHeader(h, &header);
  std::string lr;
  wire::PutFloatField(7, h.lr_scale, &lr);
  const size_t push_size =
      header.size() + BlocksSize(6, push_ops, push_dims, push_segments, true) + lr.size();
  PutLengthPrefix(1, push_size, b->out());
  b->out()->append(header);
  AppendBlocks(6, push_ops, push_dims, push_segments, /*with_values=*/true, b);
  b->out()->append(lr);
  PutVarintField(2, 1, b->out());  // advance_clock
  PutVarintField(3, clock_parts, b->out());
  AppendBlocks(4, pull_ops, pull_dims, pull_segments, /*with_values=*/false, b);
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
    if (field == kBlockValues && type == wire::kLengthDelimited) {
      size_t len;
      if (!r->ReadLength(&len)) return Malformed("truncated values");
      if (seen_values) return Malformed("two values fields in one block");
      seen_values = true;
      if (!r->ReadString(len, &values)) return Malformed("truncated values");
    } else if (field == kBlockSince && type == wire::kFixed64) {
      if (!r->Copy(&token, sizeof(token))) return Malformed("truncated token");
    } else if (field == kBlockDelta && type == wire::kVarint) {
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
    if (field != kBlockValues || type != wire::kLengthDelimited) {
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
    if (field == 1 && type == wire::kLengthDelimited) {
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
    } else if ((field == 2 || field == 3) && type == wire::kVarint) {
      if (!r.ReadVarint(&v)) return Malformed("truncated clock");
      *(field == 2 ? min_clock : wait_micros) = static_cast<int64_t>(v);
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
