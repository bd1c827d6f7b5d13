#include "server/table_store.h"

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/codec.h"
#include "common/printable.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/initializer.h"
#include "server/internal/slot_groups.h"
#include "server/internal/store_helpers.h"
#include "server/reject_reason.h"

namespace ps {

using store_internal::DroppedError;
using store_internal::ErasePendingIf;
using store_internal::TableDroppedError;
using v1::TableSpec;

TableStore::TableStore(TableStoreOptions options, ServerMetrics* metrics)
    : options_(std::move(options)),
      metrics_(metrics),
      default_shards_(std::make_shared<Shards>(Shards{options_.owned_slots, options_.shard_epoch})),
      fenced_default_(std::make_shared<Shards>(
          Shards{std::vector<bool>(kNumSlots, false), options_.shard_epoch, true})),
      slots_(new Slot[kNumSlots]) {}

std::shared_ptr<const TableStore::Shards> TableStore::ShardsOf(const std::string& job_id) const {
  absl::ReaderMutexLock l(&shards_mu_);
  auto it = job_shards_.find(job_id);
  if (it != job_shards_.end()) return it->second;
  return fenced_ ? fenced_default_ : default_shards_;
}

void TableStore::FenceAllJobs() {
  absl::MutexLock l(&shards_mu_);
  fenced_ = true;
  for (auto& [job_id, shards] : job_shards_) {
    shards = std::make_shared<Shards>(Shards{std::vector<bool>(kNumSlots, false), shards->epoch,
                                             /*fenced=*/true});
  }
}

absl::Status TableStore::SetJobShards(const std::string& job_id, std::vector<bool> owned,
                                      uint64_t epoch) {
  if (owned.size() != kNumSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("owned slots: ", owned.size(), " entries, want ", kNumSlots));
  }
  absl::MutexLock l(&shards_mu_);
  if (IsDropped(job_id)) return DroppedError(job_id);
  auto& current = job_shards_[job_id];
  if (current != nullptr) {
    if (epoch < current->epoch) {
      return absl::FailedPreconditionError(absl::StrCat("shard epoch ", epoch, " of job ", job_id,
                                                        " is older than the current ",
                                                        current->epoch));
    }
    if (epoch == current->epoch && owned != current->owned && !current->fenced) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard epoch ", epoch, " of job ", job_id, " was set with other slots"));
    }
  }
  current = std::make_shared<Shards>(Shards{std::move(owned), epoch});
  return absl::OkStatus();
}

TableStore::~TableStore() = default;

uint32_t TableStore::NumOwnedSlots(const std::string& job_id) const {
  const std::shared_ptr<const Shards> shards = ShardsOf(job_id);
  if (shards->owned.empty()) return kNumSlots;
  uint32_t n = 0;
  for (bool owned : shards->owned) n += owned;
  return n;
}

TableStore::TableRef TableStore::FindTable(uint32_t table_id) const {
  absl::ReaderMutexLock l(&tables_mu_);
  auto it = tables_.find(table_id);
  return it == tables_.end() ? nullptr : it->second;
}

bool TableStore::IsDropped(const std::string& job_id) const {
  return dropped_jobs_.contains(job_id);
}

absl::Status TableStore::CheckNotDropped(const std::string& job_id) const {
  absl::ReaderMutexLock l(&shards_mu_);
  return IsDropped(job_id) ? DroppedError(job_id) : absl::OkStatus();
}

TableStore::DroppedJob TableStore::DropJob(const std::string& job_id) {
  DroppedJob dropped;
  std::vector<std::shared_ptr<Table>> tables;
  {
    absl::MutexLock l(&tables_mu_);
    {
      absl::MutexLock sl(&shards_mu_);
      dropped.first = dropped_jobs_.insert(job_id).second;
      if (dropped.first) {
        dropped_order_.push_back(job_id);
        if (dropped_order_.size() > kMaxDroppedJobs) {
          dropped_jobs_.erase(dropped_order_.front());
          dropped_order_.pop_front();
        }
      }
      job_shards_.erase(job_id);
    }
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
  absl::flat_hash_map<uint32_t, const Table*> ids;
  for (const auto& t : tables) ids[t->spec.table_id()] = t.get();
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    Slot& slot = slots_[s];
    absl::MutexLock l(&slot.mu);
    for (auto it = slot.rows.begin(); it != slot.rows.end();) {
      auto table = ids.find(it->first.first);
      if (table == ids.end()) {
        ++it;
        continue;
      }
      CountErasedRow(*table->second);
      dropped.bytes += static_cast<uint64_t>(table->second->row_floats) * sizeof(float);
      slot.rows.erase(it++);  // its floats go back with the table's arena
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
  PS_RETURN_IF_ERROR(CheckNotDropped(spec.job_id()));  // checked again when it is inserted
  auto table = std::make_shared<Table>();
  table->spec = spec;
  table->dim = static_cast<int>(spec.dim());
  table->row_floats = table->dim * (1 + (*optimizer)->state_per_value());
  table->optimizer = std::move(*optimizer);
  table->arena = std::make_unique<RowArena>(table->row_floats, options_.huge_pages);
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
    {
      absl::ReaderMutexLock sl(&shards_mu_);  // DropJob marks the job under both locks
      if (IsDropped(spec.job_id())) return DroppedError(spec.job_id());
    }
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
    const std::shared_ptr<const Shards> shards = ShardsOf(spec.job_id());
    for (uint64_t key = 0; key < spec.num_rows(); ++key) {
      const uint32_t s = SlotOf(spec.table_id(), key);
      if (!shards->Owns(s)) continue;
      absl::MutexLock sl(&slots_[s].mu);
      if (RowFor(slots_[s], *table, key) == nullptr) return TableDroppedError(*table);
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
  r.set_rows_on_server(NumRows(table_id));
  return r;
}

uint64_t TableStore::NumRows(uint32_t table_id) const {
  uint64_t n = 0;
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    absl::MutexLock l(&slots_[s].mu);
    for (const auto& [k, row] : slots_[s].rows) n += k.first == table_id;
  }
  return n;
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
  const std::shared_ptr<const Shards> shards = ShardsOf(job_id);
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
  for (const TableRef& t : TablesOf(job_id)) bytes += t->bytes.load();
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
    most += v.keys.size() * static_cast<uint64_t>(v.table->row_floats) * sizeof(float);
  }
  if (most <= options_.max_job_bytes) return absl::OkStatus();
  for (const BlockView& v : views) {
    // A dense table's rows were counted when it was created (rows emptied by a restore come
    // back within that count).
    if (v.table->spec.kind() == v1::DENSE) continue;
    const uint32_t table_id = v.table->spec.table_id();
    uint64_t missing = 0;
    ForEachKeyBySlot(slots_.get(), table_id, v.keys, [&](Slot& slot, uint32_t i) {
      slot.mu.AssertHeld();
      missing += !slot.rows.contains(RowKey{table_id, v.keys[i]});
      return absl::OkStatus();
    }).IgnoreError();
    held += missing * static_cast<uint64_t>(v.table->row_floats) * sizeof(float);
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

TableStore::Row TableStore::NewRow(const Table& table, uint64_t key) const {
  Row row;
  row.data = table.arena->Allocate();
  InitializeRow(table.spec.initializer(), InitializerStream(table.spec), key, row.data, table.dim);
  table.optimizer->InitState(row.data, row.data + table.dim, table.dim);
  return row;
}

TableStore::Row* TableStore::RowFor(Slot& slot, const Table& table, uint64_t key) {
  if (table.dropped.load()) return nullptr;  // its rows may be erased from this slot already
  const RowKey rk{table.spec.table_id(), key};
  auto it = slot.rows.find(rk);
  if (it != slot.rows.end()) return &it->second;
  CountNewRows(table, 1);
  return InsertRow(slot, table, rk);
}

TableStore::Row* TableStore::InsertRow(Slot& slot, const Table& table, const RowKey& rk) {
  return &slot.rows.emplace(rk, NewRow(table, rk.second)).first->second;
}

void TableStore::CountNewRows(const Table& table, uint64_t rows) const {
  if (rows == 0) return;
  const uint64_t bytes = rows * table.row_floats * sizeof(float);
  table.bytes.fetch_add(bytes);
  if (table.metrics != nullptr) {
    table.metrics->rows->Increment(static_cast<double>(rows));
    table.metrics->bytes->Increment(static_cast<double>(bytes));
  }
}

template <typename Fn>
absl::Status TableStore::ForEachRow(const Table& t, absl::Span<const uint64_t> keys,
                                    const SlotGroups* groups, size_t prefetch_bytes, bool for_write,
                                    Fn fn) {
  constexpr size_t kProbeAhead = 8;  // hash entries are fetched this many keys ahead
  constexpr size_t kRowsAhead = 4;   // rows are fetched this many keys ahead of fn
  constexpr size_t kLine = 64;
  prefetch_bytes = std::min<size_t>(prefetch_bytes, 4 * kLine);  // the hardware fetches the rest
  const uint32_t table_id = t.spec.table_id();
  auto fetch_row = [&](const float* data) {
    const char* p = reinterpret_cast<const char*>(data);
    for (size_t off = 0; off < prefetch_bytes; off += kLine) {
      if (for_write) {
        __builtin_prefetch(p + off, 1);
      } else {
        __builtin_prefetch(p + off, 0);
      }
    }
  };
  uint64_t created = 0;  // rows created, counted once at the end
  // The keys of a batch of slots, in the batch's order: (slot, index into keys). On the stack
  // for a batch of up to twice kBatchKeys keys (a small request allocates nothing).
  absl::InlinedVector<std::pair<Slot*, uint32_t>, 2 * kBatchKeys> stream;
  // Every slot of `batch` is locked (by ForEachSlotBatch or ForEachSlotGroup).
  auto run_batch = [&](absl::Span<const SlotGroupRef<Slot>> batch)
                       ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
    // Checked once per batch: DropJob sets the flag before it takes the slot locks to erase.
    if (t.dropped.load()) return TableDroppedError(t);
    stream.clear();
    for (const SlotGroupRef<Slot>& g : batch) {
      for (uint32_t i : g.group) stream.emplace_back(g.slot, i);
    }
    const size_t n = stream.size();
    auto key_at = [&](size_t j) { return RowKey{table_id, keys[stream[j].second]}; };
    for (size_t j = 0; j < std::min(n, kProbeAhead); ++j) stream[j].first->rows.prefetch(key_at(j));
    // Rows found and waiting for fn: pointers into the maps, valid until the next insertion
    // (which may move every row of its slot), so the ring is emptied before each insertion.
    std::pair<Row*, uint32_t> ring[kRowsAhead];
    size_t head = 0;  // rows put in the ring
    size_t tail = 0;  // rows handed to fn
    auto drain_to = [&](size_t keep) {
      while (head - tail > keep) {
        const auto& [row, i] = ring[tail++ % kRowsAhead];
        fn(*row, i);
      }
    };
    for (size_t j = 0; j < n; ++j) {
      if (j + kProbeAhead < n)
        stream[j + kProbeAhead].first->rows.prefetch(key_at(j + kProbeAhead));
      Slot& slot = *stream[j].first;
      const RowKey rk = key_at(j);
      auto it = slot.rows.find(rk);
      Row* row = nullptr;
      if (it != slot.rows.end()) {
        row = &it->second;
        fetch_row(row->data);
      } else {
        drain_to(0);
        row = InsertRow(slot, t, rk);
        ++created;
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

void TableStore::CountErasedRow(const Table& table) const {
  table.bytes.fetch_sub(static_cast<uint64_t>(table.row_floats) * sizeof(float));
  if (table.metrics != nullptr) {
    table.metrics->rows->Decrement();
    table.metrics->bytes->Decrement(static_cast<double>(table.row_floats) * sizeof(float));
  }
}

void TableStore::ApplyToRow(const Table& table, const void* grad, float lr_scale, Row& row) const {
  if (options_.nonfinite == NonFinitePolicy::kSkipRow && NonFiniteBits(grad, table.dim) != 0) {
    return;
  }
  ++row.updates;
  table.optimizer->ApplyScaled(grad, table.dim, row.updates, lr_scale, row.data,
                               row.data + table.dim);
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
  return ForEachRow(
      t, view.keys, &view.groups, row_bytes, /*for_write=*/false,
      [&](const Row& row, uint32_t i) { std::memcpy(out + i * row_bytes, row.data, row_bytes); });
}

absl::Status TableStore::Apply(const BlockView& view, float lr_scale) {
  const Table& t = *view.table;
  std::vector<float> scratch(view.scattered != nullptr ? t.dim : 0);
  return ForEachRow(
      t, view.keys, &view.groups, t.row_floats * sizeof(float), /*for_write=*/true,
      [&](Row& row, uint32_t i) { ApplyToRow(t, view.Grad(i, scratch.data()), lr_scale, row); });
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
  for (TableRef& t : TablesOf(job_id)) job_tables[t->spec.table_id()] = std::move(t);
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
      // A table dropped meanwhile: its sums are erased unapplied (DropJob would erase them).
      if (Row* row = RowFor(slot, *table->second, it->first.second)) {
        ApplyToRow(*table->second, it->second.data(), lr_scale, *row);
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

uint64_t TableStore::ShardEpoch(const std::string& job_id) const { return ShardsOf(job_id)->epoch; }

std::vector<bool> TableStore::OwnedSlots(const std::string& job_id) const {
  const std::shared_ptr<const Shards> shards = ShardsOf(job_id);
  std::vector<bool> owned(kNumSlots);
  for (uint32_t s = 0; s < kNumSlots; ++s) owned[s] = shards->Owns(s);
  return owned;
}

absl::Status TableStore::CheckShardEpoch(const std::string& job_id, uint64_t epoch) const {
  if (epoch == 0) return absl::OkStatus();
  const uint64_t current = ShardsOf(job_id)->epoch;
  if (epoch >= current) return absl::OkStatus();
  return Rejected(RejectReason::kWrongShard, absl::FailedPreconditionError(absl::StrCat(
                                                 "stale shard map epoch ", epoch, " of job ",
                                                 job_id, "; this server is at ", current)));
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

}  // namespace ps
