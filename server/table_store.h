// The rows this server holds, sharded into virtual slots, and the updates applied to them.
#ifndef PS_SERVER_TABLE_STORE_H_
#define PS_SERVER_TABLE_STORE_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ps/v1/parameter_server.pb.h"
#include "server/disk_tier.h"
#include "server/internal/admission_sketch.h"
#include "server/internal/job_shards.h"
#include "server/internal/row_arena.h"
#include "server/internal/row_index.h"
#include "server/internal/scattered_values.h"
#include "server/internal/slot_groups.h"
#include "server/optimizer.h"
#include "server/server_metrics.h"
#include "server/slot_rows.h"

namespace ps {

// What to do with a pushed gradient that holds NaN or Inf.
enum class NonFinitePolicy {
  kReject,   // the whole request fails with INVALID_ARGUMENT; nothing is applied (default)
  kSkipRow,  // rows whose gradient is not finite are left unchanged; the rest apply
};

struct TableStoreOptions {
  // Slots this server owns (kNumSlots entries) for jobs that did not say otherwise
  // (SetJobShards); empty means every slot.
  std::vector<bool> owned_slots;
  uint64_t shard_epoch = 1;
  NonFinitePolicy nonfinite = NonFinitePolicy::kReject;
  // Largest number of keys in one block of a request.
  size_t max_keys_per_block = size_t{1} << 22;
  // Largest answer a pull may ask for (keys x dim x 4 bytes, all blocks together); a larger
  // one is refused before any row is created (it could not be sent anyway).
  uint64_t max_pull_bytes = uint64_t{256} << 20;
  // Largest row dimension a table may declare.
  uint32_t max_dim = 1u << 20;
  // Largest dense table (values + optimizer state, whole table, all servers), bytes.
  uint64_t max_dense_table_bytes = uint64_t{64} << 30;
  // Most row bytes (as stored: key, bookkeeping, values, optimizer state) one job's tables may
  // hold on this server: dense tables count with this server's expected share when created,
  // sparse rows as they are created (by a pull or push of a new key). Beyond it, CreateTable and
  // requests that would create rows are RESOURCE_EXHAUSTED. Concurrent requests may overshoot it
  // by their own rows.
  uint64_t max_job_bytes = uint64_t{16} << 30;
  // Rows live in per-table arenas; with this, their 2 MiB chunks are marked for transparent huge
  // pages (madvise): fewer TLB misses when rows are looked up at random, but where the kernel is
  // slow to fault huge pages in the first time (some VMs), new rows cost more to create.
  bool huge_pages = false;
  // The disk tier of tables with tier.disk (docs/embedding-tables.md#disk-tier): opened at the
  // first such table. tier.dir empty (the default): no disk tier, and such tables are refused.
  DiskTier::Options tier;
  // How long a prefetched row stays pinned in RAM at most when no pull reads it (Prefetch's
  // pin_for for prefetches from the wire; ps_server --prefetch_pin).
  absl::Duration prefetch_pin = absl::Seconds(30);
  // The TTL sweep of rows on disk holds a slot's lock for this many rows at most, then lets
  // the slot's requests in and goes on from the next key. Tests set it small, and may have
  // `between_disk_sweep_chunks` run (with no lock held, the slot swept given) between chunks.
  uint64_t disk_sweep_chunk = 1024;
  std::function<void(uint32_t slot)> between_disk_sweep_chunks;
};

// Thread-safe. Each slot has its own lock: requests touching different slots never wait on each
// other. A job's tables are removed by DropJob(); a request holds the tables it resolved
// (shared_ptr) until it ends, and finds them marked dropped: it then creates no row and fails.
class TableStore {
 public:
  // A row in its table's arena: this header, then the values (dim floats, or dim halves padded
  // to 4 bytes, as the table's storage says), then the optimizer state (floats).
  struct RowHeader {
    uint64_t key;
    uint32_t updates;  // the optimizer's step count (saturates at 2^32 - 1)
    uint32_t used;     // when it was last pulled or pushed (TableStore::Now), if the table evicts
  };
  struct Table {
    v1::TableSpec spec;
    std::unique_ptr<RowOptimizer> optimizer;
    int dim = 0;
    int row_floats = 0;    // dim * (1 + optimizer state per value): a row as pulled with its state
    int state_floats = 0;  // dim * optimizer state per value
    v1::TableSpec::Storage storage = v1::TableSpec::FP32;
    size_t state_offset = 0;  // bytes from a row's start to its optimizer state
    size_t row_bytes = 0;     // a row's bytes in the arena (header, values, state)
    // Admission (SPARSE): a key gets a row at its min_count-th push (0: no count), each such push
    // admitting it with probability admit_p24 / 2^24.
    bool admission = false;
    uint32_t min_count = 0;
    uint32_t admit_p24 = 1u << 24;
    uint32_t sketch_width = 0;  // counters per sketch row, per slot
    // Eviction (SPARSE): the cap on rows (0: none) and the TTL in seconds (0: none).
    uint64_t max_rows = 0;
    uint32_t ttl_seconds = 0;
    bool tracks_use = false;  // rows' `used` is kept (max_rows or ttl_seconds set)
    // Where its rows live (each row's memory goes back here when the row is erased; all of it
    // when the table is destroyed, after its rows are).
    std::unique_ptr<RowArena> arena;
    // The rows of each slot (kNumSlots), and the admission counts of each slot (null without
    // admission); entry s is guarded by slot s's lock.
    std::unique_ptr<RowIndex[]> index;
    std::unique_ptr<AdmissionSketch[]> sketches;
    // Null without metrics; the series go with the last table of their job and name.
    std::unique_ptr<ServerMetrics::Table> metrics;
    // Disk tier (tier.disk; null without): rows evicted from RAM are written back there, under
    // `tier_prefix`. Entry s of `disk_rows_in_slot` (rows of slot s there) and of `pinned`
    // (prefetched keys -> the time their pin ends, TableStore::Now) is guarded by slot s's lock.
    DiskTier* tier = nullptr;
    std::string tier_prefix;
    std::unique_ptr<uint32_t[]> disk_rows_in_slot;
    std::unique_ptr<absl::flat_hash_map<uint64_t, uint32_t>[]> pinned;
    // Entries of `pinned` over all slots (at most PinBound), and keys a prefetch did not read
    // because of that bound or the cap (TableStats prefetch_pinned, prefetch_skipped).
    mutable std::atomic<uint64_t> pinned_rows{0}, prefetch_skipped{0};
    // Where the TTL sweep of its rows on disk goes on (ExpireOnDisk; Tick, one at a time).
    mutable std::atomic<uint32_t> disk_sweep_slot{0};
    mutable std::atomic<uint64_t> disk_sweep_key{0};
    // Its figures (TableStats): rows there, keys found in RAM, keys looked up on disk, rows
    // read back from disk, rows written back to it.
    mutable std::atomic<uint64_t> disk_rows{0}, ram_hits{0}, disk_lookups{0}, disk_reads{0},
        written_back{0};
    // The bytes of its rows on disk as stored (key and row; RocksDB's own overhead aside).
    uint64_t DiskBytes() const { return disk_rows.load() * (tier_prefix.size() + 2 + row_bytes); }
    // Rows held on this server (in RAM).
    mutable std::atomic<uint64_t> rows{0};
    // Bytes of the slots' indexes and sketches.
    mutable std::atomic<uint64_t> index_bytes{0};
    // What admission and eviction did (TableStats).
    mutable std::atomic<uint64_t> admitted{0}, rejected{0}, evicted{0}, expired{0};
    // Bytes of the values its codecs carried, as float32 (raw) and as encoded (wire), by
    // direction (TableStats push_raw_bytes ...).
    mutable std::atomic<uint64_t> push_raw{0}, push_wire{0}, pull_raw{0}, pull_wire{0};
    // A block of this table decoded from a push (`push`) or encoded for a pull answer: counts
    // its bytes here and in ps_server_table_codec_bytes_total.
    void CountCodecBytes(bool push, uint64_t raw_bytes, uint64_t wire_bytes) const;
    // When the admission counts last halved (TableStore::Now; tables with decay_seconds).
    mutable std::atomic<uint32_t> last_decay{0};

    uint32_t init_stream = 0;  // InitializerStream(spec)

    // Bytes of the rows held (as stored in the arena).
    uint64_t RowBytes() const { return rows.load() * arena->row_bytes(); }
    RowHeader* Header(char* row) const { return reinterpret_cast<RowHeader*>(row); }
    const RowHeader* Header(const char* row) const {
      return reinterpret_cast<const RowHeader*>(row);
    }
    float* State(char* row) const { return reinterpret_cast<float*>(row + state_offset); }
    const float* State(const char* row) const {
      return reinterpret_cast<const float*>(row + state_offset);
    }
    // The values as floats, where the row stores float32 (else null).
    float* Values32(char* row) const {
      return storage == v1::TableSpec::FP32 ? reinterpret_cast<float*>(row + sizeof(RowHeader))
                                            : nullptr;
    }
    // dim values to `out` as float32 (any alignment), and from `in`.
    void ReadValues(const char* row, void* out) const;
    void WriteValues(char* row, const float* in) const;
    // Delta pulls (pull_codec.delta): a uint32 change stamp per value at `stamp_offset` of each
    // row. Whatever writes a row's values stamps those it changes with pull_epoch (StampNow),
    // under the slot's lock; a pull takes an epoch e first (fetch_add) and then reads the rows,
    // each under its slot's lock: a write it did not see was stamped after, with e + 1 or more.
    // So the next pull of the same keys, since e + 1, is answered the values stamped e + 1 or
    // later (TableStore::PullDelta). Tokens carry `instance` (random per table object: a table
    // created again, or a server restarted, answers older tokens in full).
    bool delta = false;
    size_t stamp_offset = 0;
    uint32_t instance = 0;
    mutable std::atomic<uint64_t> pull_epoch{1};
    uint32_t* Stamps(char* row) const { return reinterpret_cast<uint32_t*>(row + stamp_offset); }
    const uint32_t* Stamps(const char* row) const {
      return reinterpret_cast<const uint32_t*>(row + stamp_offset);
    }
    // The stamp of a write now (epochs past 2^32 - 2 keep no tokens: PullDelta answers in full).
    uint32_t StampNow() const {
      return static_cast<uint32_t>(
          std::min<uint64_t>(pull_epoch.load(std::memory_order_acquire), UINT32_MAX));
    }
    // Stamps every value of `row` (written whole: created, restored), if the table keeps stamps.
    void StampRow(char* row) const {
      if (!delta) return;
      const uint32_t now = StampNow();
      std::fill(Stamps(row), Stamps(row) + dim, now);
    }
    // Set once, by DropJob, before any row of the table is erased. Whatever adds rows or sums
    // of the table to a slot checks it under that slot's lock, so nothing is added to a slot
    // that DropJob has already emptied.
    std::atomic<bool> dropped{false};
  };
  // A validated block of a request. Holds its table for as long as the view lives.
  struct BlockView {
    std::shared_ptr<const Table> table;
    absl::Span<const uint64_t> keys;
    absl::Span<const float> values;  // gradients (push), contiguous; empty for pull
    // Or the gradients where they arrived (a push read in place; then `values` is empty).
    const ScatteredValues* scattered = nullptr;
    // The keys grouped by slot (a large block: Resolve groups it once; the row passes reuse it).
    SlotGroups groups;
    // The gradient of key i (dim floats, at any alignment: read with memcpy or unaligned loads,
    // as the optimizers do): in `values`, else in `scattered`, copied into `scratch` (room for
    // dim floats) only if it straddles two pieces there.
    const void* Grad(size_t i, float* scratch) const {
      const size_t dim = static_cast<size_t>(table->dim);
      return scattered == nullptr ? values.data() + i * dim
                                  : scattered->Floats(i * dim, dim, scratch);
    }
  };
  // What DropJob freed.
  struct DroppedJob {
    bool first = false;  // the job was not dropped before (idempotent calls: false)
    uint32_t tables = 0;
    uint64_t bytes = 0;  // row bytes (values + optimizer state)
  };
  // Dropped job ids remembered (late requests of older ones just find no table).
  static constexpr size_t kMaxDroppedJobs = JobShards::kMaxDroppedJobs;

  // `metrics` (may be null: no metrics) must outlive this.
  explicit TableStore(TableStoreOptions options, ServerMetrics* metrics = nullptr);
  ~TableStore();
  TableStore(const TableStore&) = delete;
  TableStore& operator=(const TableStore&) = delete;

  // Creates a table; dense tables get their rows (in owned slots) at once. Creating the same
  // spec again is OK; a different spec under the same id is ALREADY_EXISTS; a table of a dropped
  // job is FAILED_PRECONDITION.
  absl::Status CreateTable(const v1::TableSpec& spec);

  // Drops every table of `job_id` (rows, pending sync gradients, memory accounting), its shards
  // and its learning-rate factors, and remembers the job as dropped: its requests, tables and
  // shards are refused from now on (FAILED_PRECONDITION, CheckNotDropped). Requests of the job
  // still running fail (Pull, Apply, Accumulate, LoadSlots) without adding anything.
  // Idempotent; a job never seen here is remembered too.
  DroppedJob DropJob(const std::string& job_id);
  // FAILED_PRECONDITION if `job_id` was dropped from this server.
  absl::Status CheckNotDropped(const std::string& job_id) const;
  absl::StatusOr<v1::DescribeTableResponse> Describe(uint32_t table_id) const;

  // Checks a block before anything is touched: known table of `job_id`, packed keys with no
  // duplicates, dense keys in range, keys in slots this server owns, and (if `with_values`)
  // values of keys*dim floats, finite unless the policy skips bad rows. With `scattered` (a
  // push read in place), the values are those and `block.values()` must be empty.
  absl::Status Resolve(const std::string& job_id, const v1::KeyBlock& block, bool with_values,
                       BlockView* view, const ScatteredValues* scattered = nullptr) const;

  // RESOURCE_EXHAUSTED (naming the job, the table and the cap) if the rows the blocks would
  // create (keys not held yet) would take the job past max_job_bytes.
  absl::Status CheckNewRows(absl::Span<const BlockView> views) const;
  // Row bytes `job_id`'s tables hold on this server.
  uint64_t JobBytes(const std::string& job_id) const;

  // INVALID_ARGUMENT if the blocks of one pull together would answer more than max_pull_bytes.
  absl::Status CheckPullSize(absl::Span<const BlockView> views) const;
  // Writes the keys' values (dim floats each, in key order) to `out`; creates missing sparse rows.
  // FAILED_PRECONDITION if the table was dropped meanwhile (DropJob).
  absl::Status Pull(const BlockView& view, std::string* out);
  // The same into `out`, which has room for keys x dim floats (an outgoing gRPC buffer).
  absl::Status Pull(const BlockView& view, char* out);
  // A pull of a table with pull_codec.delta: all the keys' values to `out` (keys x dim floats,
  // as Pull), the indices into them (increasing) of the values changed since `since` (a token
  // of an earlier answer) to `changed`, and this answer's token to `token`. `*full` is true
  // where `since` is 0 or not a token of this table object (another instance, or one not
  // answered yet), or more than `max_changed` values changed (the whole block is the smaller
  // answer then; they are not all collected): every value counts as changed and `changed` is
  // left empty. `token` is 0 once the table's pull epochs run past 2^32 - 2 (every answer is
  // full from then on).
  absl::Status PullDelta(const BlockView& view, uint64_t since, size_t max_changed, float* out,
                         std::vector<uint32_t>* changed, bool* full, uint64_t* token);
  // Tables with a disk tier: reads the rows of the block's keys that are on disk into RAM (one
  // batched read per slot) and pins them there (eviction passes them by) until a pull reads them
  // or `pin_for` has passed. A no-op for other tables. RESOURCE_EXHAUSTED if the rows they
  // push out of RAM cannot be written back (a full disk).
  absl::Status Prefetch(const BlockView& view, absl::Duration pin_for = absl::Seconds(30));
  // TableStoreOptions::prefetch_pin.
  absl::Duration prefetch_pin() const { return options_.prefetch_pin; }
  // Applies the gradients now (async / ssp), the learning rate multiplied by `lr_scale`.
  // FAILED_PRECONDITION if the table was dropped meanwhile (the rows left were dropped too).
  absl::Status Apply(const BlockView& view, float lr_scale = 1.0f);
  // Adds the gradients to the sums of `clock` (sync); ApplyAccumulated applies them with the
  // `lr_scale` of the clock's last push. FAILED_PRECONDITION if the table was dropped meanwhile.
  absl::Status Accumulate(const BlockView& view, int64_t clock, float lr_scale = 1.0f);
  // Applies (once per row) and clears the summed gradients of `clock` for tables of `job_id`.
  void ApplyAccumulated(const std::string& job_id, int64_t clock);
  // ApplyAccumulated for every clock in [from, to) that holds gradients of `job_id`, in order.
  // Costs what those clocks hold: never a pass per clock of the range.
  void ApplyAccumulated(const std::string& job_id, int64_t from, int64_t to);

  // Sets the slots this server owns for `job_id`'s tables (kNumSlots entries). A smaller epoch
  // than the job's current one is FAILED_PRECONDITION; the same epoch must bring the same slots.
  absl::Status SetJobShards(const std::string& job_id, std::vector<bool> owned, uint64_t epoch);

  // Slots this server owns for `job_id` (its own shards, else the default ones).
  uint32_t NumOwnedSlots(const std::string& job_id) const;

  // This server was declared dead and replaced (it registered again): from now on it owns no
  // slot of any job, so that a worker still holding an old shard map is refused (FAILED_
  // PRECONDITION, "fenced") instead of reading or writing rows another server now owns. A job
  // gets slots again from its next SetJobShards, at any epoch not older than the fenced one.
  void FenceAllJobs();

  // Rows held for a table (0 for an unknown one).
  uint64_t NumRows(uint32_t table_id) const;
  // This server's figures for a table (NOT_FOUND for an unknown one).
  absl::StatusOr<v1::TableStats> Stats(uint32_t table_id) const;

  // Moves the store's clock (whole seconds since it was created, from `now`), and with it: rows
  // of tables with a TTL unused for longer are dropped (about once a second), and admission
  // counts of tables with decay halve when their time comes. Called about once a second by the
  // server; tests call it with the times they need. Returns the rows expired.
  uint64_t Tick(absl::Time now);
  // Rows on disk a Tick's TTL sweep looks at, at most, per tiered table with a TTL.
  static constexpr uint64_t kDiskSweepRows = 65536;
  // The store's clock (seconds since it was created, as of the last Tick).
  uint32_t Now() const { return now_.load(std::memory_order_relaxed); }

  // The shard map epoch of `job_id` on this server (its own shards, else the default ones).
  uint64_t ShardEpoch(const std::string& job_id) const;
  // The slots this server owns for `job_id` (kNumSlots entries).
  std::vector<bool> OwnedSlots(const std::string& job_id) const;
  // FAILED_PRECONDITION if a request routed with shard map `epoch` is stale: older than the
  // job's epoch here. 0 (a client that does not say) always passes.
  absl::Status CheckShardEpoch(const std::string& job_id, uint64_t epoch) const;
  // The specs of `job_id`'s tables, by table id.
  std::vector<v1::TableSpec> JobTables(const std::string& job_id) const;

  // Copies every row (values, optimizer state, update count) of `job_id`'s tables in the slots
  // this server owns for the job, slot by slot, each under its lock; with the job's tables,
  // slots and shard epoch. Pending (sync, not yet applied) gradients are not part of it.
  // Tiered tables: only their rows in RAM are copied; under the same lock a view of the disk
  // tier is taken (a RocksDB snapshot), at which JobSnapshot::disk_reader reads the slot's rows
  // on disk later (the checkpoint write), so that the copy does not grow with them. A row that
  // moves between RAM and disk after its slot's copy is thus neither missed nor seen twice:
  // every write-back and read-back of a slot runs under its lock.
  JobSnapshot Snapshot(const std::string& job_id) const;
  // Snapshot of the slots with `slots[s]` (kNumSlots entries, owned here or not): a replica's
  // copy of the slots it forwards (server/replication_source.h). It copies rows on disk too.
  JobSnapshot SnapshotSlots(const std::string& job_id, const std::vector<bool>& slots) const;
  // RocksDB snapshots of the disk tier held now (by Snapshot()s of tiered tables not yet
  // dropped: checkpoints not yet written); 0 without a tier. For tests and tools.
  uint64_t TierSnapshots() const;
  // A RocksDB integer property of the disk tier (DiskTier::IntProperty); 0 without a tier.
  uint64_t TierIntProperty(const std::string& name) const;
  // For each slot s with `slots[s]` (kNumSlots entries), under the slot's lock: drops the rows of
  // `job_id`'s tables there and their pending sync gradients, then inserts the rows of `rows`
  // in that slot (their table ids are this store's). Slots without rows end up empty: their
  // rows get initial values when next used. Everything is checked first (every row in a listed
  // slot and in the slot its key maps to, tables of the job with the same row width, dense keys
  // in range): an error changes nothing. FAILED_PRECONDITION if the job is dropped before or
  // while it loads (what it loaded is dropped too).
  absl::Status LoadSlots(const std::string& job_id, const std::vector<bool>& slots,
                         const std::vector<SlotRows>& rows);
  // Drops all of `job_id`'s accumulated sync gradients and their learning-rate factors.
  void ClearPending(const std::string& job_id);
  // DATA_LOSS where sync sums of `job_id` could not be applied here (ApplyAccumulated: a disk
  // tier with no room, or one that could not be read): its rows in those slots are no longer
  // what the job trained, so every request of the job is refused, naming why, until those slots
  // are loaded again (LoadSlots: the job's restore from a checkpoint) or the job is dropped.
  absl::Status CheckNotLost(const std::string& job_id) const;

  // Calls `fn` for every row of the table held here (in RAM and on disk), in no particular
  // order, each under its slot's lock (`fn` must not call the store). For tests and tools.
  void ForEachRow(
      uint32_t table_id,
      absl::FunctionRef<void(uint64_t key, int64_t updates, absl::Span<const float> row)> fn) const;

 private:
  using RowKey = std::pair<uint32_t, uint64_t>;  // (table id, key)
  // Keys of a table that eviction must pass by (those of the request being served).
  using RowPins = absl::flat_hash_set<uint64_t>;
  struct Slot {
    // Guards this slot's entries of every table's `index` and `sketches` too.
    absl::Mutex mu;
    uint64_t random ABSL_GUARDED_BY(mu) = 0;  // xorshift state: eviction samples, admission
    // sync: summed gradients by clock, then by row.
    absl::flat_hash_map<int64_t, absl::flat_hash_map<RowKey, std::vector<float>>> pending
        ABSL_GUARDED_BY(mu);
  };

  using Shards = JobShards::Shards;
  using TableRef = std::shared_ptr<const Table>;
  // The table (dropped or not), or null.
  TableRef FindTable(uint32_t table_id) const;
  // The tables of `job_id` not dropped, by id.
  std::vector<TableRef> TablesOf(const std::string& job_id) const;
  // CreateTable's steps. A new table for `spec` (not added yet), or INVALID_ARGUMENT for a bad
  // spec, FAILED_PRECONDITION for a dropped job.
  absl::StatusOr<std::shared_ptr<Table>> NewTable(const v1::TableSpec& spec) const;
  // A new dense table's size: within max_dense_table_bytes, and this server's share within the
  // job's max_job_bytes (RESOURCE_EXHAUSTED) unless the table id is held already.
  absl::Status CheckDenseTable(const Table& table) const;
  // Adds `table` to tables_: true if added, false if a table of the same spec is held already;
  // ALREADY_EXISTS for another table of that id, FAILED_PRECONDITION for a dropped job.
  absl::StatusOr<bool> AddTable(const std::shared_ptr<Table>& table);
  // Creates a dense table's rows in the slots owned, so that pulls never allocate. Called after
  // tables_mu_ is released (the lock order is slot.mu -> tables_mu_): a request that touches the
  // table meanwhile creates missing rows the same way (RowFor). A DropJob meanwhile stops it.
  absl::Status MaterializeDenseRows(const Table& table);
  // Checks LoadSlots' arguments.
  absl::Status CheckLoad(const std::string& job_id, const std::vector<bool>& slots,
                         const std::vector<SlotRows>& rows,
                         const absl::flat_hash_map<uint32_t, TableRef>& tables) const;
  uint32_t SlotIndex(const Slot& slot) const { return static_cast<uint32_t>(&slot - slots_.get()); }
  // How a row pass treats keys without a row.
  enum class Missing {
    kCreate,  // create the row (dense tables, restores, tables without admission)
    kPull,    // create it unless the table has admission (then fn gets null: not admitted)
    kPush,    // create it if admission admits it now (counting the push), else skip the key
  };
  // The row of `key` (created if missing and `missing` allows); null if the table was dropped,
  // the key was not admitted or no memory was to be had (`*status` says which, if given).
  // Tables with a disk tier: a key not in RAM must have been read back first (ReadBack), and
  // `pins` passed; a row that cannot be written back leaves it null with `*status` set.
  char* RowFor(Slot& slot, const Table& table, uint64_t key, Missing missing = Missing::kCreate,
               const RowPins* pins = nullptr, absl::Status* status = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);
  // Whether a push of `key` (no row) admits it now: counts it in the slot's sketch.
  bool Admit(Slot& slot, const Table& table, uint64_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);
  // Rows of one table taken from its arena a few at a time (one lock for several new rows); those
  // not used go back when it is destroyed.
  class RowCache {
   public:
    explicit RowCache(RowArena* arena) : arena_(arena) {}
    ~RowCache() { arena_->FreeMany(rows_ + next_, size_ - next_); }
    RowCache(const RowCache&) = delete;
    RowCache& operator=(const RowCache&) = delete;
    // A row, or RowArena::kNoRow.
    uint32_t Take() {
      if (next_ == size_) {
        size_ = arena_->AllocateMany(rows_, kRows);
        next_ = 0;
        if (size_ == 0) return RowArena::kNoRow;
      }
      return rows_[next_++];
    }

   private:
    static constexpr size_t kRows = 32;
    RowArena* const arena_;
    uint32_t rows_[kRows];
    size_t next_ = 0;
    size_t size_ = 0;
  };
  // Creates the row of `key` (not in the slot) of `table`, initialized (or, with `stored`, as
  // it was stored on disk: StoredRow), evicting one first if the table is at its cap (never a
  // key of `pins`); the caller counts it (CountNewRows). Null if no memory, or (`*error` set)
  // if the row evicted could not be written back to the disk tier. Its memory comes from
  // `cache` if given.
  char* InsertRow(Slot& slot, const Table& table, uint64_t key, RowCache* cache = nullptr,
                  const RowPins* pins = nullptr, absl::Status* error = nullptr,
                  const char* stored = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);
  // InsertRow without making room first.
  char* PlaceRow(Slot& slot, const Table& table, uint64_t key, RowCache* cache, const char* stored)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);
  // Drops the least recently used of a few rows of `table` sampled in the slot (passing by keys
  // of `pins` and prefetched keys), writing it back first if the table has a disk tier; false
  // if none was dropped (`*error` set if the write-back failed: the row stays in RAM).
  bool EvictOne(Slot& slot, const Table& table, const RowPins* pins = nullptr,
                absl::Status* error = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);
  // EvictOne's choice: the least recently used of a few rows sampled in the slot, passing by
  // keys of `pins` and prefetched keys; kNoRow if none.
  uint32_t PickVictim(Slot& slot, const Table& table, const RowPins* pins)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);
  // EvictOne in a few other slots picked at random whose lock is free at once (TryLock: it never
  // waits, so it forms no lock order with the slots the caller holds); false if none evicted.
  bool EvictElsewhere(Slot& slot, const Table& table, absl::Status* error = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);
  // The disk tier's part (table_store_tier.cc). Whether eviction must pass `key` by.
  bool Pinned(const Table& table, uint32_t slot, uint64_t key, const RowPins* pins) const;
  // Prefetch pins: at most PinBound of a table's rows are pinned (half its RAM cap), so that a
  // prefetch never holds the whole cap; Unpin drops the pin of `key` (its row erased or read),
  // ClearPins the slot's, PruneExpiredPins those whose time is up (Tick).
  static uint64_t PinBound(const Table& table) { return table.max_rows / 2; }
  void Unpin(const Table& table, uint32_t slot, uint64_t key) const;
  void ClearPins(const Table& table, uint32_t slot) const;
  void PruneExpiredPins(const Table& table);
  // Writes `row` (of slot `slot`) back to the table's disk tier.
  absl::Status WriteBack(const Table& table, uint32_t slot, const char* row) const;
  // A row's bytes as the disk tier stores them (the row after its key), and the size.
  static size_t StoredBytes(const Table& table) { return table.row_bytes - sizeof(uint64_t); }
  // Reads the rows of `keys` (of the slot; any not in RAM) that are on disk back into RAM with
  // one batched read, evicting others (not `pins`) as needed. The table must have a tier.
  absl::Status ReadBack(Slot& slot, const Table& table, absl::Span<const uint64_t> keys,
                        const RowPins& pins) ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);
  // ForEachRow's pass over a batch of locked slots of a table with a disk tier: reads back what
  // is on disk (ReadBack, per slot), then hands every row to fn as ForEachRow does. `pull`:
  // unpins the prefetched keys read.
  absl::Status TieredBatch(const Table& t, absl::Span<const SlotGroupRef<Slot>> batch,
                           absl::Span<const uint64_t> keys, Missing missing, bool pull,
                           uint64_t* created, absl::FunctionRef<void(char*, uint32_t)> fn);
  // TieredBatch's first step: reads back the batch's keys that are on disk (one batched read
  // per slot) and makes room for the keys not in RAM by evicting rows of the batch's slots,
  // with one write to disk for both (the evicted rows, and deletes of the rows read back). A
  // failed write changes nothing in RAM.
  absl::Status SwapIn(const Table& t, absl::Span<const SlotGroupRef<Slot>> batch,
                      absl::Span<const uint64_t> keys, const RowPins& pins);
  // Evicts rows of the batch's slots until the table is within its cap again.
  void TrimToCap(const Table& t, absl::Span<const SlotGroupRef<Slot>> batch);
  // Before the sums of a slot are applied (ApplyAccumulated): reads back the rows of tiered
  // tables that are on disk; their keys to `pins` (by table id). An error leaves the table out
  // of `pins`: its sums there are not applied.
  void ReadBackPending(Slot& slot, const absl::flat_hash_map<RowKey, std::vector<float>>& sums,
                       const absl::flat_hash_map<uint32_t, std::shared_ptr<const Table>>& tables,
                       absl::flat_hash_map<uint32_t, RowPins>* pins)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);
  // Snapshot and SnapshotSlots: with `stream_disk`, tiered tables' rows on disk are left to
  // the snapshot's disk_reader (a TierRows, table_store_snapshot.cc); else they are copied.
  JobSnapshot SnapshotOf(const std::string& job_id, const std::vector<bool>& slots,
                         bool stream_disk) const;
  // Copies the table's rows in RAM in slot `s` to `r` (the caller holds the slot's lock).
  void CopyRamRows(const Table& table, uint32_t s, SlotRows* r) const;
  class TierRows;
  // Appends the table's rows on disk in slot `s` (not those in RAM, not expired) to `r`.
  absl::Status AppendDiskRows(const Table& table, uint32_t s, SlotRows* r) const;
  // Writes rows `which` of `r` (of slot `s`) to the table's disk tier (a restore past the cap).
  absl::Status PutOnDisk(const Table& table, uint32_t s, const SlotRows& r,
                         absl::Span<const size_t> which) const;
  // Removes the table's rows on disk in slot `s`.
  absl::Status ClearDiskSlot(const Table& table, uint32_t s) const;
  // The disk tier, opened at the first call; FAILED_PRECONDITION where the server has none.
  absl::StatusOr<DiskTier*> Tier(const v1::TableSpec& spec);
  // Drops the row `row` of `key` from the slot's index of `table` and gives its memory back;
  // the caller counts it (CountErasedRows).
  void EraseRow(Slot& slot, const Table& table, uint64_t key, uint32_t row)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);
  // Adds `row` (its header's key set) to the slot's index of `table`, counting the index's
  // growth; false if no memory.
  bool IndexRow(Slot& slot, const Table& table, uint32_t row)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);
  // Drops every row of `table` from the slot; returns how many.
  uint64_t ClearSlot(Slot& slot, const Table& table) ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);
  uint64_t NextRandom(Slot& slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);
  // The TTL sweep of one table; returns the rows expired.
  uint64_t Expire(const Table& table, uint32_t now);
  // The TTL sweep of a tiered table's rows on disk: looks at kDiskSweepRows of them at most,
  // slot by slot from where the last call stopped, and deletes the expired ones (not those
  // in RAM), holding a slot's lock for TableStoreOptions::disk_sweep_chunk rows at a time;
  // returns the rows expired.
  uint64_t ExpireOnDisk(const Table& table);
  // Whether a row last used at `used` has expired by now (tables with a TTL).
  bool Expired(const Table& table, uint32_t used) const {
    const uint32_t now = Now();
    return table.ttl_seconds != 0 && now >= used && now - used > table.ttl_seconds;
  }
  // Adds `rows` new rows of `table` to its bytes and gauges (once per request, not per row: the
  // gauges are shared by every server thread).
  void CountNewRows(const Table& table, uint64_t rows) const;
  // Calls fn(row, i) for every key i of `keys`, creating missing rows as `missing` says (fn gets
  // null for a pulled key not admitted; a pushed key not admitted is skipped), under the locks of
  // the keys' slots (fn must not call the store). While fn runs on one row, the hash entries and
  // the rows of the next keys are fetched into cache: a lookup costs a few cache misses, and
  // fetched together they overlap. `prefetch_bytes` of each row are fetched (`for_write`: to be
  // written). The slots are taken kBatchKeys keys at a time (ForEachSlotBatch), so that the
  // fetching runs on across slots: a slot seldom holds more than a few of a request's keys.
  // FAILED_PRECONDITION if the table was dropped. `groups`: the keys' grouping by slot, if made.
  static constexpr size_t kBatchKeys = 64;
  template <typename Fn>
  absl::Status ForEachRow(const Table& table, absl::Span<const uint64_t> keys,
                          const SlotGroups* groups, size_t prefetch_bytes, bool for_write,
                          Missing missing, Fn fn);
  // The figures of Stats and Describe.
  v1::TableStats StatsOf(const Table& table) const;
  // Sets the table's row layout, arena, indexes and admission and eviction settings from spec.
  static void SetLayout(const v1::TableSpec& spec, bool huge_pages, Table* table);
  // Resolve's key checks: dense keys in range, this server's slots, no key twice (a large block
  // is grouped by slot into view->groups on the way).
  absl::Status CheckKeys(const Table& table, const std::string& job_id, BlockView* view) const;
  // Takes `rows` rows of `table` that the caller erased off the accounting (bytes and gauges).
  void CountErasedRows(const Table& table, uint64_t rows) const;
  // Counts what admission and eviction did in the table's figures and metrics.
  void CountAdmission(const Table& table, uint64_t admitted, uint64_t rejected) const;
  void CountEvicted(const Table& table, uint64_t evicted, uint64_t expired) const;
  // `grad`: dim floats at any alignment (BlockView::Grad); `scratch`: room for
  // ApplyScratchFloats(table) floats (tables stored in half precision, delta stamps).
  static size_t ApplyScratchFloats(const Table& table) {
    return table.delta ? 2 * static_cast<size_t>(table.dim)
                       : (table.storage != v1::TableSpec::FP32 ? table.dim : 0);
  }
  void ApplyToRow(const Table& table, const void* grad, float lr_scale, char* row,
                  float* scratch) const;

  const TableStoreOptions options_;
  ServerMetrics* const metrics_;
  const absl::Time start_ = absl::Now();
  std::atomic<uint32_t> now_{0};  // seconds since start_, as of the last Tick
  mutable absl::Mutex tier_mu_;   // a leaf lock
  std::unique_ptr<DiskTier> tier_ ABSL_GUARDED_BY(tier_mu_);
  absl::Mutex tick_mu_;  // one Tick at a time
  uint32_t last_sweep_ ABSL_GUARDED_BY(tick_mu_) = 0;
  // Each job's slots and epoch, and the dropped jobs (its lock is a leaf).
  JobShards shards_;
  std::unique_ptr<Slot[]> slots_;
  // Jobs with sync sums not applied (CheckNotLost): the slots, and the first error.
  struct LostSums {
    absl::flat_hash_set<uint32_t> slots;
    std::string why;
  };
  void MarkLost(const std::string& job_id, uint32_t slot, int64_t clock, const absl::Status& why);
  mutable absl::Mutex lost_mu_;  // a leaf lock
  absl::flat_hash_map<std::string, LostSums> lost_ ABSL_GUARDED_BY(lost_mu_);
  // !lost_.empty(), set under lost_mu_: CheckNotLost, on every data call, takes no lock when
  // no job lost sums (the usual case).
  std::atomic<bool> any_lost_{false};
  absl::Mutex scale_mu_;  // a leaf lock
  // sync: the learning-rate factor of each pending (job, clock).
  absl::flat_hash_map<std::pair<std::string, int64_t>, float> pending_scale_
      ABSL_GUARDED_BY(scale_mu_);
  // Lock order: a slot's mu, then tables_mu_, then the lock of shards_ (never a slot lock
  // inside tables_mu_).
  mutable absl::Mutex tables_mu_;
  // Tables of dropped jobs stay here (marked dropped) until their rows are erased: a table of
  // the same id cannot be created meanwhile.
  absl::flat_hash_map<uint32_t, std::shared_ptr<Table>> tables_ ABSL_GUARDED_BY(tables_mu_);
};

}  // namespace ps

#endif  // PS_SERVER_TABLE_STORE_H_
