// value_codec_bench: the wire codecs alone (common/value_codec.h), in process, on one thread: what
// a worker pays to encode a push (with error feedback: the residual written back) and a server
// to decode it, or a server to encode a pull answer and a worker to decode it.
//
//   value_codec_bench --values=8388608 --codecs=none,fp16,bf16,topk,sign,int8 --ratio=0.01
//
// One line per codec: the encoded bytes per value, and encode and decode as ms per block and
// millions of values per second (the median of --repeats runs). The values are gradient-like:
// normal, standard deviation 1e-3, a fixed seed. A block of 8,388,608 values is what one of two
// servers holds of the wide MLP's 4096 x 4096 table. Benchmarks report figures; nothing here
// asserts on speed.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/flags_usage.h"
#include "common/table_features.h"
#include "common/value_codec.h"

ABSL_FLAG(uint64_t, values, uint64_t{1} << 23, "values in the block encoded and decoded");
ABSL_FLAG(std::string, codecs, "none,fp16,bf16,topk,sign,int8", "codecs, comma-separated");
ABSL_FLAG(double, ratio, 0.01, "topk's ratio: the fraction of the values sent, in (0, 1]");
ABSL_FLAG(int, repeats, 5, "runs of each encode and decode; the median is printed (at least 1)");

namespace ps {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

absl::Status Run() {
  const size_t n = absl::GetFlag(FLAGS_values);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  if (n == 0 || n > UINT32_MAX) return absl::InvalidArgumentError("--values must be in [1, 2^32)");
  if (repeats < 1) return absl::InvalidArgumentError("--repeats must be at least 1");
  std::vector<float> grads(n);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  for (float& g : grads) g = normal(rng);

  absl::PrintF("%-6s %10s %12s %12s %12s %12s\n", "codec", "bytes/val", "encode ms", "enc Mval/s",
               "decode ms", "dec Mval/s");
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_codecs), ',')) {
    v1::CodecSpec spec;
    v1::ValueCodec codec;
    if (absl::Status s = ParseCodecName(name, &codec); !s.ok()) return s;
    spec.set_codec(codec);
    if (codec == v1::CODEC_TOPK) spec.set_ratio(static_cast<float>(absl::GetFlag(FLAGS_ratio)));
    v1::TableSpec table;  // checked as a push codec, or as a pull codec for the pull-only ones
    table.set_kind(v1::DENSE);
    *(codec == v1::CODEC_INT8 ? table.mutable_pull_codec() : table.mutable_push_codec()) = spec;
    if (absl::Status s = ValidateTableFeatures(table); !s.ok()) return s;

    std::vector<double> enc, dec;
    std::vector<float> values(n), out(n);
    std::string encoded;
    for (int r = 0; r < repeats; ++r) {
      values = grads;
      encoded.clear();
      const absl::Time t0 = absl::Now();
      // As a worker pushes with error feedback: the values become the residual in place.
      EncodeValueBlock(spec, values, &encoded, values.data());
      enc.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      const absl::Time t1 = absl::Now();
      if (absl::Status s = DecodeValueBlock(codec, encoded, n, out.data()); !s.ok()) return s;
      dec.push_back(absl::ToDoubleMilliseconds(absl::Now() - t1));
    }
    const double e = Median(enc), d = Median(dec);
    absl::PrintF("%-6s %10.3f %12.2f %12.1f %12.2f %12.1f\n", name,
                 static_cast<double>(encoded.size()) / static_cast<double>(n), e,
                 static_cast<double>(n) / e / 1e3, d, static_cast<double>(n) / d / 1e3);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  ps::SetUsage(
      "The wire codecs alone, in process, on one thread: a block's encoding (with error\n"
      "feedback: the residual written back, as a worker's push) and its decoding, per codec.\n"
      "Example: value_codec_bench --values=8388608 --codecs=none,fp16,topk --ratio=0.01",
      __FILE__);
  absl::ParseCommandLine(argc, argv);
  const absl::Status s = ps::Run();
  if (!s.ok()) {
    absl::FPrintF(stderr, "value_codec_bench: %s\n", s.ToString());
    return 2;
  }
  return 0;
}
