// Deterministic row initializers: a row's first values depend only on (spec, stream, key), the
// stream naming the table (InitializerStream).
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

// The `table_id` argument of InitializeRow for a table: a hash of its name when it has one,
// else its id. Table ids differ from job to job (they are unique per server), names do not: a
// job submitted again with the same seed starts from the same weights.
uint32_t InitializerStream(const v1::TableSpec& table);

}  // namespace ps

#endif  // PS_SERVER_INITIALIZER_H_
