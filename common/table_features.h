// The one check of a table's settings: every field of its TableSpec but the table's identity,
// shape, initializer and optimizer (TableSettingsOf), i.e. storage, admission, eviction, tier
// and the push and pull codecs. The servers run it at CreateTable, the scheduler at submit and
// the client before it asks the servers, so that all three say the same. A new setting is its
// TableSpec field (proto/ps/v1/types.proto) and its check here; the clients carry it as they
// are (ps::TableConfig::spec, the Python create_table's keywords; docs/architecture.md, "Where
// a change goes").
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

// INVALID_ARGUMENT naming the field and what would fix it ("eviction.max_rows = 0: ...") where a
// setting of `spec` is out of range, unknown, or set on a table it does not apply to:
//   storage: FP32, FP16 or BF16;
//   admission, eviction: SPARSE tables only, in their ranges (AdmissionSpec, EvictionSpec);
//   tier.disk: SPARSE tables with eviction.max_rows;
//   push_codec, pull_codec: a known codec in its direction (topk and sign push, int8 pulls), topk
//     and sign and delta pulls on DENSE tables only, topk's ratio in (0, 1] and momentum in
//     [0, 1) (with an SGD optimizer), no topk parameter on another codec.
// The table's identity and shape (name, kind, dim, ...) are its caller's to check.
absl::Status ValidateTableFeatures(const v1::TableSpec& spec);

// `spec` with only its settings: every field but table_id, name, job_id, kind, dim, num_rows,
// initializer and optimizer cleared. The one list of what is not a setting: the client merges
// and compares settings by it (client/table_spec.h).
v1::TableSpec TableSettingsOf(const v1::TableSpec& spec);

// Bytes of one value as the table stores it (4, or 2 for FP16/BF16).
inline int StoredValueBytes(v1::TableSpec::Storage storage) {
  return storage == v1::TableSpec::FP32 ? 4 : 2;
}

}  // namespace ps

#endif  // PS_COMMON_TABLE_FEATURES_H_
