// Dynamic data assignment, the workers' side: which examples a range of an epoch holds.
//
// Each epoch reads the data set in an order shuffled by the job's seed: a bijection of
// [0, examples) computed from (seed, epoch) without holding a permutation (a Feistel network
// over the next power of four, walking the cycle until the value falls inside), so any data set
// size costs no memory. Range `position` of an epoch holds the examples at places
// [position * batch_size, (position + 1) * batch_size) of that order (the last range may be
// shorter). The worker daemon's runner and the Session of program jobs both use it, so the
// scheduler's ledger only deals in range numbers.
#ifndef PS_CLIENT_DATA_RANGES_H_
#define PS_CLIENT_DATA_RANGES_H_

#include <cstdint>
#include <vector>

namespace ps {

// The example read at place `place` (in [0, examples)) of epoch `epoch` (1-based).
int64_t ShuffledExample(uint64_t seed, int32_t epoch, int64_t examples, int64_t place);

// The examples of range `position` of epoch `epoch`, in reading order (empty if the range is
// past the epoch's end).
std::vector<int64_t> RangeExamples(uint64_t seed, int32_t epoch, int64_t examples,
                                   int32_t batch_size, uint64_t position);

}  // namespace ps

#endif  // PS_CLIENT_DATA_RANGES_H_
