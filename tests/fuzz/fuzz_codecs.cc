// The packed keys and values (common/packed_bytes.h), the slot bitmap (common/shard_map.h), the shard-map
// file parser, the checks a restore order's shard list passes (HeldSlots, as Restorer
// validates an order), and the client's hand-written parser of pull answers
// (client/data_plane_wire.h, over common/wire.h), the server's in-place reader of
// pushes (server/internal/push_request.h), and the wire codecs' decoder of a block's values
// (common/value_codec.h). Input: [selector byte][payload].
#include <google/protobuf/stubs/logging.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "common/packed_bytes.h"
#include "common/shard_map.h"
#include "common/value_codec.h"
#include "ps/v1/checkpoint.pb.h"
#include "ps/v1/parameter_server.pb.h"
#include "server/checkpoint_io.h"
#include "server/internal/push_request.h"
#include "client/data_plane_wire.h"
#include "client/rpc_client.h"

namespace {

// Aborts (a finding) naming the check's line when `ok` is false.
void Require(bool ok, int line = __builtin_LINE()) {
  if (ok) return;
  std::fprintf(stderr, "%s:%d: check failed\n", __FILE__, line);
  std::abort();
}

void FuzzCodecs(const std::string& bytes) {
  absl::Span<const uint64_t> keys;
  if (ps::DecodeKeys(bytes, &keys).ok()) {
    Require(keys.size() * sizeof(uint64_t) == bytes.size());
    std::string again;
    ps::AppendKeys(keys, &again);
    Require(again == bytes);
  }
  absl::Span<const float> values;
  if (ps::DecodeValues(bytes, &values).ok()) {
    Require(values.size() * sizeof(float) == bytes.size());
    (void)ps::AllFinite(values);
    std::string again;
    ps::AppendValues(values.data(), values.size(), &again);
    Require(again == bytes);
  }
}

void FuzzBitmap(const std::string& bytes) {
  auto slots = ps::DecodeSlotBitmap(bytes);
  if (!slots.ok()) return;
  Require(slots->size() == ps::kNumSlots);
  Require(ps::EncodeSlotBitmap(*slots) == bytes);
}

void FuzzShardMapText(const std::string& text) {
  auto map = ps::ShardMap::Parse(text);
  if (!map.ok()) return;
  for (uint32_t s = 0; s < ps::kNumSlots; ++s) {
    const int owner = map->OwnerOfSlot(s);
    Require(owner >= 0 && static_cast<size_t>(owner) < map->servers().size());
  }
}

// A restore order's shards: each bitmap well-formed, no slot in two shards.
void FuzzRestoreOrder(const std::string& bytes) {
  ps::v1::RestoreOrder order;
  if (!order.ParseFromString(bytes)) return;
  auto held = ps::HeldSlots({order.shards().begin(), order.shards().end()});
  if (!held.ok()) return;
  std::vector<int> holders(ps::kNumSlots, 0);
  for (const std::vector<bool>& shard : *held) {
    Require(shard.size() == ps::kNumSlots);
    for (uint32_t s = 0; s < ps::kNumSlots; ++s) holders[s] += shard[s];
  }
  for (int n : holders) Require(n <= 1);
}

// A server's pull answer for 3 keys of dim 2 (payload: [piece size][answer bytes], the answer
// cut into slices of that size). Whatever the bytes, the parser never writes outside the
// caller's rows; when it accepts them, protobuf reads the same answer from them.
void FuzzPullAnswer(const std::string& payload) {
  if (payload.empty()) return;
  const size_t piece = 1 + static_cast<uint8_t>(payload[0]);
  const std::string bytes = payload.substr(1);
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    slices.emplace_back(bytes.data() + at, std::min(piece, bytes.size() - at));
  }
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  const std::vector<uint64_t> keys{7, 8, 9};
  std::vector<float> out(6, 0.0f);
  const std::vector<ps::TableOp> ops{ps::TableOp{1, keys, nullptr, out.data()}};
  const std::vector<ps::KeySegment> segments{{0, {0, 1, 2}}};
  int64_t min_clock = 0, wait = 0;
  if (!ps::DecodePullResponse(&buffer, ops, {2}, segments, nullptr, &min_clock, &wait).ok()) return;
  ps::v1::PullResponse parsed;
  Require(parsed.ParseFromString(bytes));
  Require(parsed.blocks_size() == 1 && parsed.blocks(0).values().size() == 24);
  Require(std::memcmp(parsed.blocks(0).values().data(), out.data(), 24) == 0);
  Require(parsed.min_clock() == min_clock && parsed.wait_micros() == wait);
}

// A Push (even piece byte) or PushPull request (odd) read in place, cut into slices of
// [piece size] bytes. Whatever the bytes, the reader stays in the buffer; when it accepts them,
// protobuf parses them to the same message (unknown fields aside), values included.
void FuzzPushRequest(const std::string& payload) {
  if (payload.empty()) return;
  const uint8_t selector = static_cast<uint8_t>(payload[0]);
  const size_t piece = 1 + selector / 2;
  const std::string bytes = payload.substr(1);
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    slices.emplace_back(bytes.data() + at, std::min(piece, bytes.size() - at));
  }
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  ps::wire::SliceReader reader;
  Require(reader.Reset(&buffer));
  std::deque<ps::ScatteredValues> values;
  auto restore = [&values](ps::v1::PushRequest* push) {
    Require(values.size() == static_cast<size_t>(push->blocks_size()));
    for (int i = 0; i < push->blocks_size(); ++i) {
      Require(push->blocks(i).values().empty());
      std::string v(values[i].bytes(), '\0');
      values[i].CopyTo(v.data());
      if (v.size() % 4 == 0) {
        (void)values[i].AllFinite();
        std::vector<float> scratch(v.size() / 4);
        const void* f = values[i].Floats(0, v.size() / 4, scratch.data());
        Require(v.empty() || std::memcmp(f, v.data(), v.size()) == 0);
      }
      push->mutable_blocks(i)->set_values(v);
    }
  };
  if (selector % 2 == 0) {
    ps::v1::PushRequest got;
    if (!ps::ReadPushRequest(&reader, &got, &values).ok()) return;
    restore(&got);
    ps::v1::PushRequest parsed;
    Require(parsed.ParseFromString(bytes));
    parsed.DiscardUnknownFields();
    Require(parsed.SerializeAsString() == got.SerializeAsString());
  } else {
    ps::v1::PushPullRequest got;
    if (!ps::ReadPushPullRequest(&reader, &got, &values).ok()) return;
    if (got.has_push()) restore(got.mutable_push());
    Require(got.has_push() || values.empty());
    ps::v1::PushPullRequest parsed;
    Require(parsed.ParseFromString(bytes));
    parsed.DiscardUnknownFields();
    Require(parsed.SerializeAsString() == got.SerializeAsString());
  }
}

// [codec byte][n: u16 LE][encoded values]: a block either decodes into n values, all finite for
// the lossy codecs (a corrupted TOPK, SIGN or INT8 block never yields a NaN or an Inf), of the
// codec's length, or is refused.
void FuzzValueBlock(const std::string& bytes) {
  if (bytes.size() < 3) return;
  const auto codec = static_cast<ps::v1::ValueCodec>(static_cast<uint8_t>(bytes[0]) % 8);
  const size_t n =
      static_cast<uint8_t>(bytes[1]) | static_cast<size_t>(static_cast<uint8_t>(bytes[2])) << 8;
  const absl::string_view block(bytes.data() + 3, bytes.size() - 3);
  // The same bytes as a delta pull's block: indices in range and increasing, its length the
  // format's.
  std::vector<uint32_t> indices;
  std::vector<float> changed;
  if (ps::DecodeDeltaBlock(codec, block, n, &indices, &changed).ok()) {
    Require(indices.size() == changed.size() && indices.size() <= n);
    for (size_t j = 0; j < indices.size(); ++j) {
      Require(indices[j] < n && (j == 0 || indices[j] > indices[j - 1]));
    }
    ps::v1::CodecSpec spec;
    spec.set_codec(codec);
    Require(block.size() == ps::DeltaBlockBytes(spec, indices.size()));
  }
  std::vector<float> out(n);
  if (!ps::DecodeValueBlock(codec, block, n, out.data()).ok()) return;
  Require(ps::v1::ValueCodec_IsValid(codec));
  if (codec == ps::v1::CODEC_TOPK || codec == ps::v1::CODEC_SIGN || codec == ps::v1::CODEC_INT8) {
    for (float v : out) Require(std::isfinite(v));
  }
  if (codec != ps::v1::CODEC_TOPK) {
    ps::v1::CodecSpec spec;
    spec.set_codec(codec);
    Require(block.size() == ps::EncodedBytes(spec, n));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // unparsable input is the point
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string payload(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 7) {
    case 0:
      FuzzCodecs(payload);
      break;
    case 1:
      FuzzBitmap(payload);
      break;
    case 2:
      FuzzShardMapText(payload);
      break;
    case 3:
      FuzzRestoreOrder(payload);
      break;
    case 4:
      FuzzPullAnswer(payload);
      break;
    case 5:
      FuzzPushRequest(payload);
      break;
    case 6:
      FuzzValueBlock(payload);
      break;
  }
  return 0;
}
