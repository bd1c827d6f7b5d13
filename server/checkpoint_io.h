// Checkpoint shards on disk: one RocksDB database per server and checkpoint, holding the rows of
// the slots that server owned, keyed so that one slot can be read back alone, with a CRC-32C per
// slot on top of RocksDB's block checksums.
//
// Layout (every integer big-endian, so that keys sort by slot, then table, then key):
//   [slot u16][table_id u32][key u64]  -> [update count i64 LE][row floats, LE f32 ...]
//   0xFF 0x01 [slot u16]               -> [rows u64][crc32c u32]   (one per slot held, even empty)
//   0xFF 0x02 "meta"                   -> v1::CheckpointShardMeta, serialized
// The slot CRC covers, in key order, every row key of the slot followed by its value.
#ifndef PS_SERVER_CHECKPOINT_IO_H_
#define PS_SERVER_CHECKPOINT_IO_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/v1/checkpoint.pb.h"
#include "ps/v1/types.pb.h"
#include "server/slot_rows.h"

namespace ps {

struct CheckpointWriteOptions {
  enum class Method {
    kSstIngest,   // sorted SST files written directly, then ingested (default: fastest)
    kWriteBatch,  // a WriteBatch per slot without WAL, then a flush (for comparison)
  };
  Method method = Method::kSstIngest;
  // kSstIngest: a new SST file is started once one holds this many bytes.
  uint64_t target_file_bytes = uint64_t{256} << 20;
  // If set, checked between slots: once true the write stops with CANCELLED (and the partial
  // database is removed). Must outlive the call.
  const std::atomic<bool>* cancel = nullptr;
};

struct CheckpointWriteStats {
  uint64_t rows = 0;
  uint64_t bytes = 0;       // row floats (values + optimizer state) * 4
  uint64_t disk_bytes = 0;  // size of the database's files
  double seconds = 0;
};

// Creates a RocksDB database at `path` (its parent directories too; ALREADY_EXISTS if `path`
// exists) holding `snapshot`'s rows (those of tiered tables on disk read through its
// disk_reader, slot by slot, as the slots are written), a record per slot it owned, and `meta`
// (its job_id, tables, slots and format_version are filled from the snapshot, rows and bytes
// from the rows written; the caller sets checkpoint_id and clock). Synced when it returns OK;
// on an error nothing is left at `path`.
absl::StatusOr<CheckpointWriteStats> WriteCheckpoint(const JobSnapshot& snapshot,
                                                     const std::string& path,
                                                     v1::CheckpointShardMeta meta,
                                                     const CheckpointWriteOptions& options = {});

struct CheckpointReadOptions {
  // If set, every shard's meta must name this job / checkpoint (else FAILED_PRECONDITION).
  std::string job_id;
  uint64_t checkpoint_id = 0;
};

struct CheckpointRows {
  std::vector<SlotRows> rows;  // in the target tables and slots; no empty entries
  uint64_t num_rows = 0;
  uint64_t bytes = 0;
};

// Reads the rows of `wanted_slots` (kNumSlots entries) of the checkpoint whose shards are
// `shards`, for the tables `target_tables`: each checkpoint table is matched to the target
// table of the same name ("table_<id>" when unnamed), which must have the same kind, dim, row
// width (optimizer state included) and, if dense, number of rows (else FAILED_PRECONDITION
// naming it); checkpoint tables with no match are skipped, a target table with no match is
// FAILED_PRECONDITION naming it (it would keep its initial values). When ids differ, rows move to
// the slot their key has under the target id (every slot of the checkpoint is then read). Only
// shards holding a slot that is read are opened; each slot read is checked against its record (row
// count, CRC-32C) with RocksDB's checksums verified. NOT_FOUND names a missing shard directory;
// DATA_LOSS names the shard and slot of a missing / corrupt file or record, or a slot no shard
// holds. Nothing is returned unless everything was read. The slots each shard holds, decoded;
// INVALID_ARGUMENT for a malformed bitmap or a slot held by two shards (each slot of a checkpoint
// is in one shard).
absl::StatusOr<std::vector<std::vector<bool>>> HeldSlots(
    const std::vector<v1::CheckpointShard>& shards);

absl::StatusOr<CheckpointRows> ReadCheckpointSlots(const std::vector<v1::CheckpointShard>& shards,
                                                   const std::vector<bool>& wanted_slots,
                                                   const std::vector<v1::TableSpec>& target_tables,
                                                   const CheckpointReadOptions& options = {});

// Reads only the meta record of the shard database at `path`.
absl::StatusOr<v1::CheckpointShardMeta> ReadCheckpointMeta(const std::string& path);

}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_IO_H_
