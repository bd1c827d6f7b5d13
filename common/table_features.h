// Checks of a table's storage, admission, eviction, codec and tier settings (TableSpec fields
// 9-14),
// shared by the scheduler (at submit) and the servers (at CreateTable) so that both say the same.
#ifndef PS_COMMON_TABLE_FEATURES_H_
#define PS_COMMON_TABLE_FEATURES_H_

#include <cstdint>

#include "absl/status/status.h"
#include "ps/v1/types.pb.h"

namespace ps {

// Limits of AdmissionSpec.
inline constexpr uint32_t kMaxAdmissionCount = 255;  // the sketch's counters are 8 bits
inline constexpr uint32_t kMinSketchCounters = 1024;
inline constexpr uint32_t kMaxSketchCounters = uint32_t{1} << 28;
inline constexpr uint32_t kDefaultSketchCounters = uint32_t{1} << 20;

// INVALID_ARGUMENT naming the field ("eviction.max_rows = 0 ...") where storage, admission or
// eviction are out of range, or set on a table kind they do not apply to (admission and
// eviction: SPARSE tables only), where tier.disk is set on a table that is not SPARSE or has no
// eviction.max_rows, and where its push_codec or pull_codec is (ValidateTableCodecs).
absl::Status ValidateTableFeatures(const v1::TableSpec& spec);

// Bytes of one value as the table stores it (4, or 2 for FP16/BF16).
inline int StoredValueBytes(v1::TableSpec::Storage storage) {
  return storage == v1::TableSpec::FP32 ? 4 : 2;
}

}  // namespace ps

#endif  // PS_COMMON_TABLE_FEATURES_H_
