#include "common/value_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "common/half_block.h"
#include "common/status_macros.h"

namespace ps {
namespace {

template <typename T>
void WriteRaw(const T& v, char* out) {
  std::memcpy(out, &v, sizeof(v));
}

template <typename T>
T ReadRaw(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

size_t SignChunks(size_t n) { return (n + kSignChunkValues - 1) / kSignChunkValues; }
size_t Int8Chunks(size_t n) { return (n + kInt8ChunkValues - 1) / kInt8ChunkValues; }

// The largest INT8 scale: 127 x it stays finite (float32's largest / 127 would round to Inf).
// A chunk whose largest |value| is beyond 127 x this sends it as 127 x this.
constexpr float kMaxInt8Scale = 2.6e36f;

void EncodeHalves(v1::ValueCodec codec, absl::Span<const float> values, char* out,
                  float* residual) {
  FloatsToHalves(codec == v1::CODEC_FP16 ? HalfKind::kFp16 : HalfKind::kBf16, values.data(),
                 values.size(), out, residual);
}

// A value's magnitude as an order-preserving integer: its bits without the sign; a NaN counts as
// Inf (the largest; the servers refuse the block).
inline uint32_t MagnitudeKey(float v) { return std::min(FloatBits(v) & 0x7fffffffu, 0x7f800000u); }

// The key of the k-th largest magnitude of `values` (1 <= k <= n), and how many keys are larger:
// found by the keys' top 11 bits' histogram, then among the keys of the one bucket it falls in
// (two passes over the values, no sort).
struct Threshold {
  uint32_t key;
  size_t larger;
};

Threshold KthLargestKey(absl::Span<const float> values, size_t k) {
  constexpr int kShift = 20;  // keys are at most 0x7f800000: 2041 buckets
  std::vector<uint32_t> counts((0x7f800000u >> kShift) + 1, 0);
  for (float v : values) ++counts[MagnitudeKey(v) >> kShift];
  size_t above = 0;
  uint32_t bucket = static_cast<uint32_t>(counts.size() - 1);
  while (above + counts[bucket] < k) above += counts[bucket--];
  std::vector<uint32_t> keys;
  keys.reserve(counts[bucket]);
  for (float v : values) {
    const uint32_t key = MagnitudeKey(v);
    if (key >> kShift == bucket) keys.push_back(key);
  }
  const size_t rank = k - above - 1;  // 0-based, largest first, among the bucket's keys
  std::nth_element(keys.begin(), keys.begin() + rank, keys.end(), std::greater<uint32_t>());
  const uint32_t key = keys[rank];
  return {key, above + static_cast<size_t>(std::count_if(keys.begin(), keys.begin() + rank,
                                                         [&](uint32_t x) { return x > key; }))};
}

// Format: uint32 n (the block's values), uint32 k, then k uint32 indices (increasing), then k
// float32 values. The k values of largest magnitude are sent; of equal magnitudes, the lower
// indices (so the choice is unique).
void EncodeTopk(float ratio, absl::Span<const float> values, char* out, float* residual) {
  const size_t n = values.size();
  const size_t k = TopkCount(n, ratio);
  WriteRaw(static_cast<uint32_t>(n), out);
  WriteRaw(static_cast<uint32_t>(k), out + 4);
  char* idx = out + 8;
  char* val = idx + k * sizeof(uint32_t);
  if (residual != nullptr && residual != values.data()) {
    std::copy(values.begin(), values.end(), residual);
  }
  if (k == 0) return;
  const auto [threshold, larger] = KthLargestKey(values, k);
  size_t ties = k - larger;  // of the values at the threshold, the first `ties` are sent
  size_t j = 0;
  for (size_t i = 0; i < n && j < k; ++i) {
    const uint32_t key = MagnitudeKey(values[i]);
    if (key < threshold || (key == threshold && ties == 0)) continue;
    if (key == threshold) --ties;
    const uint32_t i32 = static_cast<uint32_t>(i);
    const float v = values[i];
    std::memcpy(idx + j * sizeof(uint32_t), &i32, sizeof(i32));
    std::memcpy(val + j * sizeof(float), &v, sizeof(v));
    if (residual != nullptr) residual[i] = 0.0f;
    ++j;
  }
}

// Format: one float32 scale per kSignChunkValues values (mean |value| of the chunk), then one bit
// per value (bit i % 8 of byte i / 8), set for a negative value; decoded: +-scale.
void EncodeSign(absl::Span<const float> values, char* out, float* residual) {
  const size_t n = values.size();
  std::vector<float> scales(SignChunks(n));
  for (size_t c = 0; c < scales.size(); ++c) {
    const size_t begin = c * kSignChunkValues, end = std::min(n, begin + kSignChunkValues);
    double sum = 0;
    for (size_t i = begin; i < end; ++i) sum += std::fabs(values[i]);
    scales[c] = static_cast<float>(sum / static_cast<double>(end - begin));
    WriteRaw(scales[c], out + c * sizeof(float));
  }
  char* bits = out + scales.size() * sizeof(float);
  std::memset(bits, 0, (n + 7) / 8);
  for (size_t i = 0; i < n; ++i) {
    const bool negative = std::signbit(values[i]) && values[i] != 0.0f;
    if (negative) bits[i / 8] = static_cast<char>(bits[i / 8] | (1 << (i % 8)));
    if (residual != nullptr) {
      const float scale = scales[i / kSignChunkValues];
      residual[i] = values[i] - (negative ? -scale : scale);
    }
  }
}

// Format: one float32 scale per kInt8ChunkValues values (the chunk's max |value| / 127, at most
// kMaxInt8Scale), then one int8 per value, round(value / scale) in -127..127; decoded: int8 x
// scale. A chunk with a non-finite value gets a NaN scale (refused by the decoder).
void EncodeInt8(absl::Span<const float> values, char* out, float* residual) {
  const size_t n = values.size(), chunks = Int8Chunks(n);
  char* const scales = out;
  char* const q = scales + chunks * sizeof(float);
  // Adding and taking away 1.5 x 2^23 rounds a float of magnitude under 2^22 to an integer,
  // to nearest even, as nearbyint does: without a call, in loops the compiler vectorizes.
  constexpr float kRound = 12582912.0f;
  for (size_t c = 0; c < chunks; ++c) {
    const size_t begin = c * kInt8ChunkValues, end = std::min(n, begin + kInt8ChunkValues);
    const float* v = values.data() + begin;
    const size_t len = end - begin;
    float max_abs = 0.0f, probe = 0.0f;  // probe: NaN if a value is NaN or infinite
    for (size_t i = 0; i < len; ++i) {
      const float m = std::fabs(v[i]);
      max_abs = m > max_abs ? m : max_abs;
      probe += v[i] * 0.0f;
    }
    const bool finite = probe == probe;
    const float scale = finite ? std::min(max_abs / 127.0f, kMaxInt8Scale)
                               : std::numeric_limits<float>::quiet_NaN();
    std::memcpy(scales + c * sizeof(float), &scale, sizeof(scale));
    // Divided, not multiplied by an inverse: 1 / scale overflows for a subnormal scale. A chunk
    // of zeros (scale 0) or with a NaN or Inf sends zeros.
    const bool levels = finite && scale > 0.0f;
    const float divisor = levels ? scale : 1.0f;
    int8_t* level = reinterpret_cast<int8_t*>(q + begin);
    for (size_t i = 0; i < len; ++i) {
      float r = levels ? (v[i] / divisor + kRound) - kRound : 0.0f;
      r = r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r);
      level[i] = static_cast<int8_t>(static_cast<int>(r));
    }
    if (residual != nullptr) {
      float* res = residual + begin;
      for (size_t i = 0; i < len; ++i) res[i] = v[i] - static_cast<float>(level[i]) * scale;
    }
  }
}

absl::Status WrongLength(v1::ValueCodec codec, size_t got, size_t want, size_t n) {
  return absl::InvalidArgumentError(absl::StrCat("a ", CodecName(codec), " block of ", n,
                                                 " values is ", got, " bytes, not ", want));
}

// An index of a topk or delta block (`what`): below n and above the one before (`*last`, -1
// for the first), which it then becomes.
absl::Status CheckNextIndex(const char* what, uint32_t i, size_t n, int64_t* last) {
  if (i >= n || static_cast<int64_t>(i) <= *last) {
    return absl::InvalidArgumentError(absl::StrCat("a ", what, " block's index ", i,
                                                   " is out of range (", n,
                                                   " values) or not above the one before"));
  }
  *last = i;
  return absl::OkStatus();
}

absl::Status DecodeTopk(absl::string_view bytes, size_t n, float* out) {
  if (bytes.size() < 8) return WrongLength(v1::CODEC_TOPK, bytes.size(), 8, n);
  const uint32_t total = ReadRaw<uint32_t>(bytes.data());
  if (total != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("a topk block of ", total, " values where the keys have ", n));
  }
  const uint32_t k = ReadRaw<uint32_t>(bytes.data() + 4);
  if (k > n)
    return absl::InvalidArgumentError(absl::StrCat("a topk block sends ", k, " of ", n, " values"));
  const size_t want = 8 + size_t{k} * 8;
  if (bytes.size() != want) return WrongLength(v1::CODEC_TOPK, bytes.size(), want, n);
  std::fill(out, out + n, 0.0f);
  const char* idx = bytes.data() + 8;
  const char* val = idx + size_t{k} * sizeof(uint32_t);
  int64_t last = -1;
  for (size_t j = 0; j < k; ++j) {
    const uint32_t i = ReadRaw<uint32_t>(idx + j * sizeof(uint32_t));
    PS_RETURN_IF_ERROR(CheckNextIndex("topk", i, n, &last));
    const float v = ReadRaw<float>(val + j * sizeof(float));
    if (!std::isfinite(v))
      return absl::InvalidArgumentError(absl::StrCat("a topk block's value ", j, " is ", v));
    out[i] = v;
  }
  return absl::OkStatus();
}

absl::Status DecodeSign(absl::string_view bytes, size_t n, float* out) {
  const size_t chunks = SignChunks(n);
  const size_t want = chunks * sizeof(float) + (n + 7) / 8;
  if (bytes.size() != want) return WrongLength(v1::CODEC_SIGN, bytes.size(), want, n);
  const char* bits = bytes.data() + chunks * sizeof(float);
  if (n % 8 != 0 && (static_cast<unsigned char>(bits[n / 8]) >> (n % 8)) != 0) {
    return absl::InvalidArgumentError("a sign block has padding bits set past its last value");
  }
  for (size_t c = 0; c < chunks; ++c) {
    const float scale = ReadRaw<float>(bytes.data() + c * sizeof(float));
    if (!std::isfinite(scale) || scale < 0.0f) {
      return absl::InvalidArgumentError(
          absl::StrCat("a sign block's scale ", c, " is ", scale, " (must be finite and >= 0)"));
    }
    const size_t end = std::min(n, (c + 1) * kSignChunkValues);
    for (size_t i = c * kSignChunkValues; i < end; ++i) {
      out[i] = (static_cast<unsigned char>(bits[i / 8]) >> (i % 8)) & 1 ? -scale : scale;
    }
  }
  return absl::OkStatus();
}

absl::Status DecodeInt8(absl::string_view bytes, size_t n, float* out) {
  const size_t chunks = Int8Chunks(n);
  const size_t want = chunks * sizeof(float) + n;
  if (bytes.size() != want) return WrongLength(v1::CODEC_INT8, bytes.size(), want, n);
  const char* q = bytes.data() + chunks * sizeof(float);
  for (size_t c = 0; c < chunks; ++c) {
    const float scale = ReadRaw<float>(bytes.data() + c * sizeof(float));
    // 127 x scale must be finite too.
    if (!(scale >= 0.0f && scale <= kMaxInt8Scale)) {  // NaN fails too
      return absl::InvalidArgumentError(
          absl::StrCat("an int8 block's scale ", c, " is ", scale, " (must be in [0, 2.6e36])"));
    }
    const size_t begin = c * kInt8ChunkValues, end = std::min(n, begin + kInt8ChunkValues);
    bool lowest = false;
    for (size_t i = begin; i < end; ++i) {
      const auto level = static_cast<int8_t>(q[i]);
      lowest |= level == -128;
      out[i] = static_cast<float>(level) * scale;
    }
    if (lowest) {
      return absl::InvalidArgumentError(
          absl::StrCat("an int8 block holds -128 in chunk ", c, " (the codec writes -127..127)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string CodecName(v1::ValueCodec codec) {
  switch (codec) {
    case v1::CODEC_NONE:
      return "none";
    case v1::CODEC_FP16:
      return "fp16";
    case v1::CODEC_BF16:
      return "bf16";
    case v1::CODEC_TOPK:
      return "topk";
    case v1::CODEC_SIGN:
      return "sign";
    case v1::CODEC_INT8:
      return "int8";
    default:
      return absl::StrCat("codec ", static_cast<int>(codec));
  }
}

absl::Status ParseCodecName(absl::string_view name, v1::ValueCodec* codec) {
  for (v1::ValueCodec c : {v1::CODEC_NONE, v1::CODEC_FP16, v1::CODEC_BF16, v1::CODEC_TOPK,
                           v1::CODEC_SIGN, v1::CODEC_INT8}) {
    if (name == CodecName(c)) {
      *codec = c;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown codec '", name, "' (none, fp16, bf16, topk, sign, int8)"));
}

size_t TopkCount(size_t n, float ratio) {
  if (n == 0) return 0;
  const double k = std::ceil(static_cast<double>(ratio) * static_cast<double>(n));
  return std::clamp<size_t>(static_cast<size_t>(k), 1, n);
}

size_t EncodedBytes(const v1::CodecSpec& spec, size_t n) {
  switch (spec.codec()) {
    case v1::CODEC_FP16:
    case v1::CODEC_BF16:
      return n * sizeof(uint16_t);
    case v1::CODEC_TOPK:
      return 8 + TopkCount(n, spec.ratio()) * 8;
    case v1::CODEC_SIGN:
      return SignChunks(n) * sizeof(float) + (n + 7) / 8;
    case v1::CODEC_INT8:
      return Int8Chunks(n) * sizeof(float) + n;
    default:
      return n * sizeof(float);
  }
}

void EncodeValueBlock(const v1::CodecSpec& spec, absl::Span<const float> values, char* out,
                      float* residual) {
  switch (spec.codec()) {
    case v1::CODEC_FP16:
    case v1::CODEC_BF16:
      return EncodeHalves(spec.codec(), values, out, residual);
    case v1::CODEC_TOPK:
      return EncodeTopk(spec.ratio(), values, out, residual);
    case v1::CODEC_SIGN:
      return EncodeSign(values, out, residual);
    case v1::CODEC_INT8:
      return EncodeInt8(values, out, residual);
    default:
      if (!values.empty()) std::memcpy(out, values.data(), values.size() * sizeof(float));
      if (residual != nullptr) std::fill(residual, residual + values.size(), 0.0f);
  }
}

void EncodeValueBlock(const v1::CodecSpec& spec, absl::Span<const float> values, std::string* out,
                      float* residual) {
  const size_t at = out->size();
  out->resize(at + EncodedBytes(spec, values.size()));
  EncodeValueBlock(spec, values, out->data() + at, residual);
}

size_t DeltaBlockBytes(const v1::CodecSpec& spec, size_t k) {
  return 8 + k * sizeof(uint32_t) + EncodedBytes(spec, k);
}

void EncodeDeltaBlock(const v1::CodecSpec& spec, size_t n, absl::Span<const uint32_t> indices,
                      absl::Span<const float> values, char* out) {
  const uint32_t header[2] = {static_cast<uint32_t>(n), static_cast<uint32_t>(indices.size())};
  std::memcpy(out, header, sizeof(header));
  out += sizeof(header);
  if (!indices.empty()) std::memcpy(out, indices.data(), indices.size() * sizeof(uint32_t));
  out += indices.size() * sizeof(uint32_t);
  EncodeValueBlock(spec, values, out);
}

absl::Status DecodeDeltaBlock(v1::ValueCodec codec, absl::string_view bytes, size_t n,
                              std::vector<uint32_t>* indices, std::vector<float>* values) {
  if (bytes.size() < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("a delta block of ", bytes.size(), " bytes (at least 8)"));
  }
  const uint32_t total = ReadRaw<uint32_t>(bytes.data());
  if (total != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("a delta block of ", total, " values where the keys have ", n));
  }
  const uint32_t k = ReadRaw<uint32_t>(bytes.data() + 4);
  if (k > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("a delta block sends ", k, " of ", n, " values"));
  }
  v1::CodecSpec spec;
  spec.set_codec(codec);
  const size_t want = DeltaBlockBytes(spec, k);
  if (bytes.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat("a delta block of ", k, " ", CodecName(codec),
                                                   " values has ", bytes.size(), " bytes, not ",
                                                   want));
  }
  indices->resize(k);
  const char* idx = bytes.data() + 8;
  int64_t last = -1;
  for (size_t j = 0; j < k; ++j) {
    const uint32_t i = ReadRaw<uint32_t>(idx + j * sizeof(uint32_t));
    PS_RETURN_IF_ERROR(CheckNextIndex("delta", i, n, &last));
    (*indices)[j] = i;
  }
  values->resize(k);
  const char* encoded = idx + size_t{k} * sizeof(uint32_t);
  return DecodeValueBlock(codec, absl::string_view(encoded, bytes.data() + bytes.size() - encoded),
                          k, values->data());
}

absl::Status DecodeValueBlock(v1::ValueCodec codec, absl::string_view bytes, size_t n, float* out) {
  switch (codec) {
    case v1::CODEC_NONE:
      if (bytes.size() != n * sizeof(float)) return WrongLength(codec, bytes.size(), n * 4, n);
      if (n > 0) std::memcpy(out, bytes.data(), bytes.size());  // out may be null for n = 0
      return absl::OkStatus();
    case v1::CODEC_FP16:
    case v1::CODEC_BF16:
      if (bytes.size() != n * sizeof(uint16_t)) return WrongLength(codec, bytes.size(), n * 2, n);
      HalvesToFloats(codec == v1::CODEC_FP16 ? HalfKind::kFp16 : HalfKind::kBf16, bytes.data(), n,
                     out);
      return absl::OkStatus();
    case v1::CODEC_TOPK:
      if (n > UINT32_MAX)
        return absl::InvalidArgumentError("a topk block holds at most 2^32 - 1 values");
      return DecodeTopk(bytes, n, out);
    case v1::CODEC_SIGN:
      return DecodeSign(bytes, n, out);
    case v1::CODEC_INT8:
      return DecodeInt8(bytes, n, out);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown value codec ", static_cast<int>(codec)));
  }
}

}  // namespace ps
