#include "common/wire.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <utility>

namespace ps::wire {

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

char* EncodeVarint(uint64_t v, char* p) {
  while (v >= 0x80) {
    *p++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

void PutVarint(uint64_t v, std::string* out) {
  char buf[10];
  out->append(buf, EncodeVarint(v, buf) - buf);
}

void PutVarintField(uint32_t field, uint64_t v, std::string* out) {
  if (v == 0) return;
  PutTag(field, kVarint, out);
  PutVarint(v, out);
}

size_t VarintFieldSize(uint32_t field, uint64_t v) {
  return v == 0 ? 0 : VarintSize(static_cast<uint64_t>(field) << 3) + VarintSize(v);
}

void PutLengthPrefix(uint32_t field, size_t len, std::string* out) {
  PutTag(field, kLengthDelimited, out);
  PutVarint(len, out);
}

size_t LengthFieldSize(uint32_t field, size_t len) {
  return VarintSize(static_cast<uint64_t>(field) << 3) + VarintSize(len) + len;
}

size_t FloatFieldSize(uint32_t field, float v) {
  if (v == 0.0f && !std::signbit(v)) return 0;
  return VarintSize(uint64_t{field} << 3) + sizeof(float);
}

void PutFloatField(uint32_t field, float v, std::string* out) {
  if (v == 0.0f && !std::signbit(v)) return;
  PutTag(field, kFixed32, out);
  char buf[4];
  std::memcpy(buf, &v, 4);
  out->append(buf, 4);
}

size_t Fixed64FieldSize(uint32_t field, uint64_t v) {
  return v == 0 ? 0 : VarintSize(uint64_t{field} << 3) + sizeof(uint64_t);
}

void PutFixed64Field(uint32_t field, uint64_t v, std::string* out) {
  if (v == 0) return;
  PutTag(field, kFixed64, out);
  char buf[8];
  std::memcpy(buf, &v, 8);  // little-endian hosts only (common/packed_bytes.h asserts it)
  out->append(buf, 8);
}

// ---------------------------------------------------------------------------------------------
// MessageBuilder

// Counts the borrowed slices still referenced; the last one out calls on_released.
struct MessageBuilder::Release {
  std::atomic<size_t> refs{0};
  std::function<void()> on_released;

  static void Unref(void* p) {
    auto* self = static_cast<std::shared_ptr<Release>*>(p);
    if ((*self)->refs.fetch_sub(1) == 1) (*self)->on_released();
    delete self;
  }
};

namespace {
void DeleteString(void* p) { delete static_cast<std::string*>(p); }
}  // namespace

MessageBuilder::MessageBuilder(std::function<void()> on_released)
    : release_(std::make_shared<Release>()) {
  release_->on_released = std::move(on_released);
}

MessageBuilder::~MessageBuilder() = default;

void MessageBuilder::FlushChunk() {
  if (chunk_.empty()) return;
  // The slice takes the string over: no copy.
  auto* owned = new std::string(std::move(chunk_));
  chunk_.clear();
  size_ += owned->size();
  slices_.emplace_back(owned->data(), owned->size(), &DeleteString, owned);
}

void MessageBuilder::Append(const void* data, size_t n) {
  if (n < kMinBorrowBytes) {
    chunk_.append(static_cast<const char*>(data), n);
    return;
  }
  FlushChunk();
  release_->refs.fetch_add(1);
  ++borrowed_;
  size_ += n;
  // gRPC never writes to a slice it sends; the constructor just takes a non-const pointer.
  slices_.emplace_back(const_cast<void*>(data), n, &Release::Unref,
                       new std::shared_ptr<Release>(release_));
}

grpc::ByteBuffer MessageBuilder::Finish() {
  FlushChunk();
  grpc::ByteBuffer buffer(slices_.data(), slices_.size());
  slices_.clear();  // the buffer holds its own references
  size_ = 0;
  return buffer;
}

// ---------------------------------------------------------------------------------------------
// SliceReader

bool SliceReader::Reset(grpc::ByteBuffer* buffer) {
  slices_.clear();
  pieces_.clear();
  piece_ = piece_offset_ = pos_ = limit_ = 0;
  if (!buffer->Dump(&slices_).ok()) return false;
  for (const grpc::Slice& s : slices_) {
    if (s.size() == 0) continue;
    pieces_.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
    limit_ += s.size();
  }
  return true;
}

void SliceReader::Reset(absl::string_view data) {
  slices_.clear();
  pieces_.clear();
  piece_ = piece_offset_ = pos_ = 0;
  limit_ = data.size();
  if (!data.empty()) pieces_.push_back(data);
}

const char* SliceReader::Peek(size_t* avail) {
  while (piece_ < pieces_.size() && piece_offset_ == pieces_[piece_].size()) {
    ++piece_;
    piece_offset_ = 0;
  }
  if (piece_ == pieces_.size()) {
    *avail = 0;
    return nullptr;
  }
  *avail = std::min(pieces_[piece_].size() - piece_offset_, remaining());
  return pieces_[piece_].data() + piece_offset_;
}

void SliceReader::Advance(size_t n) {
  pos_ += n;
  while (n > 0) {
    const size_t here = std::min(n, pieces_[piece_].size() - piece_offset_);
    piece_offset_ += here;
    n -= here;
    if (n > 0) {
      ++piece_;
      piece_offset_ = 0;
    }
  }
}

bool SliceReader::ReadVarint(uint64_t* v) {
  uint64_t result = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    size_t avail;
    const char* p = Peek(&avail);
    if (p == nullptr || avail == 0) return false;
    const uint8_t byte = static_cast<uint8_t>(*p);
    Advance(1);
    // The tenth byte may carry only the top bit.
    if (shift == 63 && byte > 1) return false;
    result |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) {
      *v = result;
      return true;
    }
  }
  return false;
}

bool SliceReader::ReadVarint32(int max_fifth_byte, uint32_t* v) {
  uint32_t result = 0;
  for (int i = 0; i < 5; ++i) {
    size_t avail;
    const char* p = Peek(&avail);
    if (p == nullptr || avail == 0) return false;
    const uint8_t byte = static_cast<uint8_t>(*p);
    Advance(1);
    if (i == 4 && byte > max_fifth_byte) return false;
    result |= static_cast<uint32_t>(byte & 0x7f) << (7 * i);  // bits past 32 are dropped
    if ((byte & 0x80) == 0) {
      *v = result;
      return true;
    }
  }
  return false;
}

bool SliceReader::ReadTag(uint32_t* field, WireType* type) {
  // As protobuf reads a tag: at most 5 bytes (a longer one is malformed, even if its value is
  // small), the bits past 32 dropped.
  uint32_t tag;
  if (!ReadVarint32(0x7f, &tag)) return false;
  *field = tag >> 3;
  const uint32_t t = tag & 7;
  if (*field == 0 || (t != kVarint && t != kFixed64 && t != kLengthDelimited && t != kFixed32)) {
    return false;
  }
  *type = static_cast<WireType>(t);
  return true;
}

bool SliceReader::ReadLength(size_t* len) {
  // As protobuf reads a length: at most 5 bytes, below 2 GiB.
  uint32_t v;
  if (!ReadVarint32(0x07, &v) || v > remaining()) return false;
  *len = static_cast<size_t>(v);
  return true;
}

bool SliceReader::SkipField(WireType type) {
  uint64_t v;
  size_t len;
  switch (type) {
    case kVarint:
      return ReadVarint(&v);
    case kFixed64:
      return Skip(8);
    case kFixed32:
      return Skip(4);
    case kLengthDelimited:
      return ReadLength(&len) && Skip(len);
  }
  return false;
}

bool SliceReader::ReadFixed32(uint32_t* v) { return Copy(v, 4); }

bool SliceReader::Copy(void* dst, size_t n) {
  if (n > remaining()) return false;
  char* d = static_cast<char*>(dst);
  while (n > 0) {
    size_t avail;
    const char* p = Peek(&avail);
    const size_t here = std::min(n, avail);
    std::memcpy(d, p, here);
    d += here;
    n -= here;
    Advance(here);
  }
  return true;
}

bool SliceReader::Skip(size_t n) {
  if (n > remaining()) return false;
  if (n > 0) Advance(n);
  return true;
}

bool SliceReader::ReadString(size_t n, std::string* out) {
  if (n > remaining()) return false;
  out->resize(n);
  return Copy(out->data(), n);
}

bool SliceReader::ForEachPiece(size_t n, const std::function<void(const char*, size_t)>& fn) {
  if (n > remaining()) return false;
  while (n > 0) {
    size_t avail;
    const char* p = Peek(&avail);
    const size_t here = std::min(n, avail);
    fn(p, here);
    n -= here;
    Advance(here);
  }
  return true;
}

size_t SliceReader::PushLimit(size_t len) {
  const size_t old = limit_;
  limit_ = pos_ + std::min(len, remaining());
  return old;
}

}  // namespace ps::wire
