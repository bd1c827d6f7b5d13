// The checkpoint reader's decoding (server/internal/checkpoint_format.h), as ReadCheckpointSlots
// uses it on a shard's records: the meta record (parsed, its tables matched to the target
// tables), one slot's record, then that slot's row records in order.
// Input: [flags byte][slot u16 LE][meta field][slot record field][row key field, row value
// field]... (fields framed as in fuzz_input.h).
#include <google/protobuf/stubs/logging.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/shard_map.h"
#include "ps/v1/types.pb.h"
#include "server/internal/checkpoint_format.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

// The tables of the store a restore loads into: dense "weights" (8 x 4, adam: 12 floats a
// row) and sparse "embeddings" (dim 2, sgd).
std::vector<ps::v1::TableSpec> TargetTables() {
  std::vector<ps::v1::TableSpec> tables(2);
  tables[0].set_table_id(1);
  tables[0].set_name("weights");
  tables[0].set_kind(ps::v1::DENSE);
  tables[0].set_dim(4);
  tables[0].set_num_rows(8);
  tables[0].mutable_optimizer()->set_kind(ps::v1::OptimizerSpec::ADAM);
  tables[1].set_table_id(2);
  tables[1].set_name("embeddings");
  tables[1].set_kind(ps::v1::SPARSE);
  tables[1].set_dim(2);
  tables[1].mutable_optimizer()->set_kind(ps::v1::OptimizerSpec::SGD);
  return tables;
}

// Aborts (a finding) naming the check's line when `ok` is false.
void Require(bool ok, int line = __builtin_LINE()) {
  if (ok) return;
  std::fprintf(stderr, "%s:%d: check failed\n", __FILE__, line);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // unparsable input is the point
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<ps::v1::TableSpec>* const kTargets =
      new std::vector<ps::v1::TableSpec>(TargetTables());
  ps::FuzzInput in(data, size);
  const uint8_t flags = in.Byte();
  const uint32_t slot = (in.Byte() | (uint32_t{in.Byte()} << 8)) % ps::kNumSlots;
  const std::string path = "/fuzz/shard-0";

  absl::flat_hash_map<std::string, const ps::v1::TableSpec*> targets;
  for (const ps::v1::TableSpec& t : *kTargets) targets[ps::MatchName(t)] = &t;
  // Without a meta record that decodes and matches, the rows are still decoded, against the
  // targets' own layout: the row path is worth fuzzing on its own.
  ps::TableMapping tables = {{1, {1, 12}}, {2, {2, 2}}};
  uint32_t last_table = 2;
  auto meta = ps::DecodeMeta(in.Field(), path);
  if (meta.ok()) {
    auto mapped = ps::MapTables(*meta, path, targets);
    if (mapped.ok()) {
      Require(mapped->size() == targets.size());
      tables = std::move(*mapped);
      last_table = 0;
      for (const ps::v1::TableSpec& t : meta->tables()) {
        last_table = std::max(last_table, t.table_id());
      }
    }
  }
  std::vector<bool> wanted(ps::kNumSlots, (flags & 2) != 0);
  wanted[slot] = true;
  const ps::ShardRead shard{path, tables, /*remap=*/(flags & 1) != 0, wanted, last_table};
  ps::RowCollector rows;
  auto decoder = ps::SlotDecoder::Start(shard, slot, in.Field());
  if (!decoder.ok()) return 0;
  while (!in.empty()) {
    const std::string key = in.Field();
    const std::string value = in.Field();
    if (!decoder->Add(key, value, rows).ok()) return 0;
  }
  (void)decoder->Finish();
  const ps::CheckpointRows out = rows.Take();
  uint64_t n = 0;
  for (const ps::SlotRows& r : out.rows) {
    Require(r.slot < ps::kNumSlots && wanted[r.slot]);
    Require(r.keys.size() == r.updates.size());
    Require(r.data.size() == r.keys.size() * r.row_floats);
    n += r.size();
  }
  Require(n == out.num_rows);
  return 0;
}
