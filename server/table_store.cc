#include "server/table_store.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "common/printable.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "common/table_features.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/initializer.h"
#include "server/internal/store_helpers.h"
#include "server/reject_reason.h"

namespace ps {

using store_internal::ErasePendingIf;
using store_internal::NoMemoryError;
using store_internal::TableDroppedError;
using v1::TableSpec;

TableStore::TableStore(TableStoreOptions options, ServerMetrics* metrics)
    : options_(std::move(options)),
      metrics_(metrics),
      shards_(options_.owned_slots, options_.shard_epoch),
      slots_(new Slot[kNumSlots]) {}

TableStore::~TableStore() = default;

void TableStore::FenceAllJobs() { shards_.FenceAll(); }

absl::Status TableStore::SetJobShards(const std::string& job_id, std::vector<bool> owned,
                                      uint64_t epoch) {
  return shards_.Set(job_id, std::move(owned), epoch);
}

uint32_t TableStore::NumOwnedSlots(const std::string& job_id) const {
  return shards_.Of(job_id)->NumOwned();
}

uint64_t TableStore::ShardEpoch(const std::string& job_id) const {
  return shards_.Of(job_id)->epoch;
}

std::vector<bool> TableStore::OwnedSlots(const std::string& job_id) const {
  return shards_.Of(job_id)->OwnedSlots();
}

absl::Status TableStore::CheckShardEpoch(const std::string& job_id, uint64_t epoch) const {
  return shards_.CheckEpoch(job_id, epoch);
}

TableStore::TableRef TableStore::FindTable(uint32_t table_id) const {
  absl::ReaderMutexLock l(&tables_mu_);
  auto it = tables_.find(table_id);
  return it == tables_.end() ? nullptr : it->second;
}

absl::Status TableStore::CheckNotDropped(const std::string& job_id) const {
  return shards_.IsDropped(job_id) ? JobDroppedError(job_id) : absl::OkStatus();
}

absl::Status TableStore::CheckNotLost(const std::string& job_id) const {
  if (!any_lost_.load(std::memory_order_acquire)) return absl::OkStatus();
  absl::MutexLock l(&lost_mu_);
  auto lost = lost_.find(job_id);
  if (lost == lost_.end()) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      "job '", job_id, "': sync updates were not applied on this server (", lost->second.why,
      "), so its rows in ", lost->second.slots.size(),
      " slot(s) here are no longer what it trained; restore the job from a checkpoint"));
}

void TableStore::MarkLost(const std::string& job_id, uint32_t slot, int64_t clock,
                          const absl::Status& why) {
  absl::MutexLock l(&lost_mu_);
  LostSums& lost = lost_[job_id];
  any_lost_.store(true, std::memory_order_release);
  if (lost.why.empty()) {
    lost.why = absl::StrCat("clock ", clock, ", slot ", slot, ": ", why.message());
    LOG(ERROR) << "job " << job_id << ": sync sums not applied, the job is refused here until "
               << "restored: " << lost.why;
  }
  lost.slots.insert(slot);
}

TableStore::DroppedJob TableStore::DropJob(const std::string& job_id) {
  DroppedJob dropped;
  std::vector<std::shared_ptr<Table>> tables;
  {
    absl::MutexLock l(&tables_mu_);
    dropped.first = shards_.Drop(job_id);
    // From here on no table of the job can be created (CreateTable checks under tables_mu_).
    for (const auto& [id, table] : tables_) {
      if (table->spec.job_id() == job_id && !table->dropped.load()) {
        table->dropped.store(true);
        tables.push_back(table);
      }
    }
  }
  {
    absl::MutexLock l(&scale_mu_);  // after the flags: Accumulate checks them under scale_mu_
    for (auto it = pending_scale_.begin(); it != pending_scale_.end();) {
      if (it->first.first == job_id) {
        pending_scale_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  {
    absl::MutexLock l(&lost_mu_);
    lost_.erase(job_id);
    any_lost_.store(!lost_.empty(), std::memory_order_release);
  }
  if (tables.empty()) return dropped;
  absl::flat_hash_set<uint32_t> ids;
  for (const auto& t : tables) ids.insert(t->spec.table_id());
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    Slot& slot = slots_[s];
    absl::MutexLock l(&slot.mu);
    for (const auto& t : tables) {
      const uint64_t rows = ClearSlot(slot, *t);  // its rows' memory goes back with the arena
      CountErasedRows(*t, rows);
      dropped.bytes += rows * t->arena->row_bytes();
    }
    ErasePendingIf(slot.pending, [&](uint32_t id) { return ids.contains(id); });
  }
  for (const auto& t : tables) {
    if (t->tier == nullptr) continue;
    // Once: the job's rows of every tiered table are one range of the tier.
    if (absl::Status s = t->tier->DeletePrefix(DiskTier::JobPrefix(job_id)); !s.ok()) {
      LOG(ERROR) << "dropping job " << job_id << ": " << s;
    }
    break;
  }
  dropped.tables = static_cast<uint32_t>(tables.size());
  {
    absl::MutexLock l(&tables_mu_);
    for (const auto& t : tables) tables_.erase(t->spec.table_id());
  }
  return dropped;
}

absl::Status TableStore::CreateTable(const TableSpec& spec) {
  PS_ASSIGN_OR_RETURN(const std::shared_ptr<Table> table, NewTable(spec));
  if (spec.tier().disk()) {
    PS_ASSIGN_OR_RETURN(table->tier, Tier(spec));
    table->tier_prefix = DiskTier::TablePrefix(spec.job_id(), spec.table_id());
    table->disk_rows_in_slot = std::make_unique<uint32_t[]>(kNumSlots);
    table->pinned = std::make_unique<absl::flat_hash_map<uint64_t, uint32_t>[]>(kNumSlots);
  }
  if (spec.kind() == v1::DENSE) PS_RETURN_IF_ERROR(CheckDenseTable(*table));
  PS_ASSIGN_OR_RETURN(const bool added, AddTable(table));
  if (!added || spec.kind() != v1::DENSE) return absl::OkStatus();  // not added: held already
  return MaterializeDenseRows(*table);
}

absl::StatusOr<std::shared_ptr<TableStore::Table>> TableStore::NewTable(
    const TableSpec& spec) const {
  if (absl::Status s = CheckJobId(spec.job_id()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("table ", spec.table_id(), ": ", s.message()));
  }
  if (absl::Status s = CheckTableName(spec.name()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("table ", spec.table_id(), ": ", s.message()));
  }
  if (spec.kind() != v1::DENSE && spec.kind() != v1::SPARSE) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", spec.table_id(), ": kind must be DENSE or SPARSE"));
  }
  if (spec.dim() == 0 || spec.dim() > options_.max_dim) {
    return absl::InvalidArgumentError(absl::StrCat("table ", spec.table_id(), ": dim ", spec.dim(),
                                                   " is not in 1..", options_.max_dim));
  }
  absl::Status init = ValidateInitializer(spec.initializer());
  if (!init.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", spec.table_id(), ": initializer: ", init.message()));
  }
  auto optimizer = RowOptimizer::Create(spec.optimizer());
  if (!optimizer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", spec.table_id(), ": optimizer: ", optimizer.status().message()));
  }
  if (absl::Status s = ValidateTableFeatures(spec); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("table ", spec.table_id(), ": ", s.message()));
  }
  PS_RETURN_IF_ERROR(CheckNotDropped(spec.job_id()));  // checked again when it is inserted
  auto table = std::make_shared<Table>();
  table->spec = spec;
  table->dim = static_cast<int>(spec.dim());
  table->state_floats = table->dim * (*optimizer)->state_per_value();
  table->row_floats = table->dim + table->state_floats;
  table->optimizer = std::move(*optimizer);
  table->init_stream = InitializerStream(spec);
  SetLayout(spec, options_.huge_pages, table.get());
  return table;
}

absl::Status TableStore::CheckDenseTable(const Table& table) const {
  const TableSpec& spec = table.spec;
  // Values and optimizer state, and the change stamps of delta pulls.
  const uint64_t row_bytes =
      static_cast<uint64_t>(table.row_floats) * sizeof(float) +
      (table.delta ? static_cast<uint64_t>(table.dim) * sizeof(uint32_t) : 0);
  // Divided, not multiplied: num_rows x row bytes could wrap around.
  if (spec.num_rows() == 0 || spec.num_rows() > (uint64_t{1} << 40) ||
      spec.num_rows() > options_.max_dense_table_bytes / row_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", spec.table_id(), ": dense num_rows ", spec.num_rows(),
                     " must be in 1.. and the table at most ", options_.max_dense_table_bytes,
                     " bytes with optimizer state (and delta pulls' stamps)"));
  }
  // This server's expected share (keys hash uniformly over slots).
  const uint64_t share = spec.num_rows() * row_bytes / kNumSlots * NumOwnedSlots(spec.job_id());
  const uint64_t held = JobBytes(spec.job_id());
  const bool known = FindTable(spec.table_id()) != nullptr;
  if (!known && held + share > options_.max_job_bytes) {
    return Rejected(RejectReason::kOther,
                    absl::ResourceExhaustedError(
                        absl::StrCat("job '", spec.job_id(), "': dense table ", spec.table_id(),
                                     " ('", spec.name(), "') would take ", share,
                                     " bytes on this server, where the "
                                     "job holds ",
                                     held, "; the cap per job is ", options_.max_job_bytes,
                                     " bytes (ps_server --max_job_bytes)")));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> TableStore::AddTable(const std::shared_ptr<Table>& table) {
  const TableSpec& spec = table->spec;
  absl::MutexLock l(&tables_mu_);
  // DropJob marks the job under tables_mu_ too.
  if (shards_.IsDropped(spec.job_id())) return JobDroppedError(spec.job_id());
  auto it = tables_.find(spec.table_id());
  if (it != tables_.end()) {
    if (google::protobuf::util::MessageDifferencer::Equals(it->second->spec, spec)) {
      return false;
    }
    if (it->second->spec.job_id() != spec.job_id()) {
      return absl::AlreadyExistsError(
          absl::StrCat("table id ", spec.table_id(), " is already used by job '",
                       it->second->spec.job_id(), "' (table '", it->second->spec.name(), "'",
                       it->second->dropped.load() ? ", being dropped" : "", "); job '",
                       spec.job_id(), "' must choose another table id"));
    }
    return absl::AlreadyExistsError(
        absl::StrCat("table ", spec.table_id(), " already exists with another spec (name '",
                     it->second->spec.name(), "', job '", it->second->spec.job_id(), "')"));
  }
  if (metrics_ != nullptr) {
    const std::string name =
        spec.name().empty() ? absl::StrCat("table_", spec.table_id()) : spec.name();
    table->metrics = metrics_->AddTable(spec.job_id(), name, table->tier != nullptr);
  }
  tables_.emplace(spec.table_id(), table);
  return true;
}

absl::Status TableStore::MaterializeDenseRows(const Table& table) {
  const TableSpec& spec = table.spec;
  const std::shared_ptr<const Shards> shards = shards_.Of(spec.job_id());
  for (uint64_t key = 0; key < spec.num_rows(); ++key) {
    const uint32_t s = SlotOf(spec.table_id(), key);
    if (!shards->Owns(s)) continue;
    absl::MutexLock sl(&slots_[s].mu);
    if (RowFor(slots_[s], table, key) == nullptr) {
      if (table.dropped.load()) return TableDroppedError(table);
      return NoMemoryError(table);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::DescribeTableResponse> TableStore::Describe(uint32_t table_id) const {
  const TableRef t = FindTable(table_id);
  if (t == nullptr || t->dropped.load()) {
    return Rejected(RejectReason::kUnknownTable,
                    absl::NotFoundError(absl::StrCat("unknown table id ", table_id)));
  }
  v1::DescribeTableResponse r;
  *r.mutable_spec() = t->spec;
  r.set_rows_on_server(t->rows.load());
  *r.mutable_stats() = StatsOf(*t);
  return r;
}

uint64_t TableStore::NumRows(uint32_t table_id) const {
  const TableRef t = FindTable(table_id);
  return t == nullptr ? 0 : t->rows.load();
}

absl::StatusOr<v1::TableStats> TableStore::Stats(uint32_t table_id) const {
  const TableRef t = FindTable(table_id);
  if (t == nullptr || t->dropped.load()) {
    return absl::NotFoundError(absl::StrCat("unknown table id ", table_id));
  }
  return StatsOf(*t);
}

uint64_t TableStore::JobBytes(const std::string& job_id) const {
  uint64_t bytes = 0;
  for (const TableRef& t : TablesOf(job_id)) bytes += t->RowBytes();
  return bytes;
}

std::vector<TableStore::TableRef> TableStore::TablesOf(const std::string& job_id) const {
  std::vector<TableRef> tables;
  {
    absl::ReaderMutexLock l(&tables_mu_);
    for (const auto& [id, table] : tables_) {
      if (table->spec.job_id() == job_id && !table->dropped.load()) tables.push_back(table);
    }
  }
  std::sort(tables.begin(), tables.end(), [](const TableRef& a, const TableRef& b) {
    return a->spec.table_id() < b->spec.table_id();
  });
  return tables;
}

std::vector<v1::TableSpec> TableStore::JobTables(const std::string& job_id) const {
  std::vector<v1::TableSpec> specs;
  for (const TableRef& t : TablesOf(job_id)) specs.push_back(t->spec);
  return specs;
}

void TableStore::SetLayout(const TableSpec& spec, bool huge_pages, Table* t) {
  t->storage = spec.storage();
  const size_t value_bytes =
      (static_cast<size_t>(t->dim) * StoredValueBytes(t->storage) + 3) / 4 * 4;
  t->state_offset = sizeof(RowHeader) + value_bytes;
  t->row_bytes = t->state_offset + static_cast<size_t>(t->state_floats) * sizeof(float);
  if (spec.pull_codec().delta()) {
    t->delta = true;
    t->stamp_offset = t->row_bytes;
    t->row_bytes += static_cast<size_t>(t->dim) * sizeof(uint32_t);
    // Random per table object; never 0 (a token of 0 means none).
    static std::atomic<uint64_t> tables_made{0};
    const uint64_t mixed = absl::Hash<std::tuple<uint32_t, uint64_t, int64_t>>{}(
        {std::random_device{}(), tables_made.fetch_add(1), absl::ToUnixNanos(absl::Now())});
    t->instance = static_cast<uint32_t>(mixed ^ (mixed >> 32)) | 1u;
  }
  t->arena = std::make_unique<RowArena>(t->row_bytes, huge_pages);
  t->index = std::make_unique<RowIndex[]>(kNumSlots);
  if (spec.has_admission()) {
    const v1::AdmissionSpec& a = spec.admission();
    t->admission = true;
    t->min_count = a.min_count();
    if (a.has_probability()) {
      t->admit_p24 = static_cast<uint32_t>(std::ceil(a.probability() * float{1u << 24}));
    }
    // Counters per slot: the table's share, a power of two.
    const uint32_t counters =
        a.sketch_counters() != 0 ? a.sketch_counters() : kDefaultSketchCounters;
    t->sketch_width = 16;
    while (t->sketch_width * kNumSlots < counters) t->sketch_width *= 2;
    if (t->min_count > 1) t->sketches = std::make_unique<AdmissionSketch[]>(kNumSlots);
  }
  if (spec.has_eviction()) {
    t->max_rows = spec.eviction().has_max_rows() ? spec.eviction().max_rows() : 0;
    t->ttl_seconds = static_cast<uint32_t>(spec.eviction().ttl_seconds());
    t->tracks_use = true;
  }
}

v1::TableStats TableStore::StatsOf(const Table& t) const {
  v1::TableStats stats;
  stats.set_rows(t.rows.load());
  stats.set_bytes(t.RowBytes() + t.index_bytes.load());
  stats.set_admitted(t.admitted.load());
  stats.set_rejected(t.rejected.load());
  stats.set_evicted(t.evicted.load());
  stats.set_expired(t.expired.load());
  stats.set_push_raw_bytes(t.push_raw.load());
  stats.set_push_wire_bytes(t.push_wire.load());
  stats.set_pull_raw_bytes(t.pull_raw.load());
  stats.set_pull_wire_bytes(t.pull_wire.load());
  if (t.tier != nullptr) {
    stats.set_disk_rows(t.disk_rows.load());
    stats.set_disk_bytes(t.DiskBytes());
    stats.set_ram_hits(t.ram_hits.load());
    stats.set_disk_lookups(t.disk_lookups.load());
    stats.set_disk_reads(t.disk_reads.load());
    stats.set_written_back(t.written_back.load());
    stats.set_prefetch_pinned(t.pinned_rows.load());
    stats.set_prefetch_skipped(t.prefetch_skipped.load());
  }
  return stats;
}

void TableStore::Table::CountCodecBytes(bool push, uint64_t raw_bytes, uint64_t wire_bytes) const {
  (push ? push_raw : pull_raw).fetch_add(raw_bytes, std::memory_order_relaxed);
  (push ? push_wire : pull_wire).fetch_add(wire_bytes, std::memory_order_relaxed);
  if (metrics == nullptr || metrics->push_raw == nullptr) return;
  (push ? metrics->push_raw : metrics->pull_raw)->Increment(static_cast<double>(raw_bytes));
  (push ? metrics->push_wire : metrics->pull_wire)->Increment(static_cast<double>(wire_bytes));
}

}  // namespace ps
