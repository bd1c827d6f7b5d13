// A server's disk tier: one RocksDB holding the rows that tiered sparse tables (TableSpec.tier)
// evicted from RAM, keyed so that the rows of one job, one table and one slot are a contiguous
// range. The tier is a cache's backing store for this process only: it is emptied when opened
// and removed when closed (checkpoints are what survive a restart).
//
// Keys (integers big-endian, so that they sort by job, table, slot, key):
//   [job id length u16][job id][table id u32][slot u16][key u64]
// Values: the row's bytes as TableStore keeps them in RAM, after the key (update count, last
// use, values as stored, optimizer state, delta stamps): a row comes back bit for bit.
//
// RocksDB options (see Options and docs/embedding-tables.md#disk-tier), chosen for point reads
// of rows that mostly miss RAM and writes that need not survive a crash:
//  - no write-ahead log (the tier is not durable by design), no compression (float rows hardly
//    compress; CPU on the request path);
//  - a bloom filter of 10 bits a key (1% false positives): a pull of a key never seen (the
//    common miss on a new id) costs no disk read. 1.25 bytes of RAM per on-disk row;
//  - 8 KiB blocks: the index holds one entry (about 30 bytes) per block, about 0.2-0.5 bytes of
//    RAM per on-disk row for rows of 16-64 bytes, read amplification of one block per miss;
//    index and filters stay in the table readers' memory (not in the block cache), so their
//    cost is fixed and lookups never wait on them;
//  - a small block cache (Options::block_cache_bytes, 32 MiB): the table's RAM rows are the
//    cache of hot rows already; the OS page cache holds recently read blocks (no direct I/O);
//  - two write buffers of Options::write_buffer_bytes (8 MiB) each, hashed by slot (a small skip
//    list per slot: written-back rows land at random places, and one deep skip list was the
//    bottleneck) with a whole-key bloom filter (a read of a key not there skips the lists);
//    written-back rows batch into large sorted files;
//  - no flush at close (the tier is removed then), no write stall tuning (none was seen).
// So RAM per on-disk row is about 1.5-2 bytes plus fixed costs (write buffers, block cache).
//
// Thread-safe (RocksDB is). Every rocksdb::Status is converted here (FromRocksDb): a full disk
// is RESOURCE_EXHAUSTED naming the directory, and so is a write that would leave less than
// Options::min_free_bytes free (checked with statvfs before each write batch).
#ifndef PS_SERVER_DISK_TIER_H_
#define PS_SERVER_DISK_TIER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace rocksdb {
class DB;
class Snapshot;
class Status;
}  // namespace rocksdb

namespace ps {

class DiskTier {
 public:
  struct Options {
    // Where the database lives: created (with its parents); whatever is there is removed first.
    std::string dir;
    // RocksDB's block cache (LRU), bytes.
    size_t block_cache_bytes = size_t{32} << 20;
    // Bytes of one write buffer (memtable); two at most are held.
    size_t write_buffer_bytes = size_t{8} << 20;
    // Bytes of an SST block (the unit of a read from disk).
    size_t block_bytes = size_t{8} << 10;
    // Bloom filter bits per key (0: no filter).
    int bloom_bits_per_key = 10;
    // Free bytes the tier leaves on its filesystem: a write (Put, Apply) that finds less free
    // is RESOURCE_EXHAUSTED before RocksDB sees it. RocksDB itself must never meet a full disk:
    // its flushes and compactions need room beside the files they replace, a write error stops
    // its writes until Resume(), and Debian's build (7.8) aborts on an assertion in some write
    // paths after an I/O error. 0: no reserve (RocksDB's own errors only).
    uint64_t min_free_bytes = uint64_t{1} << 30;
  };
  // A (key, stored row) pair to write.
  using Row = std::pair<uint64_t, std::string>;

  // Opens an empty tier at options.dir. INVALID_ARGUMENT for an empty dir; UNAVAILABLE where the
  // directory cannot be created or opened.
  static absl::StatusOr<std::unique_ptr<DiskTier>> Open(const Options& options);
  // Closes the database and removes its directory.
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // The key prefix of a job's rows, and of one of its tables.
  static std::string JobPrefix(absl::string_view job_id);
  static std::string TablePrefix(absl::string_view job_id, uint32_t table_id);

  // Writes rows of one slot of a table (`prefix`: TablePrefix) in one batch.
  absl::Status Put(absl::string_view prefix, uint32_t slot, absl::Span<const Row> rows);
  // One batch of writes to several slots of a table: `puts` (slot, key, stored row) and
  // `deletes` (slot, key), applied together or not at all.
  struct Write {
    uint32_t slot;
    uint64_t key;
    std::string row;  // empty for a delete
  };
  absl::Status Apply(absl::string_view prefix, absl::Span<const Write> puts,
                     absl::Span<const std::pair<uint32_t, uint64_t>> deletes);
  // Reads the rows of `keys` (all of one slot) with one batched read (MultiGet): (*values)[i] is
  // key i's stored row where (*found)[i].
  absl::Status MultiGet(absl::string_view prefix, uint32_t slot, absl::Span<const uint64_t> keys,
                        std::vector<std::string>* values, std::vector<bool>* found) const;
  // The same for keys of several slots ((slot, key) pairs) in one read.
  absl::Status MultiGet(absl::string_view prefix,
                        absl::Span<const std::pair<uint32_t, uint64_t>> keys,
                        std::vector<std::string>* values, std::vector<bool>* found) const;
  // Deletes the rows of `keys` (of one slot) in one batch.
  absl::Status Delete(absl::string_view prefix, uint32_t slot, absl::Span<const uint64_t> keys);
  // Deletes every row of a slot of a table, and every row under a prefix (a job or a table).
  absl::Status DeleteSlot(absl::string_view prefix, uint32_t slot);
  absl::Status DeletePrefix(absl::string_view prefix);
  // A consistent view of the whole tier as of the moment it was taken (a RocksDB snapshot):
  // reads at it see no later write. Released when its last copy goes, which must be before the
  // tier is destroyed. Checkpoints of tiered tables read their rows on disk at one.
  using Snapshot = std::shared_ptr<const rocksdb::Snapshot>;
  // The tier now. `recent` (may be null) is handed back instead where nothing was written since
  // it was taken: the same view, one RocksDB snapshot less.
  Snapshot TakeSnapshot(const Snapshot& recent = nullptr) const;
  // RocksDB snapshots held (taken and not released yet).
  uint64_t NumSnapshots() const;
  // A RocksDB integer property of the tier ("rocksdb.block-cache-capacity"); 0 if unknown.
  uint64_t IntProperty(const std::string& name) const;
  // Calls fn(key, stored row) for every row of a slot of a table, in key order, as of the call
  // (a consistent view: writes meanwhile are not seen), or as of `at` if given.
  absl::Status ScanSlot(absl::string_view prefix, uint32_t slot,
                        absl::FunctionRef<void(uint64_t key, absl::string_view row)> fn,
                        const Snapshot& at = nullptr) const;
  // The same from the first key >= `from` on, until fn returns false (the TTL sweep: a bounded
  // number of rows at a time). Reads bypass the block cache, as ScanSlot's do.
  absl::Status ScanSlotFrom(absl::string_view prefix, uint32_t slot, uint64_t from,
                            absl::FunctionRef<bool(uint64_t key, absl::string_view row)> fn,
                            const Snapshot& at = nullptr) const;

  const std::string& dir() const { return dir_; }

 private:
  DiskTier(std::string dir, uint64_t min_free_bytes, std::unique_ptr<rocksdb::DB> db);
  // RESOURCE_EXHAUSTED where the tier's filesystem has less than min_free_bytes_ free.
  absl::Status CheckRoom(absl::string_view what) const;
  // The one conversion of rocksdb::Status: a full disk is RESOURCE_EXHAUSTED, anything else
  // UNAVAILABLE, both naming the directory and `what` was being done.
  absl::Status FromRocksDb(const rocksdb::Status& s, absl::string_view what) const;

  const std::string dir_;
  const uint64_t min_free_bytes_;
  const std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace ps

#endif  // PS_SERVER_DISK_TIER_H_
