#include "server/internal/push_request.h"

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

// The fields read here, by their generated numbers; each is read with the wire type its declared
// type takes (the asserts below; PushRequestTest and PullAnswerTest.WireTypesAreTheDeclaredOnes
// check the declared types, e.g. since's fixed64, which its C++ type cannot tell from a uint64).
// A field met with another wire type is an unknown field, skipped, as protobuf does.
using v1::KeyBlock;
using v1::PushPullRequest;
using v1::PushRequest;
template <typename T, typename Accessor>
constexpr bool kIs = std::is_same_v<T, std::decay_t<Accessor>>;
static_assert(kIs<uint32_t, decltype(KeyBlock().table_id())>);  // varint
static_assert(kIs<std::string, decltype(KeyBlock().keys())>);   // length-delimited
static_assert(kIs<std::string, decltype(KeyBlock().values())>);
static_assert(kIs<v1::ValueCodec, decltype(KeyBlock().codec())>);  // varint
static_assert(kIs<float, decltype(KeyBlock().momentum())>);        // fixed32
static_assert(kIs<uint64_t, decltype(KeyBlock().since())>);        // fixed64
static_assert(kIs<bool, decltype(KeyBlock().delta())>);            // varint
static_assert(kIs<std::string, decltype(PushRequest().job_id())>);
static_assert(kIs<uint32_t, decltype(PushRequest().worker_id())>);  // varints
static_assert(kIs<uint64_t, decltype(PushRequest().request_id())>);
static_assert(kIs<int64_t, decltype(PushRequest().clock())>);
static_assert(kIs<uint64_t, decltype(PushRequest().shard_epoch())>);
static_assert(kIs<KeyBlock, decltype(PushRequest().blocks(0))>);  // length-delimited
static_assert(kIs<float, decltype(PushRequest().lr_scale())>);    // fixed32
static_assert(kIs<PushRequest, decltype(PushPullRequest().push())>);
static_assert(kIs<bool, decltype(PushPullRequest().advance_clock())>);  // varints
static_assert(kIs<uint32_t, decltype(PushPullRequest().clock_parts())>);
static_assert(kIs<KeyBlock, decltype(PushPullRequest().pull_blocks(0))>);

absl::Status Malformed(absl::string_view message, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed ps.v1.", message, ": ", what, " (not the protobuf encoding of it)"));
}

// A float field's value (fixed32, little-endian).
bool ReadFloat(wire::SliceReader* r, float* f) {
  uint32_t bits;
  if (!r->ReadFixed32(&bits)) return false;
  std::memcpy(f, &bits, sizeof(*f));
  return true;
}

// The fields of a message end where the reader's limit is. Wire types that do not match a known
// field's are unknown fields, skipped (as protobuf does).
absl::Status ReadKeyBlock(wire::SliceReader* r, v1::KeyBlock* block, ScatteredValues* values,
                          absl::string_view message) {
  while (!r->done()) {
    uint32_t field;
    wire::WireType type;
    if (!r->ReadTag(&field, &type)) return Malformed(message, "bad tag in a block");
    uint64_t v;
    size_t len;
    if (field == KeyBlock::kTableIdFieldNumber && type == wire::kVarint) {
      if (!r->ReadVarint(&v)) return Malformed(message, "truncated table_id");
      block->set_table_id(static_cast<uint32_t>(v));
    } else if (field == KeyBlock::kCodecFieldNumber && type == wire::kVarint) {
      if (!r->ReadVarint(&v)) return Malformed(message, "truncated codec");
      block->set_codec(static_cast<v1::ValueCodec>(static_cast<int32_t>(v)));
    } else if (field == KeyBlock::kMomentumFieldNumber && type == wire::kFixed32) {
      float f;
      if (!ReadFloat(r, &f)) return Malformed(message, "truncated momentum");
      block->set_momentum(f);
    } else if (field == KeyBlock::kSinceFieldNumber && type == wire::kFixed64) {
      uint64_t since;
      if (!r->Copy(&since, sizeof(since))) return Malformed(message, "truncated since");
      block->set_since(since);
    } else if (field == KeyBlock::kDeltaFieldNumber && type == wire::kVarint) {
      // An answers' field, read as protobuf reads it.
      if (!r->ReadVarint(&v)) return Malformed(message, "truncated delta");
      block->set_delta(v != 0);
    } else if (field == KeyBlock::kKeysFieldNumber && type == wire::kLengthDelimited) {
      if (!r->ReadLength(&len) || !r->ReadString(len, block->mutable_keys())) {
        return Malformed(message, "truncated keys");
      }
    } else if (field == KeyBlock::kValuesFieldNumber && type == wire::kLengthDelimited) {
      if (!r->ReadLength(&len)) return Malformed(message, "truncated values");
      if (values == nullptr) {
        if (!r->ReadString(len, block->mutable_values())) {
          return Malformed(message, "truncated values");
        }
        continue;
      }
      *values = ScatteredValues();  // a repeated bytes field: the last one counts
      if (!r->ForEachPiece(len, [values](const char* p, size_t n) { values->Add(p, n); })) {
        return Malformed(message, "truncated values");
      }
    } else if (!r->SkipField(type)) {
      return Malformed(message, "truncated field in a block");
    }
  }
  return absl::OkStatus();
}

// PushRequest's varint fields before its blocks.
bool IsPushVarint(uint32_t field) {
  return field == PushRequest::kWorkerIdFieldNumber ||
         field == PushRequest::kRequestIdFieldNumber || field == PushRequest::kClockFieldNumber ||
         field == PushRequest::kShardEpochFieldNumber ||
         field == PushRequest::kResendPartsFieldNumber;
}
void SetPushVarint(uint32_t field, uint64_t v, PushRequest* req) {
  switch (field) {
    case PushRequest::kWorkerIdFieldNumber:
      return req->set_worker_id(static_cast<uint32_t>(v));
    case PushRequest::kRequestIdFieldNumber:
      return req->set_request_id(v);
    case PushRequest::kClockFieldNumber:
      return req->set_clock(static_cast<int64_t>(v));
    case PushRequest::kShardEpochFieldNumber:
      return req->set_shard_epoch(v);
    case PushRequest::kResendPartsFieldNumber:
      return req->set_resend_parts(static_cast<uint32_t>(v));
  }
}

// Reads one occurrence of a PushRequest's fields into `req` (a second occurrence of an embedded
// message merges into the first, as protobuf merges it).
absl::Status ReadPushFields(wire::SliceReader* r, v1::PushRequest* req,
                            std::deque<ScatteredValues>* values, absl::string_view message) {
  while (!r->done()) {
    uint32_t field;
    wire::WireType type;
    if (!r->ReadTag(&field, &type)) return Malformed(message, "bad tag");
    uint64_t v;
    size_t len;
    if (field == PushRequest::kJobIdFieldNumber && type == wire::kLengthDelimited) {
      if (!r->ReadLength(&len) || !r->ReadString(len, req->mutable_job_id())) {
        return Malformed(message, "truncated job_id");
      }
      for (char c : req->job_id()) {
        if (static_cast<unsigned char>(c) >= 0x80) return Malformed(message, "job_id not ASCII");
      }
    } else if (IsPushVarint(field) && type == wire::kVarint) {
      if (!r->ReadVarint(&v)) return Malformed(message, "truncated varint");
      SetPushVarint(field, v, req);
    } else if (field == PushRequest::kBlocksFieldNumber && type == wire::kLengthDelimited) {
      if (!r->ReadLength(&len)) return Malformed(message, "truncated block");
      const size_t outer = r->PushLimit(len);
      values->emplace_back();
      absl::Status s = ReadKeyBlock(r, req->add_blocks(), &values->back(), message);
      r->PopLimit(outer);
      if (!s.ok()) return s;
    } else if (field == PushRequest::kLrScaleFieldNumber && type == wire::kFixed32) {
      float f;
      if (!ReadFloat(r, &f)) return Malformed(message, "truncated lr_scale");
      req->set_lr_scale(f);
    } else if (!r->SkipField(type)) {
      return Malformed(message, "truncated field");
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool CoalesceIfFragmented(grpc::ByteBuffer* buffer) {
  std::vector<grpc::Slice> slices;
  if (!buffer->Dump(&slices).ok()) return false;
  const size_t bytes = buffer->Length();
  if (slices.size() <= 64 || slices.size() <= bytes / 1024) return true;
  grpc::Slice whole(bytes);  // uninitialized
  char* out = reinterpret_cast<char*>(const_cast<uint8_t*>(whole.begin()));
  for (const grpc::Slice& s : slices) {
    std::memcpy(out, s.begin(), s.size());
    out += s.size();
  }
  *buffer = grpc::ByteBuffer(&whole, 1);
  return true;
}

absl::Status ReadPushRequest(wire::SliceReader* r, v1::PushRequest* req,
                             std::deque<ScatteredValues>* values) {
  req->Clear();
  values->clear();
  return ReadPushFields(r, req, values, "PushRequest");
}

absl::Status ReadPushPullRequest(wire::SliceReader* r, v1::PushPullRequest* req,
                                 std::deque<ScatteredValues>* values) {
  constexpr absl::string_view kMessage = "PushPullRequest";
  req->Clear();
  values->clear();
  while (!r->done()) {
    uint32_t field;
    wire::WireType type;
    if (!r->ReadTag(&field, &type)) return Malformed(kMessage, "bad tag");
    uint64_t v;
    size_t len;
    const bool push = field == PushPullRequest::kPushFieldNumber;
    if ((push || field == PushPullRequest::kPullBlocksFieldNumber) &&
        type == wire::kLengthDelimited) {
      if (!r->ReadLength(&len)) return Malformed(kMessage, "truncated message");
      const size_t outer = r->PushLimit(len);
      absl::Status s = push ? ReadPushFields(r, req->mutable_push(), values, kMessage)
                            : ReadKeyBlock(r, req->add_pull_blocks(), nullptr, kMessage);
      r->PopLimit(outer);
      if (!s.ok()) return s;
    } else if (field == PushPullRequest::kAdvanceClockFieldNumber && type == wire::kVarint) {
      if (!r->ReadVarint(&v)) return Malformed(kMessage, "truncated varint");
      req->set_advance_clock(v != 0);
    } else if (field == PushPullRequest::kClockPartsFieldNumber && type == wire::kVarint) {
      if (!r->ReadVarint(&v)) return Malformed(kMessage, "truncated varint");
      req->set_clock_parts(static_cast<uint32_t>(v));
    } else if (!r->SkipField(type)) {
      return Malformed(kMessage, "truncated field");
    }
  }
  return absl::OkStatus();
}

}  // namespace ps
