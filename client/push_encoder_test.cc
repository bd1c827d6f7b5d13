// PushEncoder: error feedback (what is not sent is sent later), the NaN and overflow cases,
// Deep Gradient Compression's momentum correction against its definition, the warm-up, and its
// bytes pinned: what it sends and keeps for TOPK (with momentum correction and warm-up), SIGN and
// FP16, with keys in a run, shuffled or repeated, past the table, and a step with a NaN, must
// not change bit for bit when its code is reorganized. A change that means to change the
// encoding updates the digests below (and says so).
#include "client/push_encoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "client/rpc_client.h"
#include "common/value_codec.h"

namespace ps {
namespace {

// FNV-1a over bytes.
class Digest {
 public:
  void Add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) hash_ = (hash_ ^ p[i]) * 0x100000001b3ull;
  }
  void Add(const std::string& s) {
    const uint64_t n = s.size();
    Add(&n, sizeof(n));
    Add(s.data(), s.size());
  }
  void Add(double v) { Add(&v, sizeof(v)); }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ull;
};

// A deterministic gradient in about [-2, 2): integer arithmetic only, so that it is the same
// float everywhere; a few exact zeros and negative zeros.
float Gradient(uint64_t step, uint64_t i) {
  uint64_t x = (step + 1) * 0x9e3779b97f4a7c15ull ^ (i + 7) * 0xc2b2ae3d27d4eb4full;
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 32;
  if (x % 97 == 0) return 0.0f;
  if (x % 89 == 0) return -0.0f;
  return static_cast<float>(static_cast<int64_t>(x % 4000001) - 2000000) / 1000000.0f;
}

v1::CodecSpec Spec(v1::ValueCodec codec, float ratio = 0, float momentum = 0, uint32_t warmup = 0) {
  v1::CodecSpec spec;
  spec.set_codec(codec);
  spec.set_ratio(ratio);
  spec.set_momentum(momentum);
  spec.set_warmup_steps(warmup);
  return spec;
}

// The digest of every block `steps` pushes of `keys` (dim 5, a table of `num_rows` rows) send,
// of the residual and velocity left after each, and of the segment's codec and momentum. Step
// `nan_at` has a NaN in its gradient.
uint64_t Pushes(const v1::CodecSpec& spec, const std::vector<uint64_t>& keys, uint64_t num_rows,
                int steps, int nan_at = -1) {
  constexpr int kDim = 5;
  PushEncoder encoder;
  Digest digest;
  std::vector<float> grads(keys.size() * kDim);
  for (int step = 0; step < steps; ++step) {
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = Gradient(step, i);
    if (step == nan_at) grads[grads.size() / 2] = std::numeric_limits<float>::quiet_NaN();
    TableOp op{4, keys, grads.data(), nullptr};
    KeySegment seg{0, {}, v1::CODEC_NONE, {}};
    for (uint32_t j = 0; j < keys.size(); ++j) seg.idx.push_back(j);
    encoder.Encode(spec, op, kDim, num_rows, &seg);
    // A block with a NaN is refused by the servers: its bytes are not pinned, what the encoder
    // keeps after it is.
    if (step != nan_at) digest.Add(seg.encoded);
    digest.Add(static_cast<double>(seg.codec));
    digest.Add(static_cast<double>(seg.momentum));
    digest.Add(encoder.ResidualL1(4));
    digest.Add(encoder.VelocityL1(4));
  }
  return digest.value();
}

std::vector<uint64_t> KeyRun(uint64_t first, size_t n) {
  std::vector<uint64_t> keys(n);
  for (size_t j = 0; j < n; ++j) keys[j] = first + j;
  return keys;
}
// Keys 0..n-1 in another order.
std::vector<uint64_t> Shuffled(size_t n) {
  std::vector<uint64_t> keys(n);
  for (size_t j = 0; j < n; ++j) keys[j] = (j * 37 + 11) % n;
  return keys;
}
// Keys with repeats: some rows pushed twice in one block.
std::vector<uint64_t> Repeated() { return {3, 9, 3, 0, 17, 9, 9, 30, 1, 2, 17, 5}; }

TEST(PushEncoderTest, EncodingsArePinnedBitForBit) {
  const v1::CodecSpec topk = Spec(v1::CODEC_TOPK, 0.1f), dgc = Spec(v1::CODEC_TOPK, 0.2f, 0.9f),
                      warm = Spec(v1::CODEC_TOPK, 0.05f, 0.5f, 4), sign = Spec(v1::CODEC_SIGN),
                      fp16 = Spec(v1::CODEC_FP16);
  // The digests of the encoder as of 37b5f2c. The shuffled keys get the gradients of the run
  // position by position, and so send the same: the encoder's path for keys in a run and its
  // path for others agree.
  const std::map<std::string, uint64_t> want = {
      {"topk run", 0xdd901639775e5f5bull},
      {"topk run from 10", 0x6fd21c4f408139b0ull},
      {"topk shuffled", 0xdd901639775e5f5bull},
      {"topk repeated", 0x7ea0e4d0adb8faedull},
      {"dgc run", 0x26aa6e8fcadd771bull},
      {"dgc shuffled", 0x26aa6e8fcadd771bull},
      {"dgc repeated", 0x9da948d13d98d9feull},
      {"warm-up run", 0x6e1014e6f0a70031ull},
      {"warm-up shuffled", 0x6e1014e6f0a70031ull},
      {"warm-up repeated", 0xf1d8e2a45c6d6113ull},
      {"sign run", 0xbc7a0fdd6422a659ull},
      {"sign shuffled", 0xbc7a0fdd6422a659ull},
      {"sign repeated", 0x161cea6d7641784full},
      {"fp16", 0x9c8c3c320f4f9580ull},
      {"topk past the table", 0x271a34fb8653d188ull},
      {"dgc nan run", 0x433077453a780013ull},
      {"dgc nan shuffled", 0x433077453a780013ull},
      {"sign nan repeated", 0x5d1115b6aad31835ull},
  };
  const std::map<std::string, uint64_t> got = {
      {"topk run", Pushes(topk, KeyRun(0, 64), 64, 12)},
      {"topk run from 10", Pushes(topk, KeyRun(10, 40), 64, 12)},
      {"topk shuffled", Pushes(topk, Shuffled(64), 64, 12)},
      {"topk repeated", Pushes(topk, Repeated(), 64, 12)},
      {"dgc run", Pushes(dgc, KeyRun(0, 64), 64, 12)},
      {"dgc shuffled", Pushes(dgc, Shuffled(64), 64, 12)},
      {"dgc repeated", Pushes(dgc, Repeated(), 64, 12)},
      {"warm-up run", Pushes(warm, KeyRun(0, 64), 64, 9)},
      {"warm-up shuffled", Pushes(warm, Shuffled(64), 64, 9)},
      {"warm-up repeated", Pushes(warm, Repeated(), 64, 9)},
      {"sign run", Pushes(sign, KeyRun(0, 64), 64, 6)},
      {"sign shuffled", Pushes(sign, Shuffled(64), 64, 6)},
      {"sign repeated", Pushes(sign, Repeated(), 64, 6)},
      {"fp16", Pushes(fp16, Shuffled(64), 64, 3)},
      {"topk past the table", Pushes(topk, KeyRun(60, 8), 64, 4)},
      {"dgc nan run", Pushes(dgc, KeyRun(0, 64), 64, 8, 3)},
      {"dgc nan shuffled", Pushes(dgc, Shuffled(64), 64, 8, 3)},
      {"sign nan repeated", Pushes(sign, Repeated(), 64, 6, 2)},
  };
  for (const auto& [name, digest] : want) {
    EXPECT_EQ(got.at(name), digest) << name << ": 0x" << std::hex << got.at(name);
  }
}

// A finite gradient that overflows with the residual is sent as it is (the servers refuse it)
// and leaves the residual as it was, whether the keys are one span or not.
TEST(PushEncoderTest, AnOverflowWithTheResidualLeavesItAsItWas) {
  for (const std::vector<uint64_t>& keys : {KeyRun(0, 8), Shuffled(8), Repeated()}) {
    PushEncoder encoder;
    const v1::CodecSpec topk = Spec(v1::CODEC_TOPK, 0.01f);
    std::vector<float> grads(keys.size() * 2, 3e38f);
    TableOp op{4, keys, grads.data(), nullptr};
    KeySegment seg{0, {}, v1::CODEC_NONE, {}};
    for (uint32_t j = 0; j < keys.size(); ++j) seg.idx.push_back(j);
    encoder.Encode(topk, op, 2, 64, &seg);
    const double held = encoder.ResidualL1(4);
    EXPECT_GT(held, 1e38);
    encoder.Encode(topk, op, 2, 64, &seg);  // 3e38 + 3e38: inf
    std::vector<float> sent(grads.size());
    EXPECT_FALSE(DecodeValueBlock(v1::CODEC_TOPK, seg.encoded, sent.size(), sent.data()).ok());
    EXPECT_EQ(encoder.ResidualL1(4), held);
  }
}

// The decoded sum of what PushEncoder sent for key k over some steps, the residual and
// velocity left, and how many values each step sent.
struct Sent {
  std::vector<float> decoded;
  double residual_l1 = 0;
  double velocity_l1 = 0;
  std::vector<uint32_t> counts;
};

// The gradient of value i (key i / 4, dim 4) at a step.
float SineGradient(int step, size_t i) {
  return std::sin(static_cast<float>(step * 131 + i) * 0.37f);
}

// Pushes `steps` random gradients of `rows` rows of dim 4 through a topk encoder (ratio 0.1,
// with `momentum` and `warmup` steps), the rows given to the op in the order of `keys`
// (consecutive or not: the encoder's two paths). A step `nan_at_step` has a NaN in its gradient;
// a step `skipped` pushes nothing.
Sent PushTopk(const std::vector<uint64_t>& keys, int steps, int nan_at_step = -1, int skipped = -1,
              float momentum = 0.0f, uint32_t warmup = 0) {
  PushEncoder encoder;
  v1::CodecSpec topk;
  topk.set_codec(v1::CODEC_TOPK);
  topk.set_ratio(0.1f);
  topk.set_momentum(momentum);
  topk.set_warmup_steps(warmup);
  const int dim = 4;
  Sent sent;
  sent.decoded.assign(keys.size() * dim, 0.0f);
  std::vector<float> by_key(keys.size() * dim);
  for (int step = 0; step < steps; ++step) {
    if (step == skipped) continue;
    // The same per key.
    for (size_t i = 0; i < by_key.size(); ++i) by_key[i] = SineGradient(step, i);
    if (step == nan_at_step) by_key[5] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> grads(by_key.size());
    for (size_t j = 0; j < keys.size(); ++j) {
      std::copy_n(&by_key[keys[j] * dim], dim, &grads[j * dim]);
    }
    TableOp op{7, keys, grads.data(), nullptr};
    KeySegment seg{0, {}, v1::CODEC_NONE, {}};
    for (uint32_t j = 0; j < keys.size(); ++j) seg.idx.push_back(j);
    encoder.Encode(topk, op, dim, keys.size(), &seg);
    std::vector<float> block(grads.size());
    const absl::Status s =
        DecodeValueBlock(v1::CODEC_TOPK, seg.encoded, block.size(), block.data());
    if (step == nan_at_step) {
      EXPECT_FALSE(s.ok());  // the NaN is sent as it is: the servers would refuse the block
      continue;
    }
    EXPECT_TRUE(s.ok()) << s;
    uint32_t count;
    std::memcpy(&count, seg.encoded.data() + 4, sizeof(count));
    sent.counts.push_back(count);
    for (size_t j = 0; j < keys.size(); ++j) {
      for (int d = 0; d < dim; ++d) sent.decoded[keys[j] * dim + d] += block[j * dim + d];
    }
  }
  sent.residual_l1 = encoder.ResidualL1(7);
  sent.velocity_l1 = encoder.VelocityL1(7);
  return sent;
}

// The keys 0..63 in order (the encoder's consecutive path) and shuffled (its other path).
std::vector<std::vector<uint64_t>> KeyOrders() {
  std::vector<uint64_t> consecutive(64), shuffled(64);
  std::iota(consecutive.begin(), consecutive.end(), 0);
  for (size_t j = 0; j < shuffled.size(); ++j) shuffled[j] = (j * 37) % 64;  // a permutation
  return {consecutive, shuffled};
}

// Deep Gradient Compression's momentum correction written out per value: the velocity
// u = m * u + g accumulates into the residual v; the 10% largest |v| are sent (the lower index
// first among equals) and have v and u cleared.
Sent ReferenceMomentumTopk(size_t values, int steps, float m) {
  Sent sent;
  sent.decoded.assign(values, 0.0f);
  std::vector<float> u(values, 0.0f), v(values, 0.0f);
  for (int step = 0; step < steps; ++step) {
    for (size_t i = 0; i < values; ++i) {
      u[i] = SineGradient(step, i) + m * u[i];
      v[i] = u[i] + v[i];
    }
    std::vector<size_t> order(values);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return std::fabs(v[a]) > std::fabs(v[b]); });
    const size_t k = TopkCount(values, 0.1f);
    for (size_t j = 0; j < k; ++j) {
      sent.decoded[order[j]] += v[order[j]];
      v[order[j]] = u[order[j]] = 0.0f;
    }
    sent.counts.push_back(static_cast<uint32_t>(k));
  }
  for (size_t i = 0; i < values; ++i) {
    sent.residual_l1 += std::fabs(v[i]);
    sent.velocity_l1 += std::fabs(u[i]);
  }
  return sent;
}

TEST(PushEncoderTest, ConsecutiveKeysAndOthersKeepTheSameResidual) {
  std::vector<uint64_t> consecutive(64), shuffled(64);
  std::iota(consecutive.begin(), consecutive.end(), 0);
  for (size_t j = 0; j < shuffled.size(); ++j) shuffled[j] = (j * 37) % 64;  // a permutation
  const Sent a = PushTopk(consecutive, 20), b = PushTopk(shuffled, 20);
  EXPECT_EQ(a.decoded, b.decoded);
  EXPECT_DOUBLE_EQ(a.residual_l1, b.residual_l1);
  EXPECT_GT(a.residual_l1, 0.0);
  // Every gradient is either sent or held: sent + residual = the sum of the gradients.
  double grads_l1 = 0, sent_l1 = 0;
  for (size_t i = 0; i < a.decoded.size(); ++i) {
    float sum = 0;
    for (int step = 0; step < 20; ++step) sum += SineGradient(step, i);
    grads_l1 += std::fabs(sum);
    sent_l1 += std::fabs(a.decoded[i]);
  }
  EXPECT_LE(grads_l1, sent_l1 + a.residual_l1 + 1e-3);
}

TEST(PushEncoderTest, AGradientWithANaNLeavesTheResidualAndVelocityAsTheyWere) {
  for (const auto& keys : KeyOrders()) {
    for (float momentum : {0.0f, 0.5f}) {
      // Step 3 of 5 has a NaN: what is sent and held after it is as if step 3 had not been.
      const Sent with_nan = PushTopk(keys, 5, 3, -1, momentum),
                 without = PushTopk(keys, 5, -1, 3, momentum);
      EXPECT_EQ(with_nan.decoded, without.decoded);
      EXPECT_DOUBLE_EQ(with_nan.residual_l1, without.residual_l1);
      EXPECT_DOUBLE_EQ(with_nan.velocity_l1, without.velocity_l1);
      EXPECT_GT(with_nan.residual_l1, 0.0);
      EXPECT_EQ(with_nan.velocity_l1 > 0.0, momentum != 0.0f);
    }
  }
}

TEST(PushEncoderTest, MomentumCorrectionIsDeepGradientCompressions) {
  const Sent want = ReferenceMomentumTopk(64 * 4, 12, 0.9f);
  for (const auto& keys : KeyOrders()) {
    const Sent got = PushTopk(keys, 12, -1, -1, 0.9f);
    EXPECT_EQ(got.decoded, want.decoded);
    EXPECT_DOUBLE_EQ(got.residual_l1, want.residual_l1);
    EXPECT_DOUBLE_EQ(got.velocity_l1, want.velocity_l1);
    EXPECT_GT(got.velocity_l1, 0.0);
  }
  // Without momentum no velocity is kept, and the values sent differ.
  const Sent plain = PushTopk(KeyOrders()[0], 12);
  EXPECT_EQ(plain.velocity_l1, 0.0);
  EXPECT_NE(plain.decoded, want.decoded);
}

TEST(PushEncoderTest, TheWarmUpSendsLessAtEachPushDownToTheRatio) {
  for (const auto& keys : KeyOrders()) {
    const Sent got = PushTopk(keys, 7, -1, -1, 0.0f, 4);
    // ratio^((s + 1) / 5) of 256 values for s = 0..3: 0.631, 0.398, 0.251, 0.158; then 0.1.
    EXPECT_EQ(got.counts, (std::vector<uint32_t>{162, 102, 65, 41, 26, 26, 26}));
    // Every gradient is still sent or held.
    for (size_t i = 0; i < got.decoded.size(); i += 17) {
      float sum = 0;
      for (int step = 0; step < 7; ++step) sum += SineGradient(step, i);
      EXPECT_LE(std::fabs(sum) - std::fabs(got.decoded[i]), got.residual_l1 + 1e-4);
    }
  }
  v1::CodecSpec c;
  c.set_ratio(0.01f);
  c.set_warmup_steps(99);
  EXPECT_NEAR(PushEncoder::WarmupRatio(c, 0), std::pow(0.01, 0.01), 1e-6);
  EXPECT_NEAR(PushEncoder::WarmupRatio(c, 49), 0.1, 1e-6);
  EXPECT_FLOAT_EQ(PushEncoder::WarmupRatio(c, 99), 0.01f);
  EXPECT_FLOAT_EQ(PushEncoder::WarmupRatio(c, 5000), 0.01f);
}

TEST(PushEncoderTest, ResetForgetsTheVelocity) {
  PushEncoder encoder;
  v1::CodecSpec topk;
  topk.set_codec(v1::CODEC_TOPK);
  topk.set_ratio(0.25f);
  topk.set_momentum(0.9f);
  std::vector<uint64_t> keys = {0, 1};
  std::vector<float> grads = {1, 2, 3, 4, 5, 6, 7, 8};
  TableOp op{3, keys, grads.data(), nullptr};
  KeySegment seg{0, {0, 1}, v1::CODEC_NONE, {}};
  encoder.Encode(topk, op, 4, 2, &seg);
  EXPECT_GT(encoder.VelocityL1(3), 0.0);
  EXPECT_GT(encoder.ResidualL1(3), 0.0);
  encoder.Reset();
  EXPECT_EQ(encoder.VelocityL1(3), 0.0);
  EXPECT_EQ(encoder.ResidualL1(3), 0.0);
}

}  // namespace
}  // namespace ps
