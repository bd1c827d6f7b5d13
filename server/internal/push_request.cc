#include "server/internal/push_request.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

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
    if (field == 1 && type == wire::kVarint) {
      if (!r->ReadVarint(&v)) return Malformed(message, "truncated table_id");
      block->set_table_id(static_cast<uint32_t>(v));
    } else if (field == 4 && type == wire::kVarint) {
      if (!r->ReadVarint(&v)) return Malformed(message, "truncated codec");
      block->set_codec(static_cast<v1::ValueCodec>(static_cast<int32_t>(v)));
    } else if (field == 5 && type == wire::kFixed32) {
      float f;
      if (!ReadFloat(r, &f)) return Malformed(message, "truncated momentum");
      block->set_momentum(f);
    } else if (field == 6 && type == wire::kFixed64) {
      uint64_t since;
      if (!r->Copy(&since, sizeof(since))) return Malformed(message, "truncated since");
      block->set_since(since);
    } else if (field == 7 && type == wire::kVarint) {  // answers' field, read as protobuf does
      if (!r->ReadVarint(&v)) return Malformed(message, "truncated delta");
      block->set_delta(v != 0);
    } else if (field == 2 && type == wire::kLengthDelimited) {
      if (!r->ReadLength(&len) || !r->ReadString(len, block->mutable_keys())) {
        return Malformed(message, "truncated keys");
      }
    } else if (field == 3 && type == wire::kLengthDelimited) {
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
    if (field == 1 && type == wire::kLengthDelimited) {
      if (!r->ReadLength(&len) || !r->ReadString(len, req->mutable_job_id())) {
        return Malformed(message, "truncated job_id");
      }
      for (char c : req->job_id()) {
        if (static_cast<unsigned char>(c) >= 0x80) return Malformed(message, "job_id not ASCII");
      }
    } else if ((field >= 2 && field <= 5) && type == wire::kVarint) {
      if (!r->ReadVarint(&v)) return Malformed(message, "truncated varint");
      if (field == 2) req->set_worker_id(static_cast<uint32_t>(v));
      if (field == 3) req->set_request_id(v);
      if (field == 4) req->set_clock(static_cast<int64_t>(v));
      if (field == 5) req->set_shard_epoch(v);
    } else if (field == 6 && type == wire::kLengthDelimited) {
      if (!r->ReadLength(&len)) return Malformed(message, "truncated block");
      const size_t outer = r->PushLimit(len);
      values->emplace_back();
      absl::Status s = ReadKeyBlock(r, req->add_blocks(), &values->back(), message);
      r->PopLimit(outer);
      if (!s.ok()) return s;
    } else if (field == 7 && type == wire::kFixed32) {
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
    if ((field == 1 || field == 4) && type == wire::kLengthDelimited) {
      if (!r->ReadLength(&len)) return Malformed(kMessage, "truncated message");
      const size_t outer = r->PushLimit(len);
      absl::Status s = field == 1 ? ReadPushFields(r, req->mutable_push(), values, kMessage)
                                  : ReadKeyBlock(r, req->add_pull_blocks(), nullptr, kMessage);
      r->PopLimit(outer);
      if (!s.ok()) return s;
    } else if ((field == 2 || field == 3) && type == wire::kVarint) {
      if (!r->ReadVarint(&v)) return Malformed(kMessage, "truncated varint");
      if (field == 2) req->set_advance_clock(v != 0);
      if (field == 3) req->set_clock_parts(static_cast<uint32_t>(v));
    } else if (!r->SkipField(type)) {
      return Malformed(kMessage, "truncated field");
    }
  }
  return absl::OkStatus();
}

}  // namespace ps
