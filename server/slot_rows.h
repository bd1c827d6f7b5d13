// Rows copied out of (or to be loaded into) a TableStore, packed for fast copies: what a
// checkpoint writes and a restore reads back.
#ifndef PS_SERVER_SLOT_ROWS_H_
#define PS_SERVER_SLOT_ROWS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ps/v1/types.pb.h"
#include "server/internal/bulk_allocator.h"

namespace ps {

// Row floats: large buffers are mapped with their pages populated (see BulkAllocator).
using RowFloats = std::vector<float, BulkAllocator<float>>;

// The rows of one table in one slot. Row i is key `keys[i]` with update count `updates[i]` and
// the floats data[i * row_floats, (i + 1) * row_floats): its values, then its optimizer state.
struct SlotRows {
  uint32_t slot = 0;
  uint32_t table_id = 0;
  uint32_t row_floats = 0;
  std::vector<uint64_t> keys;
  std::vector<int64_t> updates;
  RowFloats data;

  size_t size() const { return keys.size(); }
  const float* row(size_t i) const { return data.data() + i * row_floats; }
  uint64_t bytes() const { return data.size() * sizeof(float); }
};

// One job's rows on one server at one moment (TableStore::Snapshot): each slot is a consistent
// copy (taken under the slot's lock), the slots one after the other.
struct JobSnapshot {
  std::string job_id;
  uint64_t shard_epoch = 0;           // the job's shard map epoch the slots come from
  std::vector<v1::TableSpec> tables;  // the job's tables, by id
  std::vector<bool> slots;            // the slots this server owned (kNumSlots entries)
  std::vector<SlotRows> rows;         // by slot, then table id; no empty entries
  uint64_t num_rows = 0;
  uint64_t bytes = 0;  // row floats (values + optimizer state) * 4
  // OK unless rows on a disk tier could not be read: the copy is then incomplete (not to be
  // written).
  absl::Status status;
};

}  // namespace ps

#endif  // PS_SERVER_SLOT_ROWS_H_
