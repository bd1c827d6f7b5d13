#include "server/pull_answer.h"

#include <glog/logging.h>

#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "common/status_macros.h"
#include "common/value_codec.h"
#include "common/wire.h"

namespace ps {
namespace {

using v1::KeyBlock;
using v1::PullResponse;

// The fields written here, by their generated numbers; each with the wire type its declared type
// takes (the asserts below, and PullAnswerTest.WireTypesAreTheDeclaredOnes for since's fixed64,
// which its C++ type cannot tell from a uint64 varint).
constexpr uint64_t Tag(int field, wire::WireType type) {
  return (static_cast<uint64_t>(field) << 3) | type;
}
template <typename T, typename Accessor>
constexpr bool kIs = std::is_same_v<T, std::decay_t<Accessor>>;
static_assert(kIs<uint32_t, decltype(KeyBlock().table_id())>);      // varint
static_assert(kIs<std::string, decltype(KeyBlock().values())>);     // length-delimited
static_assert(kIs<v1::ValueCodec, decltype(KeyBlock().codec())>);   // varint
static_assert(kIs<uint64_t, decltype(KeyBlock().since())>);         // fixed64
static_assert(kIs<bool, decltype(KeyBlock().delta())>);             // varint
static_assert(kIs<int64_t, decltype(PullResponse().min_clock())>);  // varint
static_assert(kIs<int64_t, decltype(PullResponse().wait_micros())>);
static_assert(kIs<KeyBlock, decltype(PullResponse().blocks(0))>);  // length-delimited

// Bytes of a pull block's values as float32, or as the table's pull_codec says.
size_t CodecValueBytes(const TableStore::BlockView& view) {
  return EncodedBytes(view.table->spec.pull_codec(), view.keys.size() * view.table->dim);
}

}  // namespace

// A pull block of a table with delta pulls: answered with every value in the pull codec, or,
// where the block's token (KeyBlock.since) allows and it is smaller, only those changed since
// (a delta block).
struct PullAnswer::Delta {
  std::unique_ptr<float[]> floats;  // the block's values, as float32
  std::vector<uint32_t> changed;    // a delta block: the indices of the values it sends
  bool delta = false;
  uint64_t token = 0;
  size_t bytes = 0;  // of the answer's values field

  // Reads the block's values, and those changed since `since`.
  absl::Status Read(TableStore* store, const TableStore::BlockView& view, uint64_t since) {
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
    floats.reset(new float[n]);  // not zeroed: PullDelta writes every value
    bool full = true;
    PS_RETURN_IF_ERROR(
        store->PullDelta(view, since, /*max_changed=*/lo, floats.get(), &changed, &full, &token));
    delta = !full && DeltaBlockBytes(codec, changed.size()) < whole;
    bytes = delta ? DeltaBlockBytes(codec, changed.size()) : whole;
    view.table->CountCodecBytes(/*push=*/false, n * sizeof(float), bytes);
    return absl::OkStatus();
  }

  // Writes the values field's payload at `p` (`bytes` of room).
  void Write(const TableStore::BlockView& view, char* p) const {
    const v1::CodecSpec& codec = view.table->spec.pull_codec();
    const size_t n = view.keys.size() * view.table->dim;
    if (!delta) return EncodeValueBlock(codec, absl::MakeConstSpan(floats.get(), n), p);
    std::vector<float> values(changed.size());
    for (size_t j = 0; j < values.size(); ++j) values[j] = floats[changed[j]];
    EncodeDeltaBlock(codec, n, changed, values, p);
  }
};

PullAnswer::PullAnswer(TableStore* store,
                       const google::protobuf::RepeatedPtrField<v1::KeyBlock>& blocks,
                       absl::Span<const TableStore::BlockView> views)
    : store_(store), blocks_(&blocks), views_(views) {}
PullAnswer::PullAnswer(PullAnswer&&) noexcept = default;
PullAnswer& PullAnswer::operator=(PullAnswer&&) noexcept = default;
PullAnswer::~PullAnswer() = default;

absl::StatusOr<PullAnswer> PullAnswer::Read(
    TableStore* store, const google::protobuf::RepeatedPtrField<v1::KeyBlock>& blocks,
    absl::Span<const TableStore::BlockView> views, int64_t min_clock, int64_t wait_micros) {
  PullAnswer a(store, blocks, views);
  a.min_clock_ = min_clock;
  a.wait_micros_ = wait_micros;
  a.deltas_.resize(views.size());
  a.block_bytes_.resize(views.size());
  a.total_ =
      wire::VarintFieldSize(PullResponse::kMinClockFieldNumber, static_cast<uint64_t>(min_clock)) +
      wire::VarintFieldSize(PullResponse::kWaitMicrosFieldNumber,
                            static_cast<uint64_t>(wait_micros));
  for (size_t i = 0; i < views.size(); ++i) {
    size_t extra = 0;
    if (views[i].table->delta) {
      a.deltas_[i] = std::make_unique<Delta>();
      PS_RETURN_IF_ERROR(a.deltas_[i]->Read(store, views[i], blocks[i].since()));
      if (a.deltas_[i]->token != 0) {
        extra +=
            wire::VarintSize(Tag(KeyBlock::kSinceFieldNumber, wire::kFixed64)) + sizeof(uint64_t);
      }
      if (a.deltas_[i]->delta) extra += wire::VarintFieldSize(KeyBlock::kDeltaFieldNumber, 1);
    }
    const size_t values = a.ValueBytes(i);
    a.block_bytes_[i] =
        wire::VarintFieldSize(KeyBlock::kTableIdFieldNumber, blocks[i].table_id()) +
        (values == 0 ? 0 : wire::LengthFieldSize(KeyBlock::kValuesFieldNumber, values)) +
        wire::VarintFieldSize(KeyBlock::kCodecFieldNumber, blocks[i].codec()) + extra;
    a.total_ += wire::LengthFieldSize(PullResponse::kBlocksFieldNumber, a.block_bytes_[i]);
  }
  return a;
}

size_t PullAnswer::ValueBytes(size_t i) const {
  return deltas_[i] != nullptr ? deltas_[i]->bytes : CodecValueBytes(views_[i]);
}

absl::Status PullAnswer::WriteValues(size_t i, char* p) const {
  const TableStore::BlockView& view = views_[i];
  if (deltas_[i] != nullptr) {
    deltas_[i]->Write(view, p);
    return absl::OkStatus();
  }
  const v1::CodecSpec& codec = view.table->spec.pull_codec();
  if (codec.codec() == v1::CODEC_NONE) return store_->Pull(view, p);
  // Encoded from a float32 copy.
  const size_t n = view.keys.size() * view.table->dim;
  std::unique_ptr<float[]> floats(new float[n]);  // not zeroed: Pull writes every value
  PS_RETURN_IF_ERROR(store_->Pull(view, reinterpret_cast<char*>(floats.get())));
  EncodeValueBlock(codec, absl::MakeConstSpan(floats.get(), n), p);
  view.table->CountCodecBytes(/*push=*/false, n * sizeof(float), CodecValueBytes(view));
  return absl::OkStatus();
}

absl::Status PullAnswer::Write(char* const out) const {
  char* p = out;
  for (size_t i = 0; i < views_.size(); ++i) {
    const KeyBlock& block = (*blocks_)[static_cast<int>(i)];
    p = wire::EncodeVarint(Tag(PullResponse::kBlocksFieldNumber, wire::kLengthDelimited), p);
    p = wire::EncodeVarint(block_bytes_[i], p);
    if (block.table_id() != 0) {
      p = wire::EncodeVarint(Tag(KeyBlock::kTableIdFieldNumber, wire::kVarint), p);
      p = wire::EncodeVarint(block.table_id(), p);
    }
    if (const size_t values = ValueBytes(i); values != 0) {
      p = wire::EncodeVarint(Tag(KeyBlock::kValuesFieldNumber, wire::kLengthDelimited), p);
      p = wire::EncodeVarint(values, p);
      PS_RETURN_IF_ERROR(WriteValues(i, p));
      p += values;
    }
    if (block.codec() != v1::CODEC_NONE) {  // checked: the table's pull_codec
      p = wire::EncodeVarint(Tag(KeyBlock::kCodecFieldNumber, wire::kVarint), p);
      p = wire::EncodeVarint(block.codec(), p);
    }
    if (deltas_[i] != nullptr && deltas_[i]->token != 0) {
      p = wire::EncodeVarint(Tag(KeyBlock::kSinceFieldNumber, wire::kFixed64), p);
      std::memcpy(p, &deltas_[i]->token, sizeof(uint64_t));  // little-endian hosts only
      p += sizeof(uint64_t);
    }
    if (deltas_[i] != nullptr && deltas_[i]->delta) {
      p = wire::EncodeVarint(Tag(KeyBlock::kDeltaFieldNumber, wire::kVarint), p);
      p = wire::EncodeVarint(1, p);
    }
  }
  if (min_clock_ != 0) {
    p = wire::EncodeVarint(Tag(PullResponse::kMinClockFieldNumber, wire::kVarint), p);
    p = wire::EncodeVarint(static_cast<uint64_t>(min_clock_), p);
  }
  if (wait_micros_ != 0) {
    p = wire::EncodeVarint(Tag(PullResponse::kWaitMicrosFieldNumber, wire::kVarint), p);
    p = wire::EncodeVarint(static_cast<uint64_t>(wait_micros_), p);
  }
  CHECK_EQ(static_cast<size_t>(p - out), total_);  // a sizing bug of ours, not input
  return absl::OkStatus();
}

}  // namespace ps
