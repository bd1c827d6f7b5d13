#include "client/data_ranges.h"

#include <algorithm>

namespace ps {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr int kRounds = 4;

}  // namespace

int64_t ShuffledExample(uint64_t seed, int32_t epoch, int64_t examples, int64_t place) {
  if (examples <= 1) return 0;
  // Halves of `half` bits each: a domain of 4^half >= examples, less than 4x larger.
  int half = 1;
  while ((uint64_t{1} << (2 * half)) < static_cast<uint64_t>(examples)) ++half;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  uint64_t keys[kRounds];
  uint64_t k = SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(epoch)));
  for (uint64_t& key : keys) key = k = SplitMix64(k);
  uint64_t x = static_cast<uint64_t>(place);
  do {  // cycle walking: a permutation of the domain, restricted to [0, examples)
    uint64_t left = x >> half, right = x & mask;
    for (uint64_t key : keys) {
      const uint64_t next = left ^ (SplitMix64(right ^ key) & mask);
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= static_cast<uint64_t>(examples));
  return static_cast<int64_t>(x);
}

std::vector<int64_t> RangeExamples(uint64_t seed, int32_t epoch, int64_t examples,
                                   int32_t batch_size, uint64_t position) {
  std::vector<int64_t> out;
  if (batch_size < 1 || examples < 1) return out;
  const uint64_t begin = position * static_cast<uint64_t>(batch_size);
  if (begin >= static_cast<uint64_t>(examples)) return out;
  const uint64_t end = std::min<uint64_t>(examples, begin + batch_size);
  out.reserve(end - begin);
  for (uint64_t place = begin; place < end; ++place) {
    out.push_back(ShuffledExample(seed, epoch, examples, static_cast<int64_t>(place)));
  }
  return out;
}

}  // namespace ps
