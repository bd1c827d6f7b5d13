#include "server/checkpoint_io.h"

#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "server/internal/crc32c.h"
#include "server/optimizer.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

constexpr int kFormatVersion = 1;
constexpr size_t kRowKeyBytes = 2 + 4 + 8;
constexpr size_t kUpdateBytes = 8;
constexpr size_t kSlotRecordBytes = 8 + 4;
constexpr char kReserved = '\xFF';
constexpr char kSlotRecordTag = '\x01';
constexpr char kMetaTag = '\x02';

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

// RocksDB's info log would write LOG files into checkpoints (even when only reading them).
class NullLogger : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char*, va_list) override {}
};

// The one conversion of rocksdb::Status: an error becomes `code`, naming what was being done.
absl::Status FromRocksDb(const rocksdb::Status& s, absl::StatusCode code,
                         absl::string_view context) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(code, absl::StrCat(context, ": ", s.ToString()));
}

rocksdb::Options DbOptions() {
  rocksdb::Options options;
  options.compression = rocksdb::kNoCompression;  // float rows hardly compress; costs time
  options.info_log = std::make_shared<NullLogger>();
  options.paranoid_checks = true;
  options.write_buffer_size = 256 << 20;  // kWriteBatch: fewer, larger flushes
  rocksdb::BlockBasedTableOptions table;
  // Per block, verified on every read. XXH3, not CRC32c: Debian's librocksdb is built without
  // SSE4.2 and its table-driven CRC32c cost more than the rest of the read.
  table.checksum = rocksdb::kXXH3;
  table.block_size = 64 << 10;
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

// Where the rows go: SST files then ingested, or write batches.
class ShardSink {
 public:
  virtual ~ShardSink() = default;
  // Keys come in ascending order.
  virtual absl::Status Put(const rocksdb::Slice& key, const rocksdb::Slice& value) = 0;
  virtual absl::Status EndSlot() { return absl::OkStatus(); }
  // Makes everything put durable in the database.
  virtual absl::Status Finish() = 0;
};

class SstSink : public ShardSink {
 public:
  SstSink(rocksdb::DB* db, const rocksdb::Options& options, std::string dir, uint64_t file_bytes)
      : db_(db),
        writer_(rocksdb::EnvOptions(), options),
        dir_(std::move(dir)),
        file_bytes_(file_bytes) {}

  absl::Status Put(const rocksdb::Slice& key, const rocksdb::Slice& value) override {
    if (!open_) {
      files_.push_back(absl::StrFormat("%s/ingest-%04d.sst", dir_, files_.size()));
      PS_RETURN_IF_ERROR(Check(writer_.Open(files_.back()), "cannot create"));
      open_ = true;
    }
    PS_RETURN_IF_ERROR(Check(writer_.Put(key, value), "cannot write"));
    return writer_.FileSize() >= file_bytes_ ? FinishFile() : absl::OkStatus();
  }
  absl::Status Finish() override {
    if (open_) PS_RETURN_IF_ERROR(FinishFile());
    if (files_.empty()) return absl::OkStatus();
    rocksdb::IngestExternalFileOptions ingest;
    ingest.move_files = true;  // hard links; the ingest-* names are removed
    return FromRocksDb(db_->IngestExternalFile(files_, ingest), absl::StatusCode::kInternal,
                       absl::StrCat("cannot ingest the SST files of ", dir_));
  }

 private:
  absl::Status FinishFile() {
    open_ = false;
    return Check(writer_.Finish(), "cannot finish");  // syncs the file
  }
  absl::Status Check(const rocksdb::Status& s, absl::string_view what) {
    return FromRocksDb(s, absl::StatusCode::kInternal,
                       absl::StrCat(what, " checkpoint file ", files_.back()));
  }

  rocksdb::DB* const db_;
  rocksdb::SstFileWriter writer_;
  const std::string dir_;
  const uint64_t file_bytes_;
  bool open_ = false;
  std::vector<std::string> files_;
};

class BatchSink : public ShardSink {
 public:
  BatchSink(rocksdb::DB* db, std::string dir) : db_(db), dir_(std::move(dir)) {}

  absl::Status Put(const rocksdb::Slice& key, const rocksdb::Slice& value) override {
    return FromRocksDb(batch_.Put(key, value), absl::StatusCode::kInternal, dir_);
  }
  absl::Status EndSlot() override {
    rocksdb::WriteOptions options;
    options.disableWAL = true;  // durable through the flush in Finish()
    absl::Status s = FromRocksDb(db_->Write(options, &batch_), absl::StatusCode::kInternal,
                                 absl::StrCat("cannot write checkpoint ", dir_));
    batch_.Clear();
    return s;
  }
  absl::Status Finish() override {
    PS_RETURN_IF_ERROR(EndSlot());
    rocksdb::FlushOptions flush;
    flush.wait = true;
    return FromRocksDb(db_->Flush(flush), absl::StatusCode::kInternal,
                       absl::StrCat("cannot flush checkpoint ", dir_));
  }

 private:
  rocksdb::DB* const db_;
  const std::string dir_;
  rocksdb::WriteBatch batch_;
};

// Writes the rows of one table in one slot in key order; extends the slot's CRC.
absl::Status PutSlotRows(const SlotRows& rows, ShardSink& sink, uint32_t* crc) {
  std::vector<uint32_t> order(rows.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return rows.keys[a] < rows.keys[b]; });
  char key[kRowKeyBytes];
  PutBigEndian(rows.slot, 2, key);
  PutBigEndian(rows.table_id, 4, key + 2);
  const size_t row_bytes = rows.row_floats * sizeof(float);
  std::string value(kUpdateBytes + row_bytes, '\0');
  for (uint32_t i : order) {
    PutBigEndian(rows.keys[i], 8, key + 6);
    PutLittleEndian64(static_cast<uint64_t>(rows.updates[i]), value.data());
    std::memcpy(value.data() + kUpdateBytes, rows.row(i), row_bytes);  // floats: little-endian
    *crc = Crc32cExtend(*crc, key, kRowKeyBytes);
    *crc = Crc32cExtend(*crc, value.data(), value.size());
    PS_RETURN_IF_ERROR(sink.Put(rocksdb::Slice(key, kRowKeyBytes), value));
  }
  return absl::OkStatus();
}

// Puts every row of `snapshot`, then the slot records, then `meta`: in key order.
absl::Status PutShard(const JobSnapshot& snapshot, const v1::CheckpointShardMeta& meta,
                      const CheckpointWriteOptions& options, ShardSink& sink) {
  std::vector<const SlotRows*> rows;
  for (const SlotRows& r : snapshot.rows) rows.push_back(&r);
  std::sort(rows.begin(), rows.end(), [](const SlotRows* a, const SlotRows* b) {
    return std::make_pair(a->slot, a->table_id) < std::make_pair(b->slot, b->table_id);
  });
  std::vector<std::pair<uint64_t, uint32_t>> records(kNumSlots);  // (rows, crc) per slot
  auto next = rows.begin();
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    if (options.cancel != nullptr && options.cancel->load(std::memory_order_relaxed)) {
      return absl::CancelledError("checkpoint write cancelled");
    }
    for (; next != rows.end() && (*next)->slot == s; ++next) {
      if (!snapshot.slots[s]) {
        return absl::InvalidArgumentError(
            absl::StrCat("snapshot rows in slot ", s, ", which it does not own"));
      }
      PS_RETURN_IF_ERROR(PutSlotRows(**next, sink, &records[s].second));
      records[s].first += (*next)->size();
    }
    PS_RETURN_IF_ERROR(sink.EndSlot());
  }
  if (next != rows.end()) return absl::InvalidArgumentError("snapshot rows in a slot >= 1024");
  char record[kSlotRecordBytes];
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    if (!snapshot.slots[s]) continue;
    PutBigEndian(records[s].first, 8, record);
    PutBigEndian(records[s].second, 4, record + 8);
    PS_RETURN_IF_ERROR(sink.Put(SlotRecordKey(s), rocksdb::Slice(record, kSlotRecordBytes)));
  }
  PS_RETURN_IF_ERROR(sink.Put(MetaKey(), meta.SerializeAsString()));
  return sink.Finish();
}

uint64_t DirectoryBytes(const std::string& path) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    if (entry.is_regular_file(ec)) bytes += entry.file_size(ec);
  }
  return bytes;
}

// So that the new directory's entry survives a crash (best effort).
void SyncDirectory(const fs::path& dir) {
  const int fd = open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  fsync(fd);
  close(fd);
}

}  // namespace

absl::StatusOr<CheckpointWriteStats> WriteCheckpoint(const JobSnapshot& snapshot,
                                                     const std::string& path,
                                                     v1::CheckpointShardMeta meta,
                                                     const CheckpointWriteOptions& options) {
  const absl::Time start = absl::Now();
  if (path.empty()) return absl::InvalidArgumentError("checkpoint path is empty");
  if (snapshot.slots.size() != kNumSlots) {
    return absl::InvalidArgumentError("snapshot: slots must have kNumSlots entries");
  }
  std::error_code ec;
  if (fs::exists(path, ec)) {
    return absl::AlreadyExistsError(absl::StrCat("checkpoint path ", path, " already exists"));
  }
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) {
    fs::create_directories(parent, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot create directory ", parent.string(), ": ", ec.message()));
    }
  }
  meta.set_format_version(kFormatVersion);
  meta.set_job_id(snapshot.job_id);
  meta.clear_tables();
  for (const v1::TableSpec& t : snapshot.tables) *meta.add_tables() = t;
  meta.set_slots(EncodeSlotBitmap(snapshot.slots));
  meta.set_rows(snapshot.num_rows);
  meta.set_bytes(snapshot.bytes);

  rocksdb::Options db_options = DbOptions();
  db_options.create_if_missing = true;
  db_options.error_if_exists = true;
  rocksdb::DB* raw = nullptr;
  PS_RETURN_IF_ERROR(FromRocksDb(rocksdb::DB::Open(db_options, path, &raw),
                                 absl::StatusCode::kInternal,
                                 absl::StrCat("cannot create checkpoint database ", path)));
  std::unique_ptr<rocksdb::DB> db(raw);
  std::unique_ptr<ShardSink> sink;
  if (options.method == CheckpointWriteOptions::Method::kWriteBatch) {
    sink = std::make_unique<BatchSink>(db.get(), path);
  } else {
    sink = std::make_unique<SstSink>(db.get(), db_options, path, options.target_file_bytes);
  }
  absl::Status s = PutShard(snapshot, meta, options, *sink);
  sink.reset();
  if (s.ok()) {
    s = FromRocksDb(db->Close(), absl::StatusCode::kInternal,
                    absl::StrCat("cannot close checkpoint database ", path));
  }
  db.reset();
  if (!s.ok()) {
    fs::remove_all(path, ec);  // ours: it did not exist before
    return s;
  }
  SyncDirectory(parent);
  CheckpointWriteStats stats;
  stats.rows = snapshot.num_rows;
  stats.bytes = snapshot.bytes;
  stats.disk_bytes = DirectoryBytes(path);
  stats.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return stats;
}

namespace {

// A checkpoint table's place in the target store.
struct Target {
  uint32_t table_id = 0;
  uint32_t row_floats = 0;
};

std::string MatchName(const v1::TableSpec& spec) {
  return spec.name().empty() ? absl::StrCat("table_", spec.table_id()) : spec.name();
}

absl::StatusOr<uint32_t> RowFloats(const v1::TableSpec& spec) {
  auto optimizer = RowOptimizer::Create(spec.optimizer());
  if (!optimizer.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("table '", MatchName(spec), "': optimizer: ", optimizer.status().message()));
  }
  return spec.dim() * (1 + static_cast<uint32_t>((*optimizer)->state_per_value()));
}

// Matches the checkpoint's tables (of one shard's meta) to the target tables by name.
absl::StatusOr<absl::flat_hash_map<uint32_t, Target>> MapTables(
    const v1::CheckpointShardMeta& meta, const std::string& path,
    const absl::flat_hash_map<std::string, const v1::TableSpec*>& targets) {
  absl::flat_hash_map<uint32_t, Target> mapping;
  for (const v1::TableSpec& source : meta.tables()) {
    auto it = targets.find(MatchName(source));
    if (it == targets.end()) continue;
    const v1::TableSpec& target = *it->second;
    PS_ASSIGN_OR_RETURN(const uint32_t source_floats, RowFloats(source));
    PS_ASSIGN_OR_RETURN(const uint32_t target_floats, RowFloats(target));
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

// Gathers rows by (target slot, target table).
class RowCollector {
 public:
  // `expect`: how many rows to make room for if this is the first of its (slot, table); 0 when
  // not known (the memory then grows as rows come).
  void Add(uint32_t slot, const Target& target, uint64_t key, int64_t updates, const char* floats,
           uint64_t expect) {
    auto [it, added] = index_.try_emplace((uint64_t{slot} << 32) | target.table_id, 0);
    if (added) {
      it->second = out_.rows.size();
      SlotRows& r = out_.rows.emplace_back();
      r.slot = slot;
      r.table_id = target.table_id;
      r.row_floats = target.row_floats;
      // Bounded, in case the slot record lies.
      expect = std::min<uint64_t>(expect, (uint64_t{1} << 30) / (r.row_floats * sizeof(float)));
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
  CheckpointRows Take() { return std::move(out_); }

 private:
  absl::flat_hash_map<uint64_t, size_t> index_;
  CheckpointRows out_;
};

absl::Status DataLoss(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("checkpoint shard ", path, ": ", what));
}

absl::StatusOr<std::unique_ptr<rocksdb::DB>> OpenShard(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    return absl::NotFoundError(absl::StrCat("checkpoint shard ", path, " does not exist"));
  }
  rocksdb::DB* raw = nullptr;
  PS_RETURN_IF_ERROR(FromRocksDb(rocksdb::DB::OpenForReadOnly(DbOptions(), path, &raw),
                                 absl::StatusCode::kDataLoss,
                                 absl::StrCat("checkpoint shard ", path, ": cannot open")));
  return std::unique_ptr<rocksdb::DB>(raw);
}

rocksdb::ReadOptions VerifyingReads() {
  rocksdb::ReadOptions options;
  options.verify_checksums = true;
  options.fill_cache = false;
  options.readahead_size = 4 << 20;
  return options;
}

absl::StatusOr<v1::CheckpointShardMeta> ReadMeta(rocksdb::DB* db, const std::string& path) {
  std::string value;
  const rocksdb::Status s = db->Get(VerifyingReads(), MetaKey(), &value);
  if (s.IsNotFound()) return DataLoss(path, "no meta record");
  PS_RETURN_IF_ERROR(FromRocksDb(s, absl::StatusCode::kDataLoss,
                                 absl::StrCat("checkpoint shard ", path, ": meta record")));
  v1::CheckpointShardMeta meta;
  if (!meta.ParseFromString(value)) return DataLoss(path, "unparsable meta record");
  if (meta.format_version() != kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint shard ", path,
                                                      ": format version ", meta.format_version(),
                                                      ", want ", kFormatVersion));
  }
  return meta;
}

// What one shard contributes to a read.
struct ShardRead {
  const std::string& path;
  const absl::flat_hash_map<uint32_t, Target>& tables;  // checkpoint table id -> target
  bool remap = false;  // some table changes id: rows go to SlotOf(target id, key)
  const std::vector<bool>& wanted;
  uint32_t last_table = 0;  // the checkpoint's largest table id: the last rows of every slot
};

// Reads and verifies one slot of a shard, adding the wanted rows to `rows`.
absl::Status ReadSlot(rocksdb::DB* db, rocksdb::Iterator* it, const ShardRead& shard, uint32_t slot,
                      RowCollector& rows) {
  const std::string where = absl::StrCat("slot ", slot);
  std::string record;
  const rocksdb::Status s = db->Get(VerifyingReads(), SlotRecordKey(slot), &record);
  if (s.IsNotFound()) return DataLoss(shard.path, absl::StrCat(where, ": no slot record"));
  PS_RETURN_IF_ERROR(FromRocksDb(s, absl::StatusCode::kDataLoss,
                                 absl::StrCat("checkpoint shard ", shard.path, ": ", where)));
  if (record.size() != kSlotRecordBytes) {
    return DataLoss(shard.path, absl::StrCat(where, ": malformed slot record"));
  }
  const uint64_t want_rows = GetBigEndian(record.data(), 8);
  const uint32_t want_crc = static_cast<uint32_t>(GetBigEndian(record.data() + 8, 4));
  const std::string prefix = SlotPrefix(slot);
  uint32_t crc = 0;
  uint64_t n = 0;
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    const rocksdb::Slice k = it->key();
    const rocksdb::Slice v = it->value();
    if (k.size() != kRowKeyBytes || v.size() < kUpdateBytes ||
        (v.size() - kUpdateBytes) % sizeof(float) != 0) {
      return DataLoss(shard.path, absl::StrCat(where, ": malformed row record"));
    }
    crc = Crc32cExtend(crc, k.data(), k.size());
    crc = Crc32cExtend(crc, v.data(), v.size());
    ++n;
    auto table = shard.tables.find(static_cast<uint32_t>(GetBigEndian(k.data() + 2, 4)));
    if (table == shard.tables.end()) continue;
    const Target& target = table->second;
    if (v.size() != kUpdateBytes + target.row_floats * sizeof(float)) {
      return DataLoss(shard.path, absl::StrCat(where, ": a row of ", v.size(), " bytes"));
    }
    const uint64_t key = GetBigEndian(k.data() + 6, 8);
    const uint32_t to_slot = shard.remap ? SlotOf(target.table_id, key) : slot;
    if (!shard.wanted[to_slot]) continue;
    // The slot record counts the rows of every table of the slot: the rest of them belong to
    // this one only if it is the slot's last table (a guess for the others would reserve, and
    // with the bulk allocator commit, the whole slot's rows at each table's width).
    const uint64_t table_id = table->first;
    const uint64_t expect =
        shard.remap || table_id != shard.last_table || n > want_rows ? 0 : want_rows - n + 1;
    rows.Add(to_slot, target, key, static_cast<int64_t>(GetLittleEndian64(v.data())),
             v.data() + kUpdateBytes, expect);
  }
  PS_RETURN_IF_ERROR(FromRocksDb(it->status(), absl::StatusCode::kDataLoss,
                                 absl::StrCat("checkpoint shard ", shard.path, ": ", where)));
  if (n != want_rows || crc != want_crc) {
    return DataLoss(shard.path,
                    absl::StrFormat("%s: %d rows with CRC-32C %08x, but the slot record says %d "
                                    "rows with %08x",
                                    where, n, crc, want_rows, want_crc));
  }
  return absl::OkStatus();
}

bool Intersects(const std::vector<bool>& a, const std::vector<bool>& b) {
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    if (a[s] && b[s]) return true;
  }
  return false;
}

// DATA_LOSS unless every slot in `needed` is held by a shard.
absl::Status CheckCovered(const std::vector<std::vector<bool>>& held,
                          const std::vector<bool>& needed) {
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    if (!needed[s]) continue;
    bool found = false;
    for (const auto& h : held) found = found || h[s];
    if (!found) {
      return absl::DataLossError(absl::StrCat("slot ", s, " is in no shard of the checkpoint"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::CheckpointShardMeta> ReadCheckpointMeta(const std::string& path) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<rocksdb::DB> db, OpenShard(path));
  return ReadMeta(db.get(), path);
}

absl::StatusOr<std::vector<std::vector<bool>>> HeldSlots(
    const std::vector<v1::CheckpointShard>& shards) {
  std::vector<std::vector<bool>> held;
  std::vector<int> holder(kNumSlots, -1);
  for (const v1::CheckpointShard& shard : shards) {
    auto slots = DecodeSlotBitmap(shard.slots());
    if (!slots.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint shard ", shard.path(),
                       ": malformed slot bitmap: ", slots.status().message()));
    }
    for (uint32_t s = 0; s < kNumSlots; ++s) {
      if (!(*slots)[s]) continue;
      if (holder[s] >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint shards ", shards[holder[s]].path(), " and ", shard.path(),
                         " both hold slot ", s, " (each slot is in one shard)"));
      }
      holder[s] = static_cast<int>(held.size());
    }
    held.push_back(std::move(*slots));
  }
  return held;
}

absl::StatusOr<CheckpointRows> ReadCheckpointSlots(const std::vector<v1::CheckpointShard>& shards,
                                                   const std::vector<bool>& wanted_slots,
                                                   const std::vector<v1::TableSpec>& target_tables,
                                                   const CheckpointReadOptions& options) {
  if (wanted_slots.size() != kNumSlots) {
    return absl::InvalidArgumentError("wanted slots must have kNumSlots entries");
  }
  PS_ASSIGN_OR_RETURN(const std::vector<std::vector<bool>> held, HeldSlots(shards));
  PS_RETURN_IF_ERROR(CheckCovered(held, wanted_slots));
  absl::flat_hash_map<std::string, const v1::TableSpec*> targets;
  for (const v1::TableSpec& t : target_tables) {
    if (!targets.emplace(MatchName(t), &t).second) {
      return absl::FailedPreconditionError(
          absl::StrCat("two target tables are named '", MatchName(t), "'"));
    }
  }
  // Shards holding wanted slots first: the first one read tells whether table ids change,
  // in which case every shard is read.
  std::vector<size_t> order(shards.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_partition(order.begin(), order.end(),
                        [&](size_t i) { return Intersects(held[i], wanted_slots); });
  bool remap = false;
  bool decided = false;
  RowCollector rows;
  for (size_t i : order) {
    if (!remap && !Intersects(held[i], wanted_slots)) continue;
    const std::string& path = shards[i].path();
    PS_ASSIGN_OR_RETURN(std::unique_ptr<rocksdb::DB> db, OpenShard(path));
    PS_ASSIGN_OR_RETURN(const v1::CheckpointShardMeta meta, ReadMeta(db.get(), path));
    if ((!options.job_id.empty() && meta.job_id() != options.job_id) ||
        (options.checkpoint_id != 0 && meta.checkpoint_id() != options.checkpoint_id)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint shard ", path, " holds checkpoint ", meta.checkpoint_id(), " of job '",
          meta.job_id(), "', not ", options.checkpoint_id, " of '", options.job_id, "'"));
    }
    PS_ASSIGN_OR_RETURN(const auto tables, MapTables(meta, path, targets));
    if (!decided) {
      decided = true;
      for (const auto& [id, target] : tables) remap = remap || id != target.table_id;
      if (remap) PS_RETURN_IF_ERROR(CheckCovered(held, std::vector<bool>(kNumSlots, true)));
    }
    uint32_t last_table = 0;
    for (const v1::TableSpec& t : meta.tables()) last_table = std::max(last_table, t.table_id());
    const ShardRead shard{path, tables, remap, wanted_slots, last_table};
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(VerifyingReads()));
    for (uint32_t s = 0; s < kNumSlots; ++s) {
      if (held[i][s] && (remap || wanted_slots[s])) {
        PS_RETURN_IF_ERROR(ReadSlot(db.get(), it.get(), shard, s, rows));
      }
    }
  }
  return rows.Take();
}

}  // namespace ps
