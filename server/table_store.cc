#include "server/table_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/codec.h"
#include "common/half.h"
#include "common/printable.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "common/table_features.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/initializer.h"
#include "server/internal/prefetch.h"
#include "server/internal/slot_groups.h"
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
  dropped.tables = static_cast<uint32_t>(tables.size());
  {
    absl::MutexLock l(&tables_mu_);
    for (const auto& t : tables) tables_.erase(t->spec.table_id());
  }
  return dropped;
}

absl::Status TableStore::CreateTable(const TableSpec& spec) {
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
  const uint64_t row_bytes = static_cast<uint64_t>(table->row_floats) * sizeof(float);
  if (spec.kind() == v1::DENSE) {
    // Divided, not multiplied: num_rows x row bytes could wrap around.
    if (spec.num_rows() == 0 || spec.num_rows() > (uint64_t{1} << 40) ||
        spec.num_rows() > options_.max_dense_table_bytes / row_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("table ", spec.table_id(), ": dense num_rows ", spec.num_rows(),
                       " must be in 1.. and the table at most ", options_.max_dense_table_bytes,
                       " bytes with optimizer state"));
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
  }
  {
    absl::MutexLock l(&tables_mu_);
    // DropJob marks the job under tables_mu_ too.
    if (shards_.IsDropped(spec.job_id())) return JobDroppedError(spec.job_id());
    auto it = tables_.find(spec.table_id());
    if (it != tables_.end()) {
      if (google::protobuf::util::MessageDifferencer::Equals(it->second->spec, spec)) {
        return absl::OkStatus();
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
      table->metrics = metrics_->AddTable(spec.job_id(), name);
    }
    tables_.emplace(spec.table_id(), table);
  }
  // Materialize owned dense rows now, so pulls never allocate. Done after tables_mu_ is released
  // (the lock order is slot.mu -> tables_mu_); a request that touches the table meanwhile
  // creates missing rows the same way (RowFor). A DropJob meanwhile stops it.
  if (spec.kind() == v1::DENSE) {
    const std::shared_ptr<const Shards> shards = shards_.Of(spec.job_id());
    for (uint64_t key = 0; key < spec.num_rows(); ++key) {
      const uint32_t s = SlotOf(spec.table_id(), key);
      if (!shards->Owns(s)) continue;
      absl::MutexLock sl(&slots_[s].mu);
      if (RowFor(slots_[s], *table, key) == nullptr) {
        if (table->dropped.load()) return TableDroppedError(*table);
        return NoMemoryError(*table);
      }
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

absl::Status TableStore::CheckKeys(const Table& t, const std::string& job_id,
                                   BlockView* view) const {
  const absl::Span<const uint64_t> keys = view->keys;
  const uint32_t table_id = t.spec.table_id();
  if (t.spec.kind() == v1::DENSE) {
    for (uint64_t key : keys) {
      if (key >= t.spec.num_rows()) {
        return Rejected(RejectReason::kKeyOutOfRange,
                        absl::InvalidArgumentError(absl::StrCat(
                            "table ", table_id, ": key ", key,
                            " is out of range for a dense table of ", t.spec.num_rows(), " rows")));
      }
    }
  }
  if (keys.empty()) return absl::OkStatus();
  const std::shared_ptr<const Shards> shards = shards_.Of(job_id);
  if (shards->fenced) {
    return Rejected(RejectReason::kWrongShard,
                    absl::FailedPreconditionError(absl::StrCat(
                        "fenced: this server was declared dead and its slots of job ", job_id,
                        " were given to others; it serves none until the scheduler configures "
                        "it again (shard map epoch ",
                        shards->epoch, ")")));
  }
  auto wrong_shard = [&](uint32_t slot, uint64_t key) {
    return Rejected(RejectReason::kWrongShard,
                    absl::FailedPreconditionError(absl::StrCat(
                        "wrong shard: slot ", slot, " (table ", table_id, ", key ", key,
                        ") is not owned by this server; shard map epoch ", shards->epoch)));
  };
  auto repeated = [&](uint64_t key) {
    return Rejected(RejectReason::kDuplicateKey,
                    absl::InvalidArgumentError(absl::StrCat("table ", table_id, ": duplicate key ",
                                                            key, " in one request")));
  };
  if (keys.size() < SlotGroups::kGroupFrom) {
    for (size_t i = 0; i < keys.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (keys[j] == keys[i]) return repeated(keys[i]);
      }
      const uint32_t slot = SlotOf(table_id, keys[i]);
      if (!shards->Owns(slot)) return wrong_shard(slot, keys[i]);
    }
    return absl::OkStatus();
  }
  // Grouped by slot once (the row passes reuse it): ownership is checked per slot, and a key can
  // only repeat within its slot, so each slot's few keys are checked in a small set that stays
  // in cache instead of one set of the whole request.
  view->groups.Build(table_id, keys);
  absl::flat_hash_set<uint64_t> seen;
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    const absl::Span<const uint32_t> group = view->groups.Group(s);
    if (group.empty()) continue;
    if (!shards->Owns(s)) return wrong_shard(s, keys[group[0]]);
    if (group.size() <= 16) {  // a few keys (the usual case): compared pairwise
      for (size_t a = 1; a < group.size(); ++a) {
        for (size_t b = 0; b < a; ++b) {
          if (keys[group[a]] == keys[group[b]]) return repeated(keys[group[a]]);
        }
      }
      continue;
    }
    seen.clear();
    for (uint32_t i : group) {
      if (!seen.insert(keys[i]).second) return repeated(keys[i]);
    }
  }
  return absl::OkStatus();
}

absl::Status TableStore::Resolve(const std::string& job_id, const v1::KeyBlock& block,
                                 bool with_values, BlockView* view,
                                 const ScatteredValues* scattered) const {
  TableRef t = FindTable(block.table_id());
  if (t == nullptr || (t->dropped.load() && t->spec.job_id() == job_id)) {
    PS_RETURN_IF_ERROR(CheckNotDropped(job_id));  // the clearer error for a late request
  }
  if (t == nullptr) {
    return Rejected(RejectReason::kUnknownTable, absl::InvalidArgumentError(absl::StrCat(
                                                     "unknown table id ", block.table_id())));
  }
  if (t->spec.job_id() != job_id) {
    return Rejected(RejectReason::kWrongJob, absl::InvalidArgumentError(absl::StrCat(
                                                 "table ", block.table_id(), " belongs to job '",
                                                 t->spec.job_id(), "', not '", job_id, "'")));
  }
  absl::Status s = DecodeKeys(block.keys(), &view->keys);
  if (!s.ok()) {
    return Rejected(RejectReason::kBadSize, absl::InvalidArgumentError(absl::StrCat(
                                                "table ", t->spec.table_id(), ": ", s.message())));
  }
  if (view->keys.size() > options_.max_keys_per_block) {
    return Rejected(RejectReason::kBadSize,
                    absl::InvalidArgumentError(
                        absl::StrCat("table ", t->spec.table_id(), ": ", view->keys.size(),
                                     " keys in one block; at most ", options_.max_keys_per_block)));
  }
  if (!with_values && view->keys.size() * t->dim * sizeof(float) > options_.max_pull_bytes) {
    return Rejected(
        RejectReason::kBadSize,
        absl::InvalidArgumentError(absl::StrCat(
            "table ", t->spec.table_id(), ": a pull of ", view->keys.size(), " keys of dim ",
            t->dim, " would answer ", view->keys.size() * t->dim * sizeof(float),
            " bytes; at most ", options_.max_pull_bytes, " (pull fewer keys per request)")));
  }
  PS_RETURN_IF_ERROR(CheckKeys(*t, job_id, view));
  view->values = {};
  view->scattered = nullptr;
  if (with_values) {
    if (scattered != nullptr && !block.values().empty()) {
      return absl::InternalError("a block read in place has its values in two places");
    }
    const size_t bytes = scattered != nullptr ? scattered->bytes() : block.values().size();
    if (bytes % sizeof(float) != 0) {
      return Rejected(RejectReason::kBadSize,
                      absl::InvalidArgumentError(
                          absl::StrCat("table ", t->spec.table_id(), ": values are ", bytes,
                                       " bytes, not a multiple of 4 (packed float32)")));
    }
    const size_t num_values = bytes / sizeof(float);
    if (num_values != view->keys.size() * t->dim) {
      return Rejected(
          RejectReason::kBadSize,
          absl::InvalidArgumentError(absl::StrCat(
              "table ", t->spec.table_id(), ": ", num_values, " values for ", view->keys.size(),
              " keys of dim ", t->dim, " (want ", view->keys.size() * t->dim, ")")));
    }
    if (scattered != nullptr) {
      view->scattered = scattered;
    } else {
      PS_RETURN_IF_ERROR(DecodeValues(block.values(), &view->values));  // the size is checked
    }
    if (options_.nonfinite == NonFinitePolicy::kReject &&
        !(scattered != nullptr ? scattered->AllFinite() : AllFinite(view->values))) {
      return Rejected(
          RejectReason::kNonFinite,
          absl::InvalidArgumentError(absl::StrCat(
              "table ", t->spec.table_id(), ": gradient holds NaN or Inf; nothing was applied")));
    }
  } else if (!block.values().empty() || scattered != nullptr) {
    return Rejected(RejectReason::kBadSize,
                    absl::InvalidArgumentError(absl::StrCat(
                        "table ", t->spec.table_id(), ": a pull block must not carry values")));
  }
  view->table = std::move(t);
  return absl::OkStatus();
}

uint64_t TableStore::JobBytes(const std::string& job_id) const {
  uint64_t bytes = 0;
  for (const TableRef& t : TablesOf(job_id)) bytes += t->RowBytes();
  return bytes;
}

absl::Status TableStore::CheckNewRows(absl::Span<const BlockView> views) const {
  if (views.empty()) return absl::OkStatus();
  const std::string& job_id = views[0].table->spec.job_id();
  uint64_t held = JobBytes(job_id);
  // Far from the cap (the usual case), even rows for every key could not pass it: no lookups.
  uint64_t most = held;
  for (const BlockView& v : views) {
    if (v.table->spec.kind() == v1::DENSE) continue;
    most += v.keys.size() * static_cast<uint64_t>(v.table->arena->row_bytes());
  }
  if (most <= options_.max_job_bytes) return absl::OkStatus();
  for (const BlockView& v : views) {
    // A dense table's rows were counted when it was created (rows emptied by a restore come
    // back within that count).
    if (v.table->spec.kind() == v1::DENSE) continue;
    const uint32_t table_id = v.table->spec.table_id();
    uint64_t missing = 0;
    const Table& t = *v.table;
    ForEachKeyBySlot(slots_.get(), table_id, v.keys, [&](Slot& slot, uint32_t i) {
      slot.mu.AssertHeld();
      missing += t.index[SlotIndex(slot)].Find(*t.arena, v.keys[i]) == RowArena::kNoRow;
      return absl::OkStatus();
    }).IgnoreError();
    held += missing * static_cast<uint64_t>(t.arena->row_bytes());
    if (missing > 0 && held > options_.max_job_bytes) {
      return Rejected(
          RejectReason::kOther,
          absl::ResourceExhaustedError(absl::StrCat(
              "job '", job_id, "': ", missing, " new rows of table ", v.table->spec.table_id(),
              " ('", v.table->spec.name(), "') would take the job's rows on this server to ", held,
              " bytes; the cap per job is ", options_.max_job_bytes,
              " bytes (ps_server --max_job_bytes); nothing was created")));
    }
  }
  return absl::OkStatus();
}

absl::Status TableStore::CheckPullSize(absl::Span<const BlockView> views) const {
  uint64_t bytes = 0;
  for (const BlockView& v : views) bytes += v.keys.size() * v.table->dim * sizeof(float);
  if (bytes <= options_.max_pull_bytes) return absl::OkStatus();
  return Rejected(RejectReason::kBadSize,
                  absl::InvalidArgumentError(
                      absl::StrCat("the pull would answer ", bytes, " bytes; at most ",
                                   options_.max_pull_bytes, " (pull fewer keys per request)")));
}

char* TableStore::RowFor(Slot& slot, const Table& table, uint64_t key, Missing missing) {
  if (table.dropped.load()) return nullptr;  // its rows may be erased from this slot already
  const uint32_t found = table.index[SlotIndex(slot)].Find(*table.arena, key);
  if (found != RowArena::kNoRow) {
    char* row = table.arena->At(found);
    if (table.tracks_use) table.Header(row)->used = Now();
    return row;
  }
  if (table.admission && missing != Missing::kCreate) {
    if (missing == Missing::kPull || !Admit(slot, table, key)) return nullptr;
  }
  char* row = InsertRow(slot, table, key);
  if (row != nullptr) CountNewRows(table, 1);
  return row;
}

bool TableStore::Admit(Slot& slot, const Table& table, uint64_t key) {
  bool admit = true;
  if (table.min_count > 1) {
    admit = table.sketches[SlotIndex(slot)].Add(key, table.sketch_width) >= table.min_count;
  }
  if (admit && table.admit_p24 < (1u << 24)) {
    admit = (NextRandom(slot) >> 40) < table.admit_p24;
  }
  CountAdmission(table, admit ? 1 : 0, admit ? 0 : 1);
  return admit;
}

uint64_t TableStore::NextRandom(Slot& slot) {
  uint64_t x = slot.random;
  if (x == 0) x = 0x9e3779b97f4a7c15ULL * (SlotIndex(slot) + 1);
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  slot.random = x;
  return x;
}

char* TableStore::InsertRow(Slot& slot, const Table& table, uint64_t key, RowCache* cache) {
  // At the cap, a row of this slot goes first, else one of another slot that is free now;
  // where neither was found the table goes over by one, which the next inserts take back (two
  // evictions each at most).
  for (int i = 0;
       i < 2 && table.max_rows != 0 && table.rows.load(std::memory_order_relaxed) >= table.max_rows;
       ++i) {
    if (!EvictOne(slot, table) && !EvictElsewhere(slot, table)) break;
  }
  const uint32_t handle = cache != nullptr ? cache->Take() : table.arena->Allocate();
  if (handle == RowArena::kNoRow) return nullptr;
  char* row = table.arena->At(handle);
  RowHeader* header = table.Header(row);
  header->key = key;
  header->updates = 0;
  header->used = Now();
  if (float* values = table.Values32(row)) {
    InitializeRow(table.spec.initializer(), table.init_stream, key, values, table.dim);
    table.optimizer->InitState(values, table.State(row), table.dim);
  } else {
    absl::InlinedVector<float, 256> initial(table.dim);
    InitializeRow(table.spec.initializer(), table.init_stream, key, initial.data(), table.dim);
    table.optimizer->InitState(initial.data(), table.State(row), table.dim);
    table.WriteValues(row, initial.data());
  }
  if (!IndexRow(slot, table, handle)) {
    table.arena->Free(handle);
    return nullptr;
  }
  table.rows.fetch_add(1, std::memory_order_relaxed);
  return row;
}

bool TableStore::IndexRow(Slot& slot, const Table& table, uint32_t row) {
  RowIndex& index = table.index[SlotIndex(slot)];
  const size_t before = index.bytes();
  if (!index.Insert(*table.arena, row)) return false;
  if (index.bytes() != before) table.index_bytes.fetch_add(index.bytes() - before);
  return true;
}

void TableStore::EraseRow(Slot& slot, const Table& table, uint64_t key, uint32_t row) {
  table.index[SlotIndex(slot)].Erase(*table.arena, key);
  table.arena->Free(row);
  table.rows.fetch_sub(1, std::memory_order_relaxed);
}

bool TableStore::EvictOne(Slot& slot, const Table& table) {
  constexpr size_t kSample = 8;
  uint32_t sample[kSample];
  const size_t n = table.index[SlotIndex(slot)].Sample(NextRandom(slot), sample, kSample);
  if (n == 0) return false;
  for (size_t i = 0; i < n; ++i) PrefetchRead(table.arena->At(sample[i]));
  uint32_t victim = sample[0];
  uint32_t oldest = table.Header(table.arena->At(victim))->used;
  for (size_t i = 1; i < n; ++i) {
    const uint32_t used = table.Header(table.arena->At(sample[i]))->used;
    if (used < oldest) {
      oldest = used;
      victim = sample[i];
    }
  }
  EraseRow(slot, table, table.Header(table.arena->At(victim))->key, victim);
  CountErasedRows(table, 1);
  CountEvicted(table, 1, 0);
  return true;
}

bool TableStore::EvictElsewhere(Slot& slot, const Table& table) {
  constexpr int kTries = 8;
  for (int i = 0; i < kTries; ++i) {
    Slot& other = slots_[NextRandom(slot) % kNumSlots];
    if (&other == &slot) continue;
    // Never waits: a slot held by this request (or another) is skipped, so no lock order forms.
    if (!other.mu.TryLock()) continue;
    const bool evicted = !table.dropped.load() && EvictOne(other, table);
    other.mu.Unlock();
    if (evicted) return true;
  }
  return false;
}

uint64_t TableStore::ClearSlot(Slot& slot, const Table& table) {
  RowIndex& index = table.index[SlotIndex(slot)];
  const uint64_t rows = index.size();
  index.ForEach([&](uint32_t row) { table.arena->Free(row); });
  table.index_bytes.fetch_sub(index.bytes());
  index.Clear();
  table.rows.fetch_sub(rows, std::memory_order_relaxed);
  return rows;
}

void TableStore::CountNewRows(const Table& table, uint64_t rows) const {
  if (rows == 0 || table.metrics == nullptr) return;
  table.metrics->rows->Increment(static_cast<double>(rows));
  table.metrics->bytes->Increment(static_cast<double>(rows * table.arena->row_bytes()));
}

void TableStore::CountAdmission(const Table& table, uint64_t admitted, uint64_t rejected) const {
  if (admitted != 0) table.admitted.fetch_add(admitted, std::memory_order_relaxed);
  if (rejected != 0) table.rejected.fetch_add(rejected, std::memory_order_relaxed);
  if (table.metrics == nullptr) return;
  if (admitted != 0) table.metrics->admitted->Increment(static_cast<double>(admitted));
  if (rejected != 0) table.metrics->rejected->Increment(static_cast<double>(rejected));
}

void TableStore::CountEvicted(const Table& table, uint64_t evicted, uint64_t expired) const {
  if (evicted != 0) table.evicted.fetch_add(evicted, std::memory_order_relaxed);
  if (expired != 0) table.expired.fetch_add(expired, std::memory_order_relaxed);
  if (table.metrics == nullptr) return;
  if (evicted != 0) table.metrics->evicted->Increment(static_cast<double>(evicted));
  if (expired != 0) table.metrics->expired->Increment(static_cast<double>(expired));
}

template <typename Fn>
absl::Status TableStore::ForEachRow(const Table& t, absl::Span<const uint64_t> keys,
                                    const SlotGroups* groups, size_t prefetch_bytes, bool for_write,
                                    Missing missing, Fn fn) {
  // Three stages of fetching run ahead of the key being served: the buckets where a key's entry
  // lies (kProbeAhead keys ahead), the row those buckets name (kRowAhead), and the rest of the
  // row fn reads or writes (kRowsAhead, once it is found).
  constexpr size_t kProbeAhead = 12;
  constexpr size_t kRowAhead = 6;
  constexpr size_t kRowsAhead = 4;
  constexpr size_t kLine = 64;
  prefetch_bytes = std::min<size_t>(prefetch_bytes, 4 * kLine);  // the hardware fetches the rest
  const uint32_t table_id = t.spec.table_id();
  const RowArena& arena = *t.arena;
  const uint32_t now = Now();
  auto fetch_row = [&](const char* p) {
    // Its first line holds the key, in cache since the lookup; rows start 16-byte aligned, so
    // the last byte may lie one line further than the offsets reach.
    for (size_t off = kLine; off < prefetch_bytes + kLine; off += kLine) {
      const char* at = p + std::min(off, prefetch_bytes - 1);
      if (for_write) {
        PrefetchWrite(at);
      } else {
        PrefetchRead(at);
      }
    }
  };
  uint64_t created = 0;  // rows created, counted once at the end
  RowCache cache(t.arena.get());
  // The keys of a batch of slots, in the batch's order: (slot's index, index into keys). On the
  // stack for a batch of up to twice kBatchKeys keys (a small request allocates nothing).
  absl::InlinedVector<std::pair<const RowIndex*, uint32_t>, 2 * kBatchKeys> stream;
  // Every slot of `batch` is locked (by ForEachSlotBatch or ForEachSlotGroup).
  auto run_batch = [&](absl::Span<const SlotGroupRef<Slot>> batch)
                       ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
    // Checked once per batch: DropJob sets the flag before it takes the slot locks to erase.
    if (t.dropped.load()) return TableDroppedError(t);
    stream.clear();
    for (const SlotGroupRef<Slot>& g : batch) {
      const RowIndex* index = &t.index[SlotIndex(*g.slot)];
      for (uint32_t i : g.group) stream.emplace_back(index, i);
    }
    const size_t n = stream.size();
    auto key_at = [&](size_t j) { return keys[stream[j].second]; };
    for (size_t j = 0; j < std::min(n, kProbeAhead); ++j) stream[j].first->Prefetch(key_at(j));
    for (size_t j = 0; j < std::min(n, kRowAhead); ++j) {
      stream[j].first->PrefetchRow(arena, key_at(j));
    }
    // Rows found and waiting for fn. Emptied before a row is created (which may evict one).
    std::pair<char*, uint32_t> ring[kRowsAhead];
    size_t head = 0;  // rows put in the ring
    size_t tail = 0;  // rows handed to fn
    auto drain_to = [&](size_t keep) {
      while (head - tail > keep) {
        const auto& [row, i] = ring[tail++ % kRowsAhead];
        fn(row, i);
      }
    };
    size_t b = 0;  // which group of the batch stream[j] is in
    size_t group_end = batch.empty() ? 0 : batch[0].group.size();
    for (size_t j = 0; j < n; ++j) {
      while (j >= group_end) group_end += batch[++b].group.size();
      if (j + kProbeAhead < n) stream[j + kProbeAhead].first->Prefetch(key_at(j + kProbeAhead));
      if (j + kRowAhead < n) stream[j + kRowAhead].first->PrefetchRow(arena, key_at(j + kRowAhead));
      const uint64_t key = key_at(j);
      const uint32_t found = stream[j].first->Find(arena, key);
      char* row = nullptr;
      if (found != RowArena::kNoRow) {
        row = arena.At(found);
        fetch_row(row);
        if (t.tracks_use) t.Header(row)->used = now;
      } else {
        drain_to(0);
        Slot& slot = *batch[b].slot;
        if (!t.admission || missing == Missing::kCreate ||
            (missing == Missing::kPush && Admit(slot, t, key))) {
          row = InsertRow(slot, t, key, &cache);
          if (row == nullptr) return NoMemoryError(t);
          ++created;
        } else if (missing == Missing::kPush) {
          continue;  // not admitted: the push only counted
        }
      }
      drain_to(kRowsAhead - 1);
      ring[head++ % kRowsAhead] = {row, stream[j].second};
    }
    drain_to(0);
    return absl::OkStatus();
  };
  absl::Status status;
  if (keys.size() < SlotGroups::kGroupFrom) {
    // Too few keys to group: slot by slot, each key under its own lock.
    status = ForEachSlotGroup(slots_.get(), table_id, keys,
                              [&](Slot& slot, absl::Span<const uint32_t> group) {
                                const SlotGroupRef<Slot> one{&slot, group};
                                return run_batch(absl::MakeConstSpan(&one, 1));
                              });
  } else {
    status = ForEachSlotBatch(slots_.get(), table_id, keys, kBatchKeys, groups, run_batch);
  }
  CountNewRows(t, created);
  return status;
}

void TableStore::CountErasedRows(const Table& table, uint64_t rows) const {
  if (rows == 0 || table.metrics == nullptr) return;
  table.metrics->rows->Decrement(static_cast<double>(rows));
  table.metrics->bytes->Decrement(static_cast<double>(rows * table.arena->row_bytes()));
}

void TableStore::ApplyToRow(const Table& table, const void* grad, float lr_scale, char* row,
                            float* scratch) const {
  if (options_.nonfinite == NonFinitePolicy::kSkipRow && NonFiniteBits(grad, table.dim) != 0) {
    return;
  }
  RowHeader* header = table.Header(row);
  if (header->updates != UINT32_MAX) ++header->updates;
  if (float* values = table.Values32(row)) {
    table.optimizer->ApplyScaled(grad, table.dim, header->updates, lr_scale, values,
                                 table.State(row));
    return;
  }
  // Half precision: the arithmetic in float32, the values rounded back to nearest.
  table.ReadValues(row, scratch);
  table.optimizer->ApplyScaled(grad, table.dim, header->updates, lr_scale, scratch,
                               table.State(row));
  table.WriteValues(row, scratch);
}

absl::Status TableStore::Pull(const BlockView& view, std::string* out) {
  out->resize(view.keys.size() * view.table->dim * sizeof(float));
  absl::Status s = Pull(view, out->data());
  if (!s.ok()) out->clear();
  return s;
}

absl::Status TableStore::Pull(const BlockView& view, char* out) {
  const Table& t = *view.table;
  const size_t row_bytes = t.dim * sizeof(float);
  std::vector<float> initial(t.admission ? t.dim : 0);
  return ForEachRow(t, view.keys, &view.groups, sizeof(RowHeader) + row_bytes,
                    /*for_write=*/t.tracks_use, Missing::kPull, [&](const char* row, uint32_t i) {
                      if (row != nullptr) {
                        t.ReadValues(row, out + i * row_bytes);
                        return;
                      }
                      // Not admitted: the initializer's values, as the row would start.
                      InitializeRow(t.spec.initializer(), t.init_stream, view.keys[i],
                                    initial.data(), t.dim);
                      std::memcpy(out + i * row_bytes, initial.data(), row_bytes);
                    });
}

absl::Status TableStore::Apply(const BlockView& view, float lr_scale) {
  const Table& t = *view.table;
  std::vector<float> scratch(view.scattered != nullptr ? t.dim : 0);
  std::vector<float> values(t.storage != v1::TableSpec::FP32 ? t.dim : 0);
  return ForEachRow(t, view.keys, &view.groups, t.row_bytes, /*for_write=*/true, Missing::kPush,
                    [&](char* row, uint32_t i) {
                      ApplyToRow(t, view.Grad(i, scratch.data()), lr_scale, row, values.data());
                    });
}

absl::Status TableStore::Accumulate(const BlockView& view, int64_t clock, float lr_scale) {
  const Table& t = *view.table;
  {
    // Under scale_mu_, which DropJob takes after setting the flag to erase the job's factors.
    absl::MutexLock l(&scale_mu_);
    if (t.dropped.load()) return TableDroppedError(t);
    pending_scale_[{t.spec.job_id(), clock}] = lr_scale;
  }
  std::vector<float> scratch(view.scattered != nullptr ? t.dim : 0);
  const bool skip_nonfinite = options_.nonfinite == NonFinitePolicy::kSkipRow;
  for (size_t k = 0; k < view.keys.size(); ++k) {
    const uint64_t key = view.keys[k];
    const void* grad = view.Grad(k, scratch.data());
    // Skipped here, per push: one worker's bad row must not void the others' gradients.
    if (skip_nonfinite && NonFiniteBits(grad, t.dim) != 0) continue;
    Slot& slot = slots_[SlotOf(t.spec.table_id(), key)];
    absl::MutexLock l(&slot.mu);
    if (t.dropped.load()) return TableDroppedError(t);
    std::vector<float>& sum = slot.pending[clock][RowKey{t.spec.table_id(), key}];
    if (sum.empty()) {
      sum.resize(t.dim);
      std::memcpy(sum.data(), grad, t.dim * sizeof(float));
    } else {
      for (int i = 0; i < t.dim; ++i) sum[i] += FloatAt(grad, i);
    }
  }
  return absl::OkStatus();
}

void TableStore::ApplyAccumulated(const std::string& job_id, int64_t clock) {
  float lr_scale = 1.0f;
  {
    absl::MutexLock l(&scale_mu_);
    auto it = pending_scale_.find({job_id, clock});
    if (it != pending_scale_.end()) {
      lr_scale = it->second;
      pending_scale_.erase(it);
    }
  }
  // The job's tables, looked up once (not per row under the slot locks), held while applying.
  absl::flat_hash_map<uint32_t, TableRef> job_tables;
  int max_dim = 0;
  for (TableRef& t : TablesOf(job_id)) {
    max_dim = std::max(max_dim, t->dim);
    job_tables[t->spec.table_id()] = std::move(t);
  }
  std::vector<float> scratch(max_dim);
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    Slot& slot = slots_[s];
    absl::MutexLock l(&slot.mu);
    auto pending = slot.pending.find(clock);
    if (pending == slot.pending.end()) continue;
    auto& sums = pending->second;
    for (auto it = sums.begin(); it != sums.end();) {
      auto table = job_tables.find(it->first.first);
      if (table == job_tables.end()) {
        ++it;
        continue;
      }
      // A table dropped meanwhile: its sums are erased unapplied (DropJob would erase them);
      // so are those of keys not admitted (the push counted towards admission).
      if (char* row = RowFor(slot, *table->second, it->first.second, Missing::kPush)) {
        ApplyToRow(*table->second, it->second.data(), lr_scale, row, scratch.data());
      }
      sums.erase(it++);
    }
    if (sums.empty()) slot.pending.erase(pending);
  }
}

void TableStore::ApplyAccumulated(const std::string& job_id, int64_t from, int64_t to) {
  // Every clock holding gradients has a learning-rate entry (Accumulate writes it first;
  // ClearPending drops both): those are the clocks to apply.
  std::vector<int64_t> clocks;
  {
    absl::MutexLock l(&scale_mu_);
    for (const auto& [job_clock, scale] : pending_scale_) {
      if (job_clock.first == job_id && job_clock.second >= from && job_clock.second < to) {
        clocks.push_back(job_clock.second);
      }
    }
  }
  std::sort(clocks.begin(), clocks.end());
  for (int64_t clock : clocks) ApplyAccumulated(job_id, clock);
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

namespace {

// dim halves at `in` to floats at `out` (any alignment), and back.
template <float (*kToFloat)(uint16_t)>
void HalvesToFloats(const char* in, char* out, int dim) {
  for (int i = 0; i < dim; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    const float f = kToFloat(h);
    std::memcpy(out + 4 * i, &f, 4);
  }
}

template <uint16_t (*kToHalf)(float)>
void FloatsToHalves(const float* in, char* out, int dim) {
  for (int i = 0; i < dim; ++i) {
    const uint16_t h = kToHalf(in[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

}  // namespace

void TableStore::Table::ReadValues(const char* row, void* out) const {
  const char* values = row + sizeof(RowHeader);
  switch (storage) {
    case v1::TableSpec::FP16:
      return HalvesToFloats<Fp16ToFloat>(values, static_cast<char*>(out), dim);
    case v1::TableSpec::BF16:
      return HalvesToFloats<Bf16ToFloat>(values, static_cast<char*>(out), dim);
    default:
      std::memcpy(out, values, dim * sizeof(float));
  }
}

void TableStore::Table::WriteValues(char* row, const float* in) const {
  char* values = row + sizeof(RowHeader);
  switch (storage) {
    case v1::TableSpec::FP16:
      return FloatsToHalves<FloatToFp16>(in, values, dim);
    case v1::TableSpec::BF16:
      return FloatsToHalves<FloatToBf16>(in, values, dim);
    default:
      std::memcpy(values, in, dim * sizeof(float));
  }
}

void TableStore::SetLayout(const TableSpec& spec, bool huge_pages, Table* t) {
  t->storage = spec.storage();
  const size_t value_bytes =
      (static_cast<size_t>(t->dim) * StoredValueBytes(t->storage) + 3) / 4 * 4;
  t->state_offset = sizeof(RowHeader) + value_bytes;
  t->row_bytes = t->state_offset + static_cast<size_t>(t->state_floats) * sizeof(float);
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
  return stats;
}

void TableStore::Table::CountCodecBytes(bool push, uint64_t raw_bytes, uint64_t wire_bytes) const {
  (push ? push_raw : pull_raw).fetch_add(raw_bytes, std::memory_order_relaxed);
  (push ? push_wire : pull_wire).fetch_add(wire_bytes, std::memory_order_relaxed);
  if (metrics == nullptr || metrics->push_raw == nullptr) return;
  (push ? metrics->push_raw : metrics->pull_raw)->Increment(static_cast<double>(raw_bytes));
  (push ? metrics->push_wire : metrics->pull_wire)->Increment(static_cast<double>(wire_bytes));
}

uint64_t TableStore::Tick(absl::Time now) {
  const int64_t seconds = std::clamp<int64_t>(absl::ToInt64Seconds(now - start_), 0, UINT32_MAX);
  absl::MutexLock l(&tick_mu_);
  const uint32_t current = std::max(now_.load(), static_cast<uint32_t>(seconds));
  now_.store(current);
  if (current == last_sweep_) return 0;  // about once a second
  last_sweep_ = current;
  std::vector<std::shared_ptr<Table>> tables;
  {
    absl::ReaderMutexLock tl(&tables_mu_);
    for (const auto& [id, t] : tables_) {
      const bool decays = t->sketches != nullptr && t->spec.admission().decay_seconds() != 0;
      if ((t->ttl_seconds != 0 || decays) && !t->dropped.load()) tables.push_back(t);
    }
  }
  uint64_t expired = 0;
  for (const auto& t : tables) {
    if (t->ttl_seconds != 0) expired += Expire(*t, current);
    const uint32_t decay = t->spec.admission().decay_seconds();
    if (t->sketches == nullptr || decay == 0 || current - t->last_decay.load() < decay) continue;
    t->last_decay.store(current);
    for (uint32_t s = 0; s < kNumSlots; ++s) {
      absl::MutexLock sl(&slots_[s].mu);
      t->sketches[s].Halve();
    }
  }
  return expired;
}

uint64_t TableStore::Expire(const Table& t, uint32_t now) {
  uint64_t expired = 0;
  std::vector<std::pair<uint64_t, uint32_t>> old;  // (key, row)
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    Slot& slot = slots_[s];
    absl::MutexLock l(&slot.mu);
    if (t.dropped.load()) return expired;
    old.clear();
    t.index[s].ForEach([&](uint32_t row) {
      const RowHeader* h = t.Header(t.arena->At(row));
      if (now - h->used > t.ttl_seconds && now >= h->used) old.emplace_back(h->key, row);
    });
    for (const auto& [key, row] : old) EraseRow(slot, t, key, row);
    expired += old.size();
  }
  CountErasedRows(t, expired);
  CountEvicted(t, 0, expired);
  return expired;
}

}  // namespace ps
