// TableStore's whole-job passes: snapshots and loads of slots (checkpoints and restores),
// clearing pending sync gradients, and visiting every row of a table.
#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "server/internal/store_helpers.h"
#include "server/table_store.h"

namespace ps {

using store_internal::DroppedError;
using store_internal::ErasePendingIf;

JobSnapshot TableStore::Snapshot(const std::string& job_id) const {
  JobSnapshot snap;
  snap.job_id = job_id;
  const std::shared_ptr<const Shards> shards = ShardsOf(job_id);
  snap.shard_epoch = shards->epoch;
  snap.slots.resize(kNumSlots);
  for (uint32_t s = 0; s < kNumSlots; ++s) snap.slots[s] = shards->Owns(s);
  const std::vector<TableRef> tables = TablesOf(job_id);
  absl::flat_hash_map<uint32_t, size_t> index;  // table id -> position in `tables`
  for (const TableRef& t : tables) {
    index[t->spec.table_id()] = snap.tables.size();
    snap.tables.push_back(t->spec);
  }
  if (tables.empty()) return snap;
  std::vector<size_t> counts(tables.size());
  std::vector<SlotRows*> out(tables.size());
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    if (!snap.slots[s]) continue;
    Slot& slot = slots_[s];
    absl::MutexLock l(&slot.mu);
    // Two passes: count, then copy into buffers of the exact size (no regrowth, no zero fill).
    std::fill(counts.begin(), counts.end(), 0);
    for (const auto& [rk, row] : slot.rows) {
      auto it = index.find(rk.first);
      if (it != index.end()) ++counts[it->second];
    }
    const size_t first = snap.rows.size();
    for (size_t i = 0; i < tables.size(); ++i) {
      if (counts[i] == 0) continue;
      SlotRows& r = snap.rows.emplace_back();
      r.slot = s;
      r.table_id = tables[i]->spec.table_id();
      r.row_floats = static_cast<uint32_t>(tables[i]->row_floats);
      r.keys.reserve(counts[i]);
      r.updates.reserve(counts[i]);
      r.data.reserve(counts[i] * r.row_floats);
    }
    for (size_t i = 0, next = first; i < tables.size(); ++i) {
      out[i] = counts[i] == 0 ? nullptr : &snap.rows[next++];
    }
    for (const auto& [rk, row] : slot.rows) {
      auto it = index.find(rk.first);
      if (it == index.end()) continue;
      SlotRows& r = *out[it->second];
      r.keys.push_back(rk.second);
      r.updates.push_back(row.updates);
      r.data.insert(r.data.end(), row.data, row.data + r.row_floats);
    }
  }
  for (const SlotRows& r : snap.rows) {
    snap.num_rows += r.size();
    snap.bytes += r.bytes();
  }
  return snap;
}

absl::Status TableStore::CheckLoad(const std::string& job_id, const std::vector<bool>& slots,
                                   const std::vector<SlotRows>& rows,
                                   const absl::flat_hash_map<uint32_t, TableRef>& tables) const {
  if (slots.size() != kNumSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("slots to load: ", slots.size(), " entries, want ", kNumSlots));
  }
  for (const SlotRows& r : rows) {
    auto it = tables.find(r.table_id);
    if (it == tables.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("loaded rows of table ", r.table_id, ", not a table of job ", job_id));
    }
    const Table& t = *it->second;
    if (r.slot >= kNumSlots || !slots[r.slot]) {
      return absl::InvalidArgumentError(absl::StrCat("loaded rows of table ", r.table_id,
                                                     " in slot ", r.slot, ", not a slot to load"));
    }
    if (static_cast<int>(r.row_floats) != t.row_floats || r.updates.size() != r.keys.size() ||
        r.data.size() != r.keys.size() * r.row_floats) {
      return absl::InvalidArgumentError(
          absl::StrCat("loaded rows of table ", r.table_id, " in slot ", r.slot, ": ",
                       r.keys.size(), " keys, ", r.data.size(), " floats of rows of ", r.row_floats,
                       " (the table's rows have ", t.row_floats, ")"));
    }
    const bool dense = t.spec.kind() == v1::DENSE;
    for (uint64_t key : r.keys) {
      if (SlotOf(r.table_id, key) != r.slot || (dense && key >= t.spec.num_rows())) {
        return absl::InvalidArgumentError(absl::StrCat("loaded row ", key, " of table ", r.table_id,
                                                       " does not belong in slot ", r.slot,
                                                       " (or is out of range)"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status TableStore::LoadSlots(const std::string& job_id, const std::vector<bool>& slots,
                                   const std::vector<SlotRows>& rows) {
  PS_RETURN_IF_ERROR(CheckNotDropped(job_id));
  absl::flat_hash_map<uint32_t, TableRef> tables;
  for (TableRef& t : TablesOf(job_id)) tables[t->spec.table_id()] = std::move(t);
  if (absl::Status valid = CheckLoad(job_id, slots, rows, tables); !valid.ok()) {
    // Tables that vanished are those of a job dropped meanwhile: say so (not a bad checkpoint).
    PS_RETURN_IF_ERROR(CheckNotDropped(job_id));
    return valid;
  }
  const auto any_dropped = [&tables] {
    for (const auto& [id, t] : tables) {
      if (t->dropped.load()) return true;
    }
    return false;
  };
  std::vector<std::vector<const SlotRows*>> by_slot(kNumSlots);
  for (const SlotRows& r : rows) by_slot[r.slot].push_back(&r);
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    if (!slots[s]) continue;
    Slot& slot = slots_[s];
    absl::MutexLock l(&slot.mu);
    // The job's tables are dropped together: DropJob empties (or emptied) the slots loaded so
    // far, and nothing is loaded into the others.
    if (any_dropped()) return DroppedError(job_id);
    for (auto it = slot.rows.begin(); it != slot.rows.end();) {
      auto table = tables.find(it->first.first);
      if (table == tables.end()) {
        ++it;
        continue;
      }
      CountErasedRow(*table->second);
      table->second->arena->Free(it->second.data);
      slot.rows.erase(it++);
    }
    ErasePendingIf(slot.pending, [&](uint32_t id) { return tables.contains(id); });
    for (const SlotRows* r : by_slot[s]) {
      const Table& t = *tables.at(r->table_id);
      slot.rows.reserve(slot.rows.size() + r->size());
      for (size_t i = 0; i < r->size(); ++i) {
        // A key listed twice is loaded once (its last row wins).
        auto [it, inserted] = slot.rows.try_emplace(RowKey{r->table_id, r->keys[i]});
        Row& row = it->second;
        if (inserted) {
          row.data = t.arena->Allocate();
          t.bytes.fetch_add(static_cast<uint64_t>(r->row_floats) * sizeof(float));
        }
        std::memcpy(row.data, r->row(i), r->row_floats * sizeof(float));
        row.updates = r->updates[i];
      }
      if (t.metrics != nullptr) {
        t.metrics->rows->Increment(static_cast<double>(r->size()));
        t.metrics->bytes->Increment(static_cast<double>(r->bytes()));
      }
    }
  }
  return absl::OkStatus();
}

void TableStore::ClearPending(const std::string& job_id) {
  {
    absl::MutexLock l(&scale_mu_);
    for (auto it = pending_scale_.begin(); it != pending_scale_.end();) {
      if (it->first.first == job_id) {
        pending_scale_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  absl::flat_hash_set<uint32_t> tables;
  for (const TableRef& t : TablesOf(job_id)) tables.insert(t->spec.table_id());
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    Slot& slot = slots_[s];
    absl::MutexLock l(&slot.mu);
    ErasePendingIf(slot.pending, [&](uint32_t id) { return tables.contains(id); });
  }
}

void TableStore::ForEachRow(
    uint32_t table_id,
    absl::FunctionRef<void(uint64_t key, int64_t updates, absl::Span<const float> row)> fn) const {
  const TableRef t = FindTable(table_id);
  if (t == nullptr) return;
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    absl::MutexLock l(&slots_[s].mu);
    for (const auto& [rk, row] : slots_[s].rows) {
      if (rk.first == table_id) {
        fn(rk.second, row.updates, absl::MakeConstSpan(row.data, t->row_floats));
      }
    }
  }
}

}  // namespace ps
