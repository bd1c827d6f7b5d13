// PushEncoder's bytes pinned: what it sends and keeps for TOPK (with momentum correction and
// warm-up), SIGN and FP16, with keys in a run, shuffled or repeated, past the table, and a step
// with a NaN, must not change bit for bit when its code is reorganized. A change that means to
// change the encoding updates the digests below (and says so).
#include "client/push_encoder.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
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

v1::CodecSpec Spec(v1::ValueCodec codec, float ratio = 0, float momentum = 0,
                   uint32_t warmup = 0) {
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
  const v1::CodecSpec topk = Spec(v1::CODEC_TOPK, 0.1f),
                      dgc = Spec(v1::CODEC_TOPK, 0.2f, 0.9f),
                      warm = Spec(v1::CODEC_TOPK, 0.05f, 0.5f, 4),
                      sign = Spec(v1::CODEC_SIGN), fp16 = Spec(v1::CODEC_FP16);
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

}  // namespace
}  // namespace ps
