#include "server/internal/checkpoint_format.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "server/internal/crc32c.h"
#include "server/optimizer.h"

namespace ps {
namespace {

constexpr char kReserved = '\xFF';
constexpr char kSlotRecordTag = '\x01';
constexpr char kMetaTag = '\x02';

absl::StatusOr<uint32_t> RowFloatsOf(const v1::TableSpec& spec) {
  auto optimizer = RowOptimizer::Create(spec.optimizer());
  if (!optimizer.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("table '", MatchName(spec), "': optimizer: ", optimizer.status().message()));
  }
  return spec.dim() * (1 + static_cast<uint32_t>((*optimizer)->state_per_value()));
}

}  // namespace

void PutBigEndian(uint64_t v, int bytes, char* out) {
  for (int i = bytes - 1; i >= 0; --i, v >>= 8) out[i] = static_cast<char>(v & 0xFF);
}
uint64_t GetBigEndian(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
void PutLittleEndian64(uint64_t v, char* out) {
  for (int i = 0; i < 8; ++i, v >>= 8) out[i] = static_cast<char>(v & 0xFF);
}
uint64_t GetLittleEndian64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

std::string SlotPrefix(uint32_t slot) {
  char b[2];
  PutBigEndian(slot, 2, b);
  return std::string(b, 2);
}
std::string SlotRecordKey(uint32_t slot) {
  return absl::StrCat(std::string{kReserved, kSlotRecordTag}, SlotPrefix(slot));
}
std::string MetaKey() { return absl::StrCat(std::string{kReserved, kMetaTag}, "meta"); }

absl::StatusOr<v1::CheckpointShardMeta> DecodeMeta(absl::string_view value,
                                                   const std::string& path) {
  v1::CheckpointShardMeta meta;
  if (!meta.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
    return absl::DataLossError(absl::StrCat("checkpoint shard ", path, ": unparsable meta record"));
  }
  if (meta.format_version() != kCheckpointFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint shard ", path,
                                                      ": format version ", meta.format_version(),
                                                      ", want ", kCheckpointFormatVersion));
  }
  return meta;
}

std::string MatchName(const v1::TableSpec& spec) {
  return spec.name().empty() ? absl::StrCat("table_", spec.table_id()) : spec.name();
}

absl::StatusOr<TableMapping> MapTables(
    const v1::CheckpointShardMeta& meta, const std::string& path,
    const absl::flat_hash_map<std::string, const v1::TableSpec*>& targets) {
  TableMapping mapping;
  for (const v1::TableSpec& source : meta.tables()) {
    auto it = targets.find(MatchName(source));
    if (it == targets.end()) continue;
    const v1::TableSpec& target = *it->second;
    PS_ASSIGN_OR_RETURN(const uint32_t source_floats, RowFloatsOf(source));
    PS_ASSIGN_OR_RETURN(const uint32_t target_floats, RowFloatsOf(target));
    if (source.kind() != target.kind() || source.dim() != target.dim() ||
        source_floats != target_floats ||
        (source.kind() == v1::DENSE && source.num_rows() != target.num_rows())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "table '", MatchName(source), "' of checkpoint ", path, " (kind ",
          v1::TableKind_Name(source.kind()), ", dim ", source.dim(), ", ", source_floats,
          " floats per row, ", source.num_rows(), " dense rows) does not fit table ",
          target.table_id(), " (kind ", v1::TableKind_Name(target.kind()), ", dim ", target.dim(),
          ", ", target_floats, " floats per row, ", target.num_rows(), " dense rows)"));
    }
    mapping[source.table_id()] = Target{target.table_id(), target_floats};
  }
  if (mapping.size() != targets.size()) {  // a table would silently keep its initial values
    std::vector<std::string> missing, present;
    for (const v1::TableSpec& source : meta.tables()) present.push_back(MatchName(source));
    for (const auto& [name, target] : targets) {
      if (std::find(present.begin(), present.end(), name) == present.end()) {
        missing.push_back(name);
      }
    }
    std::sort(missing.begin(), missing.end());
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", path, " has no table named ", absl::StrJoin(missing, ", "),
                     " (it has: ", absl::StrJoin(present, ", "), ")"));
  }
  return mapping;
}

void RowCollector::Add(uint32_t slot, const Target& target, uint64_t key, int64_t updates,
                       const char* floats, uint64_t expect) {
  auto [it, added] = index_.try_emplace((uint64_t{slot} << 32) | target.table_id, 0);
  if (added) {
    it->second = out_.rows.size();
    SlotRows& r = out_.rows.emplace_back();
    r.slot = slot;
    r.table_id = target.table_id;
    r.row_floats = target.row_floats;
    // Bounded, in case the slot record lies.
    expect = std::min<uint64_t>(expect, kMaxReserveBytes / (r.row_floats * sizeof(float)));
    r.keys.reserve(expect);
    r.updates.reserve(expect);
    r.data.reserve(expect * r.row_floats);
  }
  SlotRows& r = out_.rows[it->second];
  r.keys.push_back(key);
  r.updates.push_back(updates);
  const size_t at = r.data.size();
  r.data.resize(at + r.row_floats);  // `floats` may be unaligned: copied as bytes
  std::memcpy(r.data.data() + at, floats, r.row_floats * sizeof(float));
  ++out_.num_rows;
  out_.bytes += r.row_floats * sizeof(float);
}

absl::StatusOr<SlotDecoder> SlotDecoder::Start(const ShardRead& shard, uint32_t slot,
                                               absl::string_view record) {
  SlotDecoder decoder(shard, slot);
  if (record.size() != kSlotRecordBytes) return decoder.DataLoss("malformed slot record");
  decoder.want_rows_ = GetBigEndian(record.data(), 8);
  decoder.want_crc_ = static_cast<uint32_t>(GetBigEndian(record.data() + 8, 4));
  return decoder;
}

absl::Status SlotDecoder::DataLoss(absl::string_view what) const {
  return absl::DataLossError(
      absl::StrCat("checkpoint shard ", shard_->path, ": slot ", slot_, ": ", what));
}

absl::Status SlotDecoder::Add(absl::string_view k, absl::string_view v, RowCollector& rows) {
  if (k.size() != kRowKeyBytes || v.size() < kUpdateBytes ||
      (v.size() - kUpdateBytes) % sizeof(float) != 0) {
    return DataLoss("malformed row record");
  }
  crc_ = Crc32cExtend(crc_, k.data(), k.size());
  crc_ = Crc32cExtend(crc_, v.data(), v.size());
  ++rows_;
  auto table = shard_->tables.find(static_cast<uint32_t>(GetBigEndian(k.data() + 2, 4)));
  if (table == shard_->tables.end()) return absl::OkStatus();
  const Target& target = table->second;
  if (v.size() != kUpdateBytes + target.row_floats * sizeof(float)) {
    return DataLoss(absl::StrCat("a row of ", v.size(), " bytes"));
  }
  const uint64_t key = GetBigEndian(k.data() + 6, 8);
  const uint32_t to_slot = shard_->remap ? SlotOf(target.table_id, key) : slot_;
  if (!shard_->wanted[to_slot]) return absl::OkStatus();
  // The slot record counts the rows of every table of the slot: the rest of them belong to
  // this one only if it is the slot's last table (a guess for the others would reserve, and
  // with the bulk allocator commit, the whole slot's rows at each table's width).
  const uint64_t table_id = table->first;
  const uint64_t expect = shard_->remap || table_id != shard_->last_table || rows_ > want_rows_
                              ? 0
                              : want_rows_ - rows_ + 1;
  rows.Add(to_slot, target, key, static_cast<int64_t>(GetLittleEndian64(v.data())),
           v.data() + kUpdateBytes, expect);
  return absl::OkStatus();
}

absl::Status SlotDecoder::Finish() const {
  if (rows_ != want_rows_ || crc_ != want_crc_) {
    return DataLoss(
        absl::StrFormat("%d rows with CRC-32C %08x, but the slot record says %d "
                        "rows with %08x",
                        rows_, crc_, want_rows_, want_crc_));
  }
  return absl::OkStatus();
}

}  // namespace ps
