// The data plane's protobuf messages (ps/v1/parameter_server.proto) encoded and decoded by
// hand: the same bytes a protobuf serializer writes, so that any client built from the .proto
// still talks to us, but payloads go to gRPC straight from the caller's buffers and come back
// straight into them, without a protobuf string in between (see docs/data-plane.md).
#ifndef PS_COMMON_WIRE_H_
#define PS_COMMON_WIRE_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ps::wire {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

size_t VarintSize(uint64_t v);
void PutVarint(uint64_t v, std::string* out);
// Writes v at p (VarintSize(v) bytes); returns the end.
char* EncodeVarint(uint64_t v, char* p);
inline void PutTag(uint32_t field, WireType type, std::string* out) {
  PutVarint((static_cast<uint64_t>(field) << 3) | type, out);
}
// A varint field; nothing for 0 (proto3 leaves defaults out). Negative int64s take 10 bytes.
void PutVarintField(uint32_t field, uint64_t v, std::string* out);
size_t VarintFieldSize(uint32_t field, uint64_t v);
// The tag and length of a length-delimited field whose `len` bytes the caller appends next.
void PutLengthPrefix(uint32_t field, size_t len, std::string* out);
// The whole field: tag, length and payload.
size_t LengthFieldSize(uint32_t field, size_t len);
// A float field (fixed32); nothing for 0 (but for -0).
void PutFloatField(uint32_t field, float v, std::string* out);
// The bytes PutFloatField writes.
size_t FloatFieldSize(uint32_t field, float v);
// A fixed64 field (little-endian); nothing for 0.
void PutFixed64Field(uint32_t field, uint64_t v, std::string* out);
// The bytes PutFixed64Field writes.
size_t Fixed64FieldSize(uint32_t field, uint64_t v);

// A message built from owned chunks and borrowed spans of the caller's memory, handed to gRPC as
// one ByteBuffer whose borrowed slices point at that memory (no copy). Not thread-safe.
class MessageBuilder {
 public:
  // Spans of at least this many bytes are borrowed; shorter ones are copied (a slice costs more
  // than copying a few hundred bytes).
  static constexpr size_t kMinBorrowBytes = 4096;

  // `on_released` runs once, when gRPC and every copy of the buffer let go of the last borrowed
  // span (on any thread, maybe gRPC's): until then the caller's memory must stay valid and
  // unchanged. It does not run if nothing was borrowed (check borrowed()).
  explicit MessageBuilder(std::function<void()> on_released);
  ~MessageBuilder();
  MessageBuilder(const MessageBuilder&) = delete;
  MessageBuilder& operator=(const MessageBuilder&) = delete;

  // The owned chunk being written: append protobuf framing and small payloads to it.
  std::string* out() { return &chunk_; }
  // Appends `n` bytes of `data`: borrowed if n >= kMinBorrowBytes, else copied.
  void Append(const void* data, size_t n);
  // The message; the builder is empty afterwards.
  grpc::ByteBuffer Finish();
  bool borrowed() const { return borrowed_ > 0; }
  size_t size() const { return size_ + chunk_.size(); }

 private:
  struct Release;
  void FlushChunk();

  std::string chunk_;
  std::vector<grpc::Slice> slices_;
  std::shared_ptr<Release> release_;  // shared by the borrowed slices
  size_t borrowed_ = 0;
  size_t size_ = 0;  // bytes in slices_
};

// Reads a message in place from the slices of a received grpc::ByteBuffer. Every read checks
// the bounds and answers false on a truncated or malformed message (never reads past it).
class SliceReader {
 public:
  // Takes the buffer's slices (references, not copies). False if the buffer is not readable.
  bool Reset(grpc::ByteBuffer* buffer);
  // Over one contiguous span (tests, fuzzers); `data` must outlive the reader.
  void Reset(absl::string_view data);

  // Bytes left before the current limit.
  size_t remaining() const { return limit_ - pos_; }
  bool done() const { return pos_ == limit_; }

  bool ReadVarint(uint64_t* v);
  // A field's tag; false at a malformed tag (field 0, wire types 3, 4, 6, 7, more than 5 bytes:
  // protobuf's parser refuses those too).
  bool ReadTag(uint32_t* field, WireType* type);
  // Skips a field's value of the given wire type.
  bool SkipField(WireType type);
  // A length prefix that fits in what is left (at most 5 bytes and below 2 GiB, as protobuf's).
  bool ReadLength(size_t* len);
  bool ReadFixed32(uint32_t* v);
  bool Copy(void* dst, size_t n);
  bool Skip(size_t n);
  // Reads the next n bytes into `*out` (replaced).
  bool ReadString(size_t n, std::string* out);
  // Calls fn(data, len) for each contiguous piece of the next n bytes, in order.
  bool ForEachPiece(size_t n, const std::function<void(const char*, size_t)>& fn);

  // Limits reading to the next `len` bytes (a nested message); returns the previous limit,
  // which PopLimit restores.
  size_t PushLimit(size_t len);
  void PopLimit(size_t old_limit) { limit_ = old_limit; }

 private:
  // A varint of at most 5 bytes whose fifth byte is at most `max_fifth_byte` (protobuf's rule
  // for tags and lengths); bits past 32 are dropped.
  bool ReadVarint32(int max_fifth_byte, uint32_t* v);
  // The piece at the cursor: pointer and contiguous bytes left in it.
  const char* Peek(size_t* avail);
  void Advance(size_t n);

  std::vector<grpc::Slice> slices_;
  std::vector<absl::string_view> pieces_;
  size_t piece_ = 0;         // current piece
  size_t piece_offset_ = 0;  // offset in it
  size_t pos_ = 0;           // bytes consumed in all
  size_t limit_ = 0;         // absolute position reads stop at
};

}  // namespace ps::wire

#endif  // PS_COMMON_WIRE_H_
