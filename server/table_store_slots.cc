// TableStore's whole-job passes: loads of slots (restores), clearing pending sync gradients, and
// visiting every row of a table (snapshots: table_store_snapshot.cc).
#include <glog/logging.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "server/internal/store_helpers.h"
#include "server/table_store.h"

namespace ps {

using store_internal::ErasePendingIf;
using store_internal::NoMemoryError;

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
  // The cap per server holds for the rows of every slot loaded together.
  absl::flat_hash_map<uint32_t, uint64_t> loaded;
  for (const SlotRows& r : rows) loaded[r.table_id] += r.keys.size();
  for (const auto& [id, n] : loaded) {
    const Table& t = *tables.at(id);
    // (A table with a disk tier takes them all: those past the cap go to disk.)
    if (t.max_rows != 0 && t.tier == nullptr && n > t.max_rows) {
      return absl::FailedPreconditionError(absl::StrCat(
          "table ", id, " ('", t.spec.name(), "'): the checkpoint holds ", n,
          " rows for this server, over the table's cap of ", t.max_rows,
          " rows per server (eviction.max_rows); nothing was loaded. Restore it with a larger "
          "cap or onto more servers"));
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
    if (any_dropped()) return JobDroppedError(job_id);
    for (const auto& [id, t] : tables) {
      CountErasedRows(*t, ClearSlot(slot, *t));
      PS_RETURN_IF_ERROR(ClearDiskSlot(*t, s));
    }
    ErasePendingIf(slot.pending, [&](uint32_t id) { return tables.contains(id); });
    for (const SlotRows* r : by_slot[s]) {
      const Table& t = *tables.at(r->table_id);
      const uint32_t now = Now();
      uint64_t added = 0;
      std::vector<size_t> to_disk;  // rows past the cap of a table with a disk tier
      for (size_t i = 0; i < r->size(); ++i) {
        // A key listed twice is loaded once (its last row wins).
        uint32_t handle = t.index[s].Find(*t.arena, r->keys[i]);
        if (handle == RowArena::kNoRow && t.tier != nullptr &&
            t.rows.load(std::memory_order_relaxed) >= t.max_rows) {
          to_disk.push_back(i);
          continue;
        }
        if (handle == RowArena::kNoRow) {
          handle = t.arena->Allocate();
          if (handle == RowArena::kNoRow) return NoMemoryError(t);
          t.Header(t.arena->At(handle))->key = r->keys[i];
          if (!IndexRow(slot, t, handle)) {
            t.arena->Free(handle);
            return NoMemoryError(t);
          }
          t.rows.fetch_add(1, std::memory_order_relaxed);
          ++added;
        }
        char* row = t.arena->At(handle);
        RowHeader* header = t.Header(row);
        header->updates = static_cast<uint32_t>(
            std::clamp<int64_t>(r->updates[i], 0, std::numeric_limits<uint32_t>::max()));
        header->used = now;
        t.WriteValues(row, r->row(i));
        std::memcpy(t.State(row), r->row(i) + t.dim, t.state_floats * sizeof(float));
        t.StampRow(row);
      }
      CountNewRows(t, added);
      PS_RETURN_IF_ERROR(PutOnDisk(t, s, *r, to_disk));
    }
  }
  {
    // Loaded again: whatever sums were lost in these slots no longer matter (CheckNotLost).
    absl::MutexLock l(&lost_mu_);
    if (auto lost = lost_.find(job_id); lost != lost_.end()) {
      for (uint32_t s = 0; s < kNumSlots; ++s) {
        if (slots[s]) lost->second.slots.erase(s);
      }
      if (lost->second.slots.empty()) lost_.erase(lost);
      any_lost_.store(!lost_.empty(), std::memory_order_release);
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
  std::vector<float> floats(t->row_floats);
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    absl::MutexLock l(&slots_[s].mu);
    t->index[s].ForEach([&](uint32_t handle) {
      const char* row = t->arena->At(handle);
      t->ReadValues(row, floats.data());
      std::memcpy(floats.data() + t->dim, t->State(row), t->state_floats * sizeof(float));
      fn(t->Header(row)->key, t->Header(row)->updates, floats);
    });
    SlotRows on_disk;
    on_disk.row_floats = static_cast<uint32_t>(t->row_floats);
    if (absl::Status st = AppendDiskRows(*t, s, &on_disk); !st.ok()) {
      LOG(ERROR) << "rows on disk of slot " << s << " not visited: " << st;
    }
    for (size_t i = 0; i < on_disk.size(); ++i) {
      fn(on_disk.keys[i], on_disk.updates[i],
         absl::MakeConstSpan(on_disk.row(i), on_disk.row_floats));
    }
  }
}

}  // namespace ps
