// The records of a checkpoint shard (layout in server/checkpoint_io.h) and their decoding,
// without RocksDB: checkpoint_io.cc reads the records and feeds them in, the fuzz target
// (tests/fuzz/fuzz_checkpoint_reader.cc) feeds arbitrary bytes.
#ifndef PS_SERVER_INTERNAL_CHECKPOINT_FORMAT_H_
#define PS_SERVER_INTERNAL_CHECKPOINT_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ps/v1/checkpoint.pb.h"
#include "ps/v1/types.pb.h"
#include "server/checkpoint_io.h"

namespace ps {

inline constexpr int kCheckpointFormatVersion = 1;
inline constexpr size_t kRowKeyBytes = 2 + 4 + 8;  // [slot u16][table_id u32][key u64], BE
inline constexpr size_t kUpdateBytes = 8;          // a row value starts with its update count
inline constexpr size_t kSlotRecordBytes = 8 + 4;  // [rows u64][crc32c u32], BE

void PutBigEndian(uint64_t v, int bytes, char* out);
uint64_t GetBigEndian(const char* p, int bytes);
void PutLittleEndian64(uint64_t v, char* out);
uint64_t GetLittleEndian64(const char* p);

// The prefix of every row key of `slot`, the key of its slot record, the meta record's key.
std::string SlotPrefix(uint32_t slot);
std::string SlotRecordKey(uint32_t slot);
std::string MetaKey();

// The meta record's value: DATA_LOSS if unparsable, FAILED_PRECONDITION for another format
// version; both name `path`.
absl::StatusOr<v1::CheckpointShardMeta> DecodeMeta(absl::string_view value,
                                                   const std::string& path);

// A checkpoint table's place in the target store.
struct Target {
  uint32_t table_id = 0;
  uint32_t row_floats = 0;
};
using TableMapping = absl::flat_hash_map<uint32_t, Target>;  // checkpoint table id -> target

// The name tables are matched by: `name`, else "table_<id>".
std::string MatchName(const v1::TableSpec& spec);

// Matches the tables of one shard's meta to the target tables (by MatchName) and checks that
// they fit; see ReadCheckpointSlots for the rules and errors.
absl::StatusOr<TableMapping> MapTables(
    const v1::CheckpointShardMeta& meta, const std::string& path,
    const absl::flat_hash_map<std::string, const v1::TableSpec*>& targets);

// Most bytes of row floats RowCollector reserves ahead for one (slot, table) on a slot
// record's word: a record that lies (claims 2^40 rows) must not commit more than this before
// the slot's CRC check fails. Larger slots grow as their rows come.
inline constexpr uint64_t kMaxReserveBytes = uint64_t{64} << 20;

// Gathers rows by (target slot, target table).
class RowCollector {
 public:
  // `expect`: how many rows to make room for if this is the first of its (slot, table); 0 when
  // not known (the memory then grows as rows come). `floats` holds target.row_floats floats.
  void Add(uint32_t slot, const Target& target, uint64_t key, int64_t updates, const char* floats,
           uint64_t expect);
  CheckpointRows Take() { return std::move(out_); }

 private:
  absl::flat_hash_map<uint64_t, size_t> index_;
  CheckpointRows out_;
};

// What one shard contributes to a read.
struct ShardRead {
  const std::string& path;
  const TableMapping& tables;
  bool remap = false;               // some table changes id: rows go to SlotOf(target id, key)
  const std::vector<bool>& wanted;  // kNumSlots entries
  uint32_t last_table = 0;  // the checkpoint's largest table id: the last rows of every slot
};

// Verifies one slot of a shard as its row records come (in key order), adding the wanted rows
// to a RowCollector: each record well-formed, then (Finish) the count and CRC-32C of the slot
// record. Errors are DATA_LOSS naming the shard and the slot.
class SlotDecoder {
 public:
  // `record`: the value of the slot's record (malformed: DATA_LOSS).
  static absl::StatusOr<SlotDecoder> Start(const ShardRead& shard, uint32_t slot,
                                           absl::string_view record);
  absl::Status Add(absl::string_view key, absl::string_view value, RowCollector& rows);
  absl::Status Finish() const;

 private:
  SlotDecoder(const ShardRead& shard, uint32_t slot) : shard_(&shard), slot_(slot) {}
  absl::Status DataLoss(absl::string_view what) const;

  const ShardRead* shard_;
  uint32_t slot_;
  uint64_t want_rows_ = 0;
  uint32_t want_crc_ = 0;
  uint64_t rows_ = 0;
  uint32_t crc_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_INTERNAL_CHECKPOINT_FORMAT_H_
