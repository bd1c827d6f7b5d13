#include "server/disk_tier.h"

#include <glog/logging.h>
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/iterator.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/options.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

void AppendBigEndian(uint64_t v, int bytes, std::string* out) {
  for (int i = bytes - 1; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t ReadBigEndian(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

constexpr size_t kSlotBytes = 2;
constexpr size_t kKeyBytes = 8;

std::string SlotPrefix(absl::string_view prefix, uint32_t slot) {
  std::string out(prefix);
  AppendBigEndian(slot, kSlotBytes, &out);
  return out;
}

std::string RowKey(absl::string_view prefix, uint32_t slot, uint64_t key) {
  std::string out = SlotPrefix(prefix, slot);
  AppendBigEndian(key, kKeyBytes, &out);
  return out;
}

// A key after every row key under `prefix` (a job's or a table's): the prefix, then more 0xff
// bytes than the longest suffix a row key has there (table id, slot, key).
std::string PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  end.append(4 + kSlotBytes + kKeyBytes + 1, '\xff');
  return end;
}

// A row key's slot prefix (job, table, slot): the key without its last 8 bytes. The write
// buffers hash rows by it (a small skip list per slot instead of one deep one).
class SlotPrefixTransform : public rocksdb::SliceTransform {
 public:
  const char* Name() const override { return "ps.SlotPrefix"; }
  rocksdb::Slice Transform(const rocksdb::Slice& key) const override {
    return rocksdb::Slice(key.data(), key.size() - kKeyBytes);
  }
  bool InDomain(const rocksdb::Slice& key) const override { return key.size() > kKeyBytes; }
};

rocksdb::Options DbOptions(const DiskTier::Options& o) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.error_if_exists = true;
  options.compression = rocksdb::kNoCompression;  // float rows hardly compress; costs time
  options.write_buffer_size = o.write_buffer_bytes;
  options.max_write_buffer_number = 2;
  // A bloom filter over the write buffer's keys too (whole keys): a read of a key not there
  // skips the skip list.
  options.memtable_prefix_bloom_size_ratio = 0.05;
  options.memtable_whole_key_filtering = true;
  // Written-back rows land at random places of the key space: one skip list per slot (hashed
  // by SlotPrefixTransform into 4096 buckets: 32 KiB) keeps inserts shallow. Scans stay within
  // one slot (ScanSlot).
  options.prefix_extractor = std::make_shared<SlotPrefixTransform>();
  options.memtable_factory.reset(rocksdb::NewHashSkipListRepFactory(4096));
  options.allow_concurrent_memtable_write = false;  // not with a hash memtable
  options.level_compaction_dynamic_level_bytes = true;
  options.max_background_jobs = 2;
  options.avoid_flush_during_shutdown = true;  // the tier is removed when closed
  options.info_log_level = rocksdb::WARN_LEVEL;
  options.keep_log_file_num = 2;
  rocksdb::BlockBasedTableOptions table;
  table.block_size = o.block_bytes;
  table.checksum = rocksdb::kXXH3;  // as checkpoints: Debian's CRC32c is slow (checkpoint_io.cc)
  table.block_cache = rocksdb::NewLRUCache(o.block_cache_bytes);
  table.cache_index_and_filter_blocks = false;  // held by the table readers: a fixed cost
  if (o.bloom_bits_per_key > 0) {
    table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(o.bloom_bits_per_key));
  }
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

rocksdb::WriteOptions NoWal() {
  rocksdb::WriteOptions w;
  w.disableWAL = true;  // the tier need not survive a crash: checkpoints do
  return w;
}

}  // namespace

DiskTier::DiskTier(std::string dir, uint64_t min_free_bytes, std::unique_ptr<rocksdb::DB> db)
    : dir_(std::move(dir)), min_free_bytes_(min_free_bytes), db_(std::move(db)) {}

DiskTier::~DiskTier() {
  if (db_ != nullptr) db_->Close().PermitUncheckedError();
  std::error_code ec;
  fs::remove_all(dir_, ec);
  if (ec) LOG(WARNING) << "disk tier: cannot remove " << dir_ << ": " << ec.message();
}

absl::StatusOr<std::unique_ptr<DiskTier>> DiskTier::Open(const Options& options) {
  if (options.dir.empty()) return absl::InvalidArgumentError("disk tier: no directory");
  std::error_code ec;
  fs::remove_all(options.dir, ec);  // a previous process's tier: its rows mean nothing now
  if (!ec) fs::create_directories(fs::path(options.dir).parent_path(), ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("disk tier: cannot prepare ", options.dir, ": ", ec.message()));
  }
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(DbOptions(options), options.dir, &raw);
  std::unique_ptr<DiskTier> tier(
      new DiskTier(options.dir, options.min_free_bytes, std::unique_ptr<rocksdb::DB>(raw)));
  if (!s.ok()) return tier->FromRocksDb(s, "open");
  return tier;
}

absl::Status DiskTier::FromRocksDb(const rocksdb::Status& s, absl::string_view what) const {
  if (s.ok()) return absl::OkStatus();
  const std::string message = s.ToString();
  if (s.IsNoSpace() || absl::StrContains(message, "No space left") ||
      absl::StrContains(message, "o space")) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the disk tier at ", dir_, " is full (", what, "): ", message));
  }
  return absl::UnavailableError(absl::StrCat("disk tier at ", dir_, ": ", what, ": ", message));
}

absl::Status DiskTier::CheckRoom(absl::string_view what) const {
  if (min_free_bytes_ == 0) return absl::OkStatus();
  struct statvfs fs_stats;
  if (statvfs(dir_.c_str(), &fs_stats) != 0) {
    return absl::UnavailableError(
        absl::StrCat("disk tier at ", dir_, ": ", what, ": statvfs: ", std::strerror(errno)));
  }
  const uint64_t free_bytes = uint64_t{fs_stats.f_bavail} * fs_stats.f_frsize;
  if (free_bytes >= min_free_bytes_) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the disk tier at ", dir_, " is full (", what, "): ", free_bytes >> 20,
      " MiB free, under the reserve of ", min_free_bytes_ >> 20, " MiB (--tier_min_free_mb)"));
}

std::string DiskTier::JobPrefix(absl::string_view job_id) {
  std::string out;
  AppendBigEndian(job_id.size(), 2, &out);
  out.append(job_id.data(), job_id.size());
  return out;
}

std::string DiskTier::TablePrefix(absl::string_view job_id, uint32_t table_id) {
  std::string out = JobPrefix(job_id);
  AppendBigEndian(table_id, 4, &out);
  return out;
}

absl::Status DiskTier::Put(absl::string_view prefix, uint32_t slot, absl::Span<const Row> rows) {
  if (rows.empty()) return absl::OkStatus();
  if (absl::Status room = CheckRoom("write back"); !room.ok()) return room;
  rocksdb::WriteBatch batch;
  for (const Row& r : rows) {
    rocksdb::Status s = batch.Put(RowKey(prefix, slot, r.first), r.second);
    if (!s.ok()) return FromRocksDb(s, "write back");
  }
  return FromRocksDb(db_->Write(NoWal(), &batch), "write back");
}

absl::Status DiskTier::Apply(absl::string_view prefix, absl::Span<const Write> puts,
                             absl::Span<const std::pair<uint32_t, uint64_t>> deletes) {
  if (puts.empty() && deletes.empty()) return absl::OkStatus();
  if (!puts.empty()) {
    if (absl::Status room = CheckRoom("write back"); !room.ok()) return room;
  }
  rocksdb::WriteBatch batch;
  for (const Write& w : puts) {
    rocksdb::Status s = batch.Put(RowKey(prefix, w.slot, w.key), w.row);
    if (!s.ok()) return FromRocksDb(s, "write back");
  }
  for (const auto& [slot, key] : deletes) {
    rocksdb::Status s = batch.Delete(RowKey(prefix, slot, key));
    if (!s.ok()) return FromRocksDb(s, "write back");
  }
  return FromRocksDb(db_->Write(NoWal(), &batch), "write back");
}

absl::Status DiskTier::MultiGet(absl::string_view prefix, uint32_t slot,
                                absl::Span<const uint64_t> keys, std::vector<std::string>* values,
                                std::vector<bool>* found) const {
  std::vector<std::pair<uint32_t, uint64_t>> slot_keys;
  slot_keys.reserve(keys.size());
  for (uint64_t key : keys) slot_keys.emplace_back(slot, key);
  return MultiGet(prefix, slot_keys, values, found);
}

absl::Status DiskTier::MultiGet(absl::string_view prefix,
                                absl::Span<const std::pair<uint32_t, uint64_t>> keys,
                                std::vector<std::string>* values, std::vector<bool>* found) const {
  const size_t n = keys.size();
  values->assign(n, std::string());
  found->assign(n, false);
  if (n == 0) return absl::OkStatus();
  std::vector<std::string> key_bytes(n);
  std::vector<rocksdb::Slice> slices(n);
  for (size_t i = 0; i < n; ++i) {
    key_bytes[i] = RowKey(prefix, keys[i].first, keys[i].second);
    slices[i] = key_bytes[i];
  }
  std::vector<rocksdb::PinnableSlice> out(n);
  std::vector<rocksdb::Status> statuses(n);
  db_->MultiGet(rocksdb::ReadOptions(), db_->DefaultColumnFamily(), n, slices.data(), out.data(),
                statuses.data());
  for (size_t i = 0; i < n; ++i) {
    if (statuses[i].IsNotFound()) continue;
    if (!statuses[i].ok()) return FromRocksDb(statuses[i], "read back");
    (*values)[i].assign(out[i].data(), out[i].size());
    (*found)[i] = true;
  }
  return absl::OkStatus();
}

absl::Status DiskTier::Delete(absl::string_view prefix, uint32_t slot,
                              absl::Span<const uint64_t> keys) {
  if (keys.empty()) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  for (uint64_t key : keys) {
    rocksdb::Status s = batch.Delete(RowKey(prefix, slot, key));
    if (!s.ok()) return FromRocksDb(s, "delete");
  }
  return FromRocksDb(db_->Write(NoWal(), &batch), "delete");
}

absl::Status DiskTier::DeleteSlot(absl::string_view prefix, uint32_t slot) {
  const std::string begin = SlotPrefix(prefix, slot);
  return FromRocksDb(
      db_->DeleteRange(NoWal(), db_->DefaultColumnFamily(), begin, SlotPrefix(prefix, slot + 1)),
      "delete a slot");
}

absl::Status DiskTier::DeletePrefix(absl::string_view prefix) {
  // A full disk stops writes (RocksDB's background error); a drop frees space: try to resume.
  db_->Resume().PermitUncheckedError();
  const std::string begin(prefix);
  return FromRocksDb(
      db_->DeleteRange(NoWal(), db_->DefaultColumnFamily(), begin, PrefixEnd(prefix)), "delete");
}

DiskTier::Snapshot DiskTier::TakeSnapshot(const Snapshot& recent) const {
  // (Sequence numbers are published when a write is done: none since `recent`, same rows.)
  if (recent != nullptr && recent->GetSequenceNumber() == db_->GetLatestSequenceNumber()) {
    return recent;
  }
  rocksdb::DB* db = db_.get();
  return Snapshot(db->GetSnapshot(), [db](const rocksdb::Snapshot* s) { db->ReleaseSnapshot(s); });
}

uint64_t DiskTier::NumSnapshots() const {
  return IntProperty(rocksdb::DB::Properties::kNumSnapshots);
}

uint64_t DiskTier::IntProperty(const std::string& name) const {
  uint64_t n = 0;
  return db_->GetIntProperty(name, &n) ? n : 0;
}

absl::Status DiskTier::ScanSlot(absl::string_view prefix, uint32_t slot,
                                absl::FunctionRef<void(uint64_t key, absl::string_view row)> fn,
                                const Snapshot& at) const {
  return ScanSlotFrom(
      prefix, slot, 0,
      [&](uint64_t key, absl::string_view row) {
        fn(key, row);
        return true;
      },
      at);
}

absl::Status DiskTier::ScanSlotFrom(absl::string_view prefix, uint32_t slot, uint64_t from,
                                    absl::FunctionRef<bool(uint64_t key, absl::string_view row)> fn,
                                    const Snapshot& at) const {
  const std::string begin = SlotPrefix(prefix, slot);
  const std::string end = SlotPrefix(prefix, slot + 1);
  rocksdb::ReadOptions read;
  read.snapshot = at.get();
  const rocksdb::Slice upper(end);
  read.iterate_upper_bound = &upper;
  read.fill_cache = false;  // a scan (checkpoint, TTL sweep) would push the hot blocks out
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
  // A row key of the slot: its prefix (SlotPrefixTransform) picks the slot's rows.
  for (it->Seek(RowKey(prefix, slot, from)); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    if (k.size() != begin.size() + kKeyBytes) continue;  // not a row key (none are written)
    const rocksdb::Slice v = it->value();
    if (!fn(ReadBigEndian(k.data() + begin.size(), kKeyBytes),
            absl::string_view(v.data(), v.size()))) {
      break;
    }
  }
  return FromRocksDb(it->status(), "scan a slot");
}

}  // namespace ps
