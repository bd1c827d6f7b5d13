// Rows copied out of (or to be loaded into) a TableStore, packed for fast copies: what a
// checkpoint writes and a restore reads back.
#ifndef PS_SERVER_SLOT_ROWS_H_
#define PS_SERVER_SLOT_ROWS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
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

// The rows of a tiered table (TableSpec.tier) in one slot that were on its disk tier when
// TableStore::Snapshot copied the slot: not copied, but read at that moment's view of the tier
// (a RocksDB snapshot) while the checkpoint is written (DiskRowReader).
struct DiskSlotRows {
  uint32_t slot = 0;
  uint32_t table_id = 0;
  uint32_t row_floats = 0;
  // Rows on disk then, as counted: at most, since a read passes by rows expired (TTL) and
  // counts no stale copy of a row also in RAM.
  uint64_t rows = 0;
};

// Reads the rows a snapshot left on disk (JobSnapshot::disk) as they were at the snapshot, and
// holds the tier's views of that moment until it is destroyed. Thread-safe.
class DiskRowReader {
 public:
  virtual ~DiskRowReader() = default;
  // Calls fn(key, update count, row: values then optimizer state, row_floats floats) for each
  // row of `part` in increasing key order, stopping at fn's first error (returned). A key may
  // also be among the slot's rows in RAM (a stale copy on disk): the RAM row rules.
  using RowFn = absl::FunctionRef<absl::Status(uint64_t key, int64_t updates, const float* row)>;
  virtual absl::Status Read(const DiskSlotRows& part, RowFn fn) const = 0;
};

// One job's rows on one server at one moment (TableStore::Snapshot): each slot is a consistent
// copy (taken under the slot's lock), the slots one after the other.
struct JobSnapshot {
  std::string job_id;
  uint64_t shard_epoch = 0;           // the job's shard map epoch the slots come from
  std::vector<v1::TableSpec> tables;  // the job's tables, by id
  std::vector<bool> slots;            // the slots this server owned (kNumSlots entries)
  std::vector<SlotRows> rows;         // by slot, then table id; no empty entries
  // Tiered tables (TableStore::Snapshot; SnapshotSlots copies everything): `rows` holds their
  // rows in RAM, and their rows on disk are listed here (by slot, then table id) and read by
  // `disk_reader` when the checkpoint is written, so that the copy's RAM does not grow with the
  // rows on disk. Dropping `disk_reader` (with the snapshot) releases the tier's views.
  std::vector<DiskSlotRows> disk;
  std::shared_ptr<const DiskRowReader> disk_reader;
  uint64_t num_rows = 0;  // with the rows of `disk` as counted
  uint64_t bytes = 0;     // row floats (values + optimizer state) * 4, the same rows'
  // Bytes the copy holds in RAM: the rows' keys, update counts and floats.
  uint64_t RamBytes() const {
    uint64_t n = 0;
    for (const SlotRows& r : rows) n += r.bytes() + r.size() * (sizeof(uint64_t) + sizeof(int64_t));
    return n;
  }
  // OK unless rows on a disk tier could not be read (SnapshotSlots): the copy is then
  // incomplete (not to be written). A Snapshot's rows on disk are read as it is written: an
  // error there fails the write.
  absl::Status status;
};

}  // namespace ps

#endif  // PS_SERVER_SLOT_ROWS_H_
