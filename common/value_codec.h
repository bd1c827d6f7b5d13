// Compression of a KeyBlock's values on the wire (TableSpec.push_codec / pull_codec): the
// encodings of ps.v1.ValueCodec. Shared by the client (which encodes pushes and decodes pulls)
// and the servers (which decode pushes before they apply them and encode pull answers). The
// bytes are described in docs/data-plane.md#compression. A table's codec settings are checked
// with its other settings (common/table_features.h).
#ifndef PS_COMMON_VALUE_CODEC_H_
#define PS_COMMON_VALUE_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ps/v1/types.pb.h"

namespace ps {

// CODEC_SIGN and CODEC_INT8 send one float32 scale per this many values.
inline constexpr size_t kSignChunkValues = 256;
inline constexpr size_t kInt8ChunkValues = 256;

// "none", "fp16", "bf16", "topk", "sign", "int8" (the names of the client options), or "codec N"
// for a value this build does not know.
std::string CodecName(v1::ValueCodec codec);
// The inverse of CodecName; INVALID_ARGUMENT listing the known names for anything else.
absl::Status ParseCodecName(absl::string_view name, v1::ValueCodec* codec);

// True for the codecs whose decoded values differ from what was encoded by more than rounding
// (TOPK, SIGN): the client keeps their residual (error feedback).
inline bool KeepsResidual(v1::ValueCodec codec) {
  return codec == v1::CODEC_TOPK || codec == v1::CODEC_SIGN;
}

// Values a TOPK block of n values sends: ceil(ratio * n), at least 1 (0 for n = 0).
size_t TopkCount(size_t n, float ratio);
// Bytes of the encoding of n values.
size_t EncodedBytes(const v1::CodecSpec& spec, size_t n);

// Appends the encoding of `values` to `out`. With `residual` (room for values.size() floats; it
// may be values.data() itself), stores there what the encoding lost: values - decoded (error
// feedback; zeros for CODEC_NONE). CODEC_NONE appends the float32 bytes.
void EncodeValueBlock(const v1::CodecSpec& spec, absl::Span<const float> values, std::string* out,
                      float* residual = nullptr);
// The same, written at `out`: EncodedBytes(spec, values.size()) bytes.
void EncodeValueBlock(const v1::CodecSpec& spec, absl::Span<const float> values, char* out,
                      float* residual = nullptr);

// Decodes `bytes`, the values of a block of n floats encoded with `codec`, into out[0, n).
// INVALID_ARGUMENT, with `out` partly written, for a bad block: a length that is not the
// codec's for n values, TOPK indices out of range or not increasing, a non-finite TOPK value or
// SIGN or INT8 scale, a negative scale, set padding bits, an INT8 value of -128, an unknown
// codec.
absl::Status DecodeValueBlock(v1::ValueCodec codec, absl::string_view bytes, size_t n, float* out);

// Delta pulls (CodecSpec.delta): an answer block that holds only the values changed since the
// client's token. The bytes: uint32 n (the block's values), uint32 k, k uint32 indices into
// the block's values in increasing order, then the k values encoded with `spec` (as a block
// of k values).
size_t DeltaBlockBytes(const v1::CodecSpec& spec, size_t k);
// Writes DeltaBlockBytes(spec, indices.size()) bytes at `out` (`values`: the indices' values).
void EncodeDeltaBlock(const v1::CodecSpec& spec, size_t n, absl::Span<const uint32_t> indices,
                      absl::Span<const float> values, char* out);
// The indices and values of a delta block of a block of n values; INVALID_ARGUMENT for a bad
// one (a wrong n or length, indices out of range or not increasing, a bad encoding of the
// values).
absl::Status DecodeDeltaBlock(v1::ValueCodec codec, absl::string_view bytes, size_t n,
                              std::vector<uint32_t>* indices, std::vector<float>* values);

}  // namespace ps

#endif  // PS_COMMON_VALUE_CODEC_H_
