// Deterministic row initializers: a row's first values depend only on (spec, table id, key).
#ifndef PS_SERVER_INITIALIZER_H_
#define PS_SERVER_INITIALIZER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "ps/v1/types.pb.h"

namespace ps {

// INVALID_ARGUMENT naming the field for a bad spec (unknown kind, low >= high, stddev < 0,
// non-finite numbers).
absl::Status ValidateInitializer(const v1::InitializerSpec& spec);

// Writes the `dim` initial values of row `key` of table `table_id` to `out`. The same inputs
// give the same values on every server and every run (a counter-based generator, no global
// state). `spec` must have passed ValidateInitializer.
void InitializeRow(const v1::InitializerSpec& spec, uint32_t table_id, uint64_t key, float* out,
                   int dim);

}  // namespace ps

#endif  // PS_SERVER_INITIALIZER_H_
