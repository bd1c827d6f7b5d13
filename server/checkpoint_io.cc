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
#include "server/internal/checkpoint_format.h"
#include "server/internal/crc32c.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

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

// Rows written: how many, and their floats' bytes.
struct Written {
  uint64_t rows = 0;
  uint64_t bytes = 0;
};

// Writes the rows of one table in one slot in key order: `ram`'s (may be null) merged with those
// `reader` reads of `disk` (may be null), a key in both written once, from RAM (a stale copy on
// disk). Extends the slot's CRC and `written`.
absl::Status PutSlotRows(const SlotRows* ram, const DiskSlotRows* disk, const DiskRowReader* reader,
                         ShardSink& sink, uint32_t* crc, Written* written) {
  const uint32_t slot = ram != nullptr ? ram->slot : disk->slot;
  const uint32_t table_id = ram != nullptr ? ram->table_id : disk->table_id;
  const uint32_t row_floats = ram != nullptr ? ram->row_floats : disk->row_floats;
  std::vector<uint32_t> order(ram != nullptr ? ram->size() : 0);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return ram->keys[a] < ram->keys[b]; });
  char key[kRowKeyBytes];
  PutBigEndian(slot, 2, key);
  PutBigEndian(table_id, 4, key + 2);
  const size_t row_bytes = row_floats * sizeof(float);
  std::string value(kUpdateBytes + row_bytes, '\0');
  const auto put = [&](uint64_t k, int64_t updates, const float* row) {
    PutBigEndian(k, 8, key + 6);
    PutLittleEndian64(static_cast<uint64_t>(updates), value.data());
    std::memcpy(value.data() + kUpdateBytes, row, row_bytes);  // floats: little-endian
    *crc = Crc32cExtend(*crc, key, kRowKeyBytes);
    *crc = Crc32cExtend(*crc, value.data(), value.size());
    ++written->rows;
    written->bytes += row_bytes;
    return sink.Put(rocksdb::Slice(key, kRowKeyBytes), value);
  };
  size_t next = 0;  // of `order`: the RAM rows written so far
  const auto put_ram_below = [&](uint64_t limit, bool all) -> absl::Status {
    for (; next < order.size() && (all || ram->keys[order[next]] < limit); ++next) {
      const uint32_t i = order[next];
      PS_RETURN_IF_ERROR(put(ram->keys[i], ram->updates[i], ram->row(i)));
    }
    return absl::OkStatus();
  };
  if (disk != nullptr) {
    if (reader == nullptr || disk->row_floats != row_floats) {
      return absl::InvalidArgumentError(absl::StrCat("snapshot: rows on disk of table ", table_id,
                                                     " in slot ", slot, " cannot be read"));
    }
    PS_RETURN_IF_ERROR(
        reader->Read(*disk, [&](uint64_t k, int64_t updates, const float* row) -> absl::Status {
          PS_RETURN_IF_ERROR(put_ram_below(k, false));
          if (next < order.size() && ram->keys[order[next]] == k) return absl::OkStatus();
          return put(k, updates, row);
        }));
  }
  return put_ram_below(0, true);
}

// Puts every row of `snapshot` (those in RAM, and those its disk_reader reads), then the slot
// records, then `meta` with the rows and bytes written: in key order.
absl::Status PutShard(const JobSnapshot& snapshot, v1::CheckpointShardMeta* meta,
                      const CheckpointWriteOptions& options, ShardSink& sink, Written* written) {
  // One entry per (slot, table): its rows in RAM and on disk, either may be null.
  struct Part {
    uint32_t slot;
    uint32_t table_id;
    const SlotRows* ram;
    const DiskSlotRows* disk;
  };
  absl::flat_hash_map<std::pair<uint32_t, uint32_t>, Part> by_id;
  for (const SlotRows& r : snapshot.rows) {
    by_id.try_emplace({r.slot, r.table_id}, Part{r.slot, r.table_id, nullptr, nullptr})
        .first->second.ram = &r;
  }
  for (const DiskSlotRows& d : snapshot.disk) {
    by_id.try_emplace({d.slot, d.table_id}, Part{d.slot, d.table_id, nullptr, nullptr})
        .first->second.disk = &d;
  }
  std::vector<Part> parts;
  for (const auto& [id, part] : by_id) parts.push_back(part);
  std::sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) {
    return std::make_pair(a.slot, a.table_id) < std::make_pair(b.slot, b.table_id);
  });
  std::vector<std::pair<uint64_t, uint32_t>> records(kNumSlots);  // (rows, crc) per slot
  auto next = parts.begin();
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    if (options.cancel != nullptr && options.cancel->load(std::memory_order_relaxed)) {
      return absl::CancelledError("checkpoint write cancelled");
    }
    for (; next != parts.end() && next->slot == s; ++next) {
      if (!snapshot.slots[s]) {
        return absl::InvalidArgumentError(
            absl::StrCat("snapshot rows in slot ", s, ", which it does not own"));
      }
      const uint64_t before = written->rows;
      PS_RETURN_IF_ERROR(PutSlotRows(next->ram, next->disk, snapshot.disk_reader.get(), sink,
                                     &records[s].second, written));
      records[s].first += written->rows - before;
    }
    PS_RETURN_IF_ERROR(sink.EndSlot());
  }
  if (next != parts.end()) return absl::InvalidArgumentError("snapshot rows in a slot >= 1024");
  char record[kSlotRecordBytes];
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    if (!snapshot.slots[s]) continue;
    PutBigEndian(records[s].first, 8, record);
    PutBigEndian(records[s].second, 4, record + 8);
    PS_RETURN_IF_ERROR(sink.Put(SlotRecordKey(s), rocksdb::Slice(record, kSlotRecordBytes)));
  }
  meta->set_rows(written->rows);
  meta->set_bytes(written->bytes);
  PS_RETURN_IF_ERROR(sink.Put(MetaKey(), meta->SerializeAsString()));
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
  meta.set_format_version(kCheckpointFormatVersion);
  meta.set_job_id(snapshot.job_id);
  meta.clear_tables();
  for (const v1::TableSpec& t : snapshot.tables) *meta.add_tables() = t;
  meta.set_slots(EncodeSlotBitmap(snapshot.slots));

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
  Written written;
  absl::Status s = PutShard(snapshot, &meta, options, *sink, &written);
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
  stats.rows = written.rows;
  stats.bytes = written.bytes;
  stats.disk_bytes = DirectoryBytes(path);
  stats.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return stats;
}

namespace {

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
  return DecodeMeta(value, path);
}

// Reads and verifies one slot of a shard, adding the wanted rows to `rows`.
absl::Status ReadSlot(rocksdb::DB* db, rocksdb::Iterator* it, const ShardRead& shard, uint32_t slot,
                      RowCollector& rows) {
  const std::string where = absl::StrCat("checkpoint shard ", shard.path, ": slot ", slot);
  std::string record;
  const rocksdb::Status s = db->Get(VerifyingReads(), SlotRecordKey(slot), &record);
  if (s.IsNotFound()) return absl::DataLossError(absl::StrCat(where, ": no slot record"));
  PS_RETURN_IF_ERROR(FromRocksDb(s, absl::StatusCode::kDataLoss, where));
  PS_ASSIGN_OR_RETURN(SlotDecoder decoder, SlotDecoder::Start(shard, slot, record));
  const std::string prefix = SlotPrefix(slot);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    PS_RETURN_IF_ERROR(decoder.Add(absl::string_view(it->key().data(), it->key().size()),
                                   absl::string_view(it->value().data(), it->value().size()),
                                   rows));
  }
  PS_RETURN_IF_ERROR(FromRocksDb(it->status(), absl::StatusCode::kDataLoss, where));
  return decoder.Finish();
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
