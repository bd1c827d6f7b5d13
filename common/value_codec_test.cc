#include "common/value_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/half.h"

namespace ps {
namespace {

v1::CodecSpec Spec(v1::ValueCodec codec, float ratio = 0.0f) {
  v1::CodecSpec s;
  s.set_codec(codec);
  s.set_ratio(ratio);
  return s;
}

std::vector<float> RandomValues(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<float> Decode(v1::ValueCodec codec, const std::string& bytes, size_t n) {
  std::vector<float> out(n, -1.0f);
  EXPECT_TRUE(DecodeValueBlock(codec, bytes, n, out.data()).ok());
  return out;
}

TEST(ValueCodecTest, HalvesRoundTripBitExactlyAsHalfH) {
  const std::vector<float> v = RandomValues(1000, 1);
  for (v1::ValueCodec codec : {v1::CODEC_FP16, v1::CODEC_BF16}) {
    std::string bytes;
    std::vector<float> residual(v.size());
    EncodeValueBlock(Spec(codec), v, &bytes, residual.data());
    ASSERT_EQ(bytes.size(), v.size() * 2);
    ASSERT_EQ(bytes.size(), EncodedBytes(Spec(codec), v.size()));
    const std::vector<float> d = Decode(codec, bytes, v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const float want =
          codec == v1::CODEC_FP16 ? Fp16ToFloat(FloatToFp16(v[i])) : Bf16ToFloat(FloatToBf16(v[i]));
      ASSERT_EQ(d[i], want);
      ASSERT_EQ(residual[i], v[i] - d[i]);
    }
  }
}

TEST(ValueCodecTest, NoneIsFloat32Bytes) {
  const std::vector<float> v = RandomValues(10, 2);
  std::string bytes;
  EncodeValueBlock(Spec(v1::CODEC_NONE), v, &bytes);
  ASSERT_EQ(bytes.size(), 40u);
  EXPECT_EQ(std::memcmp(bytes.data(), v.data(), 40), 0);
  EXPECT_EQ(Decode(v1::CODEC_NONE, bytes, 10), v);
}

TEST(ValueCodecTest, TopkSendsTheLargestValuesAndKeepsTheRest) {
  const std::vector<float> v = {0.1f, -5.0f, 0.2f, 3.0f, -0.3f, 0.0f, 1.0f, -0.05f};
  std::string bytes;
  std::vector<float> residual(v.size());
  EncodeValueBlock(Spec(v1::CODEC_TOPK, 0.25f), v, &bytes, residual.data());  // k = 2
  ASSERT_EQ(bytes.size(), 8u + 2 * 8);
  const std::vector<float> d = Decode(v1::CODEC_TOPK, bytes, v.size());
  EXPECT_EQ(d, (std::vector<float>{0, -5.0f, 0, 3.0f, 0, 0, 0, 0}));
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(residual[i] + d[i], v[i]) << i;
}

// What topk sends, by definition: the k values of largest magnitude (NaN as Inf), of equal
// magnitudes the lower indices, in increasing index order. A full sort: the reference for the
// encoder's histogram selection.
std::vector<uint32_t> TopkReference(const std::vector<float>& v, size_t k) {
  std::vector<uint32_t> idx(v.size());
  for (uint32_t i = 0; i < idx.size(); ++i) idx[i] = i;
  auto magnitude = [&](uint32_t i) {
    return std::isnan(v[i]) ? std::numeric_limits<float>::infinity() : std::fabs(v[i]);
  };
  std::sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) {
    return magnitude(a) > magnitude(b) || (magnitude(a) == magnitude(b) && a < b);
  });
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

TEST(ValueCodecTest, TopkPicksExactlyTheLargestWithTiesToTheLowerIndex) {
  std::mt19937 rng(11);
  for (size_t n : {1, 7, 8, 1000, 65537}) {
    for (int shape = 0; shape < 4; ++shape) {
      std::vector<float> v = RandomValues(n, static_cast<uint32_t>(n + shape));
      for (float& x : v) {
        if (shape == 1) x = std::round(x * 2.0f) / 2.0f;  // a few levels: many ties, zeros
        if (shape == 2) x = rng() % 10 == 0 ? x : 0.0f;   // mostly zeros (and -0 never)
        if (shape == 3) x *= 1e-30f;                      // float32 subnormals among them
      }
      if (shape == 1 && n > 8) {
        v[3] = std::numeric_limits<float>::quiet_NaN();
        v[5] = -std::numeric_limits<float>::infinity();
        v[n - 1] = std::numeric_limits<float>::infinity();
      }
      for (float ratio : {0.001f, 0.01f, 0.3f, 1.0f}) {
        const size_t k = TopkCount(n, ratio);
        std::string bytes;
        std::vector<float> residual(n);
        EncodeValueBlock(Spec(v1::CODEC_TOPK, ratio), v, &bytes, residual.data());
        ASSERT_EQ(bytes.size(), 8 + 8 * k);
        std::vector<uint32_t> idx(k);
        std::memcpy(idx.data(), bytes.data() + 8, 4 * k);
        ASSERT_EQ(idx, TopkReference(v, k))
            << "n " << n << " shape " << shape << " ratio " << ratio;
        for (size_t j = 0; j < k; ++j) {
          float sent;
          std::memcpy(&sent, bytes.data() + 8 + 4 * k + 4 * j, 4);
          ASSERT_EQ(FloatBits(sent), FloatBits(v[idx[j]]));
        }
        size_t zeroed = 0;
        for (size_t i = 0, j = 0; i < n; ++i) {
          const bool taken = j < k && idx[j] == i;
          j += taken;
          zeroed += taken;
          if (taken) {
            ASSERT_EQ(residual[i], 0.0f);
          } else {
            ASSERT_EQ(FloatBits(residual[i]), FloatBits(v[i])) << i;
          }
        }
        ASSERT_EQ(zeroed, k);
      }
    }
  }
}

TEST(ValueCodecTest, TopkCountRoundsUpAndSendsAtLeastOne) {
  EXPECT_EQ(TopkCount(0, 0.5f), 0u);
  EXPECT_EQ(TopkCount(1000, 0.01f), 10u);
  EXPECT_EQ(TopkCount(1001, 0.01f), 11u);
  EXPECT_EQ(TopkCount(10, 0.001f), 1u);
  EXPECT_EQ(TopkCount(10, 1.0f), 10u);
}

TEST(ValueCodecTest, SignSendsScaledSignsPerChunk) {
  std::vector<float> v = RandomValues(kSignChunkValues + 3, 3);
  std::string bytes;
  std::vector<float> residual(v.size());
  EncodeValueBlock(Spec(v1::CODEC_SIGN), v, &bytes, residual.data());
  ASSERT_EQ(bytes.size(), 2 * 4 + (v.size() + 7) / 8);
  ASSERT_EQ(bytes.size(), EncodedBytes(Spec(v1::CODEC_SIGN), v.size()));
  const std::vector<float> d = Decode(v1::CODEC_SIGN, bytes, v.size());
  double mean0 = 0;
  for (size_t i = 0; i < kSignChunkValues; ++i) mean0 += std::fabs(v[i]);
  mean0 /= kSignChunkValues;
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(std::signbit(d[i]), v[i] < 0) << i;
    EXPECT_FLOAT_EQ(residual[i], v[i] - d[i]);
  }
  EXPECT_NEAR(std::fabs(d[0]), mean0, 1e-5);
}

TEST(ValueCodecTest, Int8SendsAByteAValueAndAScalePerChunk) {
  std::vector<float> v = RandomValues(kInt8ChunkValues + 5, 9);
  v[7] = 0.0f;
  for (size_t i = kInt8ChunkValues; i < v.size(); ++i) v[i] = 0.0f;  // an all-zero chunk
  std::string bytes;
  std::vector<float> residual(v.size());
  EncodeValueBlock(Spec(v1::CODEC_INT8), v, &bytes, residual.data());
  ASSERT_EQ(bytes.size(), 2 * 4 + v.size());
  ASSERT_EQ(bytes.size(), EncodedBytes(Spec(v1::CODEC_INT8), v.size()));
  float max_abs = 0;
  for (size_t i = 0; i < kInt8ChunkValues; ++i) max_abs = std::max(max_abs, std::fabs(v[i]));
  float scale;
  std::memcpy(&scale, bytes.data(), 4);
  EXPECT_EQ(scale, max_abs / 127.0f);
  const std::vector<float> d = Decode(v1::CODEC_INT8, bytes, v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_LE(std::fabs(d[i] - v[i]), 0.5f * scale * 1.0001f) << i;  // rounded to the nearest
    ASSERT_EQ(residual[i], v[i] - d[i]) << i;
  }
  EXPECT_EQ(d[7], 0.0f);
  for (size_t i = kInt8ChunkValues; i < v.size(); ++i) EXPECT_EQ(d[i], 0.0f);
  size_t extreme = 0;  // the largest |value| of the chunk is sent exactly as +-127 x scale
  for (size_t i = 0; i < kInt8ChunkValues; ++i) {
    const auto level = static_cast<int8_t>(bytes[8 + i]);
    ASSERT_GE(level, -127);
    extreme += std::abs(level) == 127;
  }
  EXPECT_GE(extreme, 1u);
}

// Error feedback: what one step does not send is added to the next one's gradient, so that over
// many steps the sum of what was sent approaches the sum of the gradients.
TEST(ValueCodecTest, ErrorFeedbackSendsWhatWasHeldBack) {
  for (v1::CodecSpec spec : {Spec(v1::CODEC_TOPK, 0.1f), Spec(v1::CODEC_SIGN)}) {
    const size_t n = 512;
    std::vector<float> residual(n, 0.0f), sent_sum(n, 0.0f), grad_sum(n, 0.0f);
    for (int step = 0; step < 200; ++step) {
      const std::vector<float> g = RandomValues(n, 100 + step);
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i) {
        x[i] = g[i] + residual[i];
        grad_sum[i] += g[i];
      }
      std::string bytes;
      EncodeValueBlock(spec, x, &bytes, residual.data());
      const std::vector<float> d = Decode(spec.codec(), bytes, n);
      for (size_t i = 0; i < n; ++i) {
        sent_sum[i] += d[i];
        // The invariant: gradients so far = what was sent + the residual.
        ASSERT_NEAR(grad_sum[i], sent_sum[i] + residual[i], 1e-3) << CodecName(spec.codec());
      }
    }
    double err = 0, norm = 0;
    for (size_t i = 0; i < n; ++i) {
      err += std::fabs(grad_sum[i] - sent_sum[i]);
      norm += std::fabs(grad_sum[i]);
    }
    EXPECT_LT(err, 0.5 * norm) << CodecName(spec.codec()) << ": the residual stays bounded";
  }
}

absl::Status DecodeBytes(v1::ValueCodec codec, const std::string& bytes, size_t n) {
  std::vector<float> out(n);
  return DecodeValueBlock(codec, bytes, n, out.data());
}

TEST(ValueCodecTest, RejectsBlocksOfTheWrongLength) {
  const std::vector<float> v = RandomValues(300, 4);
  for (v1::CodecSpec spec :
       {Spec(v1::CODEC_NONE), Spec(v1::CODEC_FP16), Spec(v1::CODEC_BF16),
        Spec(v1::CODEC_TOPK, 0.1f), Spec(v1::CODEC_SIGN), Spec(v1::CODEC_INT8)}) {
    std::string bytes;
    EncodeValueBlock(spec, v, &bytes);
    ASSERT_TRUE(DecodeBytes(spec.codec(), bytes, v.size()).ok());
    EXPECT_FALSE(DecodeBytes(spec.codec(), bytes + "x", v.size()).ok()) << CodecName(spec.codec());
    EXPECT_FALSE(DecodeBytes(spec.codec(), bytes.substr(0, bytes.size() - 1), v.size()).ok());
    EXPECT_FALSE(DecodeBytes(spec.codec(), bytes, v.size() + 8).ok()) << CodecName(spec.codec());
  }
  EXPECT_FALSE(DecodeBytes(v1::CODEC_TOPK, "", 10).ok());
  // An empty block of every codec (found by fuzz_codecs: a null destination for no values).
  for (v1::ValueCodec codec :
       {v1::CODEC_NONE, v1::CODEC_FP16, v1::CODEC_BF16, v1::CODEC_SIGN, v1::CODEC_INT8}) {
    EXPECT_TRUE(DecodeValueBlock(codec, "", 0, nullptr).ok()) << CodecName(codec);
    std::string bytes;
    EncodeValueBlock(Spec(codec), {}, &bytes);
    EXPECT_EQ(bytes, "") << CodecName(codec);
  }
}

void PutU32(std::string* bytes, size_t at, uint32_t v) { std::memcpy(&(*bytes)[at], &v, 4); }
void PutF32(std::string* bytes, size_t at, float v) { std::memcpy(&(*bytes)[at], &v, 4); }

TEST(ValueCodecTest, RejectsTopkIndicesOutOfRangeOrUnordered) {
  const std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8};
  std::string good;
  EncodeValueBlock(Spec(v1::CODEC_TOPK, 0.25f), v, &good);  // n, k, indices 6, 7, values
  ASSERT_TRUE(DecodeBytes(v1::CODEC_TOPK, good, 8).ok());
  std::string bad = good;
  PutU32(&bad, 12, 8);  // index past the block
  EXPECT_FALSE(DecodeBytes(v1::CODEC_TOPK, bad, 8).ok());
  bad = good;
  PutU32(&bad, 12, 6);  // a repeated index
  EXPECT_FALSE(DecodeBytes(v1::CODEC_TOPK, bad, 8).ok());
  bad = good;
  PutU32(&bad, 4, 9);  // more values than the block has
  EXPECT_FALSE(DecodeBytes(v1::CODEC_TOPK, bad, 8).ok());
  bad = good;
  PutF32(&bad, 16, std::numeric_limits<float>::quiet_NaN());
  EXPECT_FALSE(DecodeBytes(v1::CODEC_TOPK, bad, 8).ok());
}

TEST(ValueCodecTest, RejectsBadSignScalesAndPaddingBits) {
  const std::vector<float> v = RandomValues(10, 5);
  std::string good;
  EncodeValueBlock(Spec(v1::CODEC_SIGN), v, &good);
  for (float scale :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -1.0f}) {
    std::string bad = good;
    PutF32(&bad, 0, scale);
    EXPECT_FALSE(DecodeBytes(v1::CODEC_SIGN, bad, 10).ok()) << scale;
  }
  std::string bad = good;
  bad.back() = static_cast<char>(bad.back() | 0x80);  // bit 15 of a 10-value block
  EXPECT_FALSE(DecodeBytes(v1::CODEC_SIGN, bad, 10).ok());
  EXPECT_FALSE(DecodeBytes(static_cast<v1::ValueCodec>(9), good, 10).ok());
}

TEST(ValueCodecTest, RejectsBadInt8ScalesAndMinus128) {
  const std::vector<float> v = RandomValues(kInt8ChunkValues + 10, 6);
  std::string good;
  EncodeValueBlock(Spec(v1::CODEC_INT8), v, &good);
  ASSERT_TRUE(DecodeBytes(v1::CODEC_INT8, good, v.size()).ok());
  for (float scale : {std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity(), -1.0f, 3.4e36f}) {
    std::string bad = good;
    PutF32(&bad, 4, scale);  // the second chunk's; 3.4e36 x 127 is Inf (found by fuzz_codecs)
    const absl::Status s = DecodeBytes(v1::CODEC_INT8, bad, v.size());
    EXPECT_NE(s.message().find("scale 1"), std::string::npos) << scale << " " << s;
  }
  std::string bad = good;
  bad.back() = static_cast<char>(-128);
  EXPECT_FALSE(DecodeBytes(v1::CODEC_INT8, bad, v.size()).ok());
  // A value that is not finite gives its chunk a NaN scale: refused where it is decoded.
  // Tiny values (a subnormal scale, whose inverse is not finite) and zeros beside them.
  std::vector<float> tiny(v.size(), 0.0f);
  tiny[1] = 1e-44f;
  tiny[2] = -3e-45f;
  std::string small;
  EncodeValueBlock(Spec(v1::CODEC_INT8), tiny, &small);
  std::vector<float> back(v.size());
  ASSERT_TRUE(DecodeValueBlock(v1::CODEC_INT8, small, v.size(), back.data()).ok());
  EXPECT_EQ(back[0], 0.0f);
  EXPECT_NEAR(back[1], 1e-44f, 1e-44f);  // the scale, 1e-44 / 127, rounds to 0: zeros are sent
  std::vector<float> largest(v.size(), 1.0f);
  largest[7] = -std::numeric_limits<float>::max();  // the largest scale the encoder writes
  std::string edge;
  EncodeValueBlock(Spec(v1::CODEC_INT8), largest, &edge);
  std::vector<float> decoded(v.size());
  ASSERT_TRUE(DecodeValueBlock(v1::CODEC_INT8, edge, v.size(), decoded.data()).ok());
  EXPECT_TRUE(std::isfinite(decoded[7]));
  std::vector<float> inf = v;
  inf[3] = std::numeric_limits<float>::infinity();
  std::string encoded;
  EncodeValueBlock(Spec(v1::CODEC_INT8), inf, &encoded);
  EXPECT_FALSE(DecodeBytes(v1::CODEC_INT8, encoded, v.size()).ok());
}

TEST(ValueCodecTest, DeltaBlocksRoundTripInEveryPullCodec) {
  const std::vector<uint32_t> indices = {0, 7, 300, 999};
  const std::vector<float> values = {1.5f, -2.0f, 0.25f, 3.0f};
  for (v1::ValueCodec codec : {v1::CODEC_NONE, v1::CODEC_FP16, v1::CODEC_BF16, v1::CODEC_INT8}) {
    SCOPED_TRACE(CodecName(codec));
    std::string bytes(DeltaBlockBytes(Spec(codec), indices.size()), '\0');
    EncodeDeltaBlock(Spec(codec), 1000, indices, values, bytes.data());
    EXPECT_EQ(bytes.size(), 8 + 4 * 4 + EncodedBytes(Spec(codec), 4));
    std::vector<uint32_t> got_indices;
    std::vector<float> got;
    ASSERT_TRUE(DecodeDeltaBlock(codec, bytes, 1000, &got_indices, &got).ok());
    EXPECT_EQ(got_indices, indices);
    ASSERT_EQ(got.size(), values.size());
    for (size_t j = 0; j < values.size(); ++j) {
      EXPECT_NEAR(got[j], values[j], codec == v1::CODEC_INT8 ? 3.0f / 254 : 0.0f) << j;
    }
    // Nothing changed: 8 bytes.
    std::string empty(DeltaBlockBytes(Spec(codec), 0), '\0');
    EncodeDeltaBlock(Spec(codec), 1000, {}, {}, empty.data());
    EXPECT_EQ(empty.size(), 8u);
    ASSERT_TRUE(DecodeDeltaBlock(codec, empty, 1000, &got_indices, &got).ok());
    EXPECT_TRUE(got_indices.empty());
  }
}

TEST(ValueCodecTest, RejectsBadDeltaBlocks) {
  std::string good(DeltaBlockBytes(Spec(v1::CODEC_NONE), 2), '\0');
  EncodeDeltaBlock(Spec(v1::CODEC_NONE), 10, std::vector<uint32_t>{2, 5},
                   std::vector<float>{1.0f, 2.0f}, good.data());
  std::vector<uint32_t> idx;
  std::vector<float> v;
  ASSERT_TRUE(DecodeDeltaBlock(v1::CODEC_NONE, good, 10, &idx, &v).ok());
  auto with_word = [&](size_t at, uint32_t word) {
    std::string bad = good;
    std::memcpy(bad.data() + at, &word, 4);
    return bad;
  };
  struct Case {
    std::string bytes;
    size_t n;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {good, 11, "a delta block of 10 values where the keys have 11"},
           {good.substr(0, 7), 10, "a delta block of 7 bytes"},
           {good.substr(0, good.size() - 1), 10, "has 23 bytes, not 24"},
           {with_word(4, 11), 10, "sends 11 of 10 values"},
           {with_word(8, 10), 10, "index 10 is out of range"},
           {with_word(12, 2), 10, "index 2 is out of range (10 values) or not above"},
       }) {
    const absl::Status s = DecodeDeltaBlock(v1::CODEC_NONE, c.bytes, c.n, &idx, &v);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s;
  }
  // The values' own encoding is checked too (an int8 block's NaN scale).
  std::string int8(DeltaBlockBytes(Spec(v1::CODEC_INT8), 1), '\0');
  EncodeDeltaBlock(Spec(v1::CODEC_INT8), 4, std::vector<uint32_t>{1}, std::vector<float>{1.0f},
                   int8.data());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(int8.data() + 12, &nan, 4);
  EXPECT_FALSE(DecodeDeltaBlock(v1::CODEC_INT8, int8, 4, &idx, &v).ok());
}

TEST(ValueCodecTest, ParsesCodecNames) {
  v1::ValueCodec c;
  ASSERT_TRUE(ParseCodecName("topk", &c).ok());
  EXPECT_EQ(c, v1::CODEC_TOPK);
  ASSERT_TRUE(ParseCodecName("none", &c).ok());
  EXPECT_EQ(c, v1::CODEC_NONE);
  ASSERT_TRUE(ParseCodecName("int8", &c).ok());
  EXPECT_EQ(c, v1::CODEC_INT8);
  EXPECT_FALSE(ParseCodecName("fp8", &c).ok());
}

}  // namespace
}  // namespace ps
