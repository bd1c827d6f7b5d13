// TableStore's disk tier (TableSpec.tier, docs/embedding-tables.md#disk-tier): rows evicted from
// RAM are written back, rows not in RAM are read back (one batched read per request and slot)
// before a pass uses them, prefetched rows are pinned, and checkpoints, restores and drops
// cover the rows on disk. Everything here runs under the slot's lock, as eviction does: a row
// is in RAM or on disk, never between, for any request that can see it.
#include <glog/logging.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "server/internal/store_helpers.h"
#include "server/table_store.h"

namespace ps {

using store_internal::NoMemoryError;
using store_internal::TableDroppedError;

namespace {

// `s` with the table named in front (the tier's errors name its directory).
absl::Status OfTable(const TableStore::Table& t, absl::Status s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat("table ", t.spec.table_id(), " ('", t.spec.name(),
                                             "') of job '", t.spec.job_id(), "': ", s.message()));
}

// Bytes of a stored row (the row after its key) at which its last use is kept.
constexpr size_t kStoredUsedOffset = offsetof(TableStore::RowHeader, used) - sizeof(uint64_t);

// A row's worth of aligned scratch memory.
std::vector<uint64_t> RowBuffer(const TableStore::Table& t) {
  return std::vector<uint64_t>((t.row_bytes + 7) / 8);
}

}  // namespace

absl::StatusOr<DiskTier*> TableStore::Tier(const v1::TableSpec& spec) {
  absl::MutexLock l(&tier_mu_);
  if (tier_ != nullptr) return tier_.get();
  if (options_.tier.dir.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("table ", spec.table_id(), " ('", spec.name(),
                     "'): tier.disk needs a disk tier, and this server has none (start ps_server "
                     "with --tier_roots); nothing was created"));
  }
  PS_ASSIGN_OR_RETURN(tier_, DiskTier::Open(options_.tier));
  LOG(INFO) << "disk tier opened at " << options_.tier.dir << " (block cache "
            << (options_.tier.block_cache_bytes >> 20) << " MiB, write buffers 2 x "
            << (options_.tier.write_buffer_bytes >> 20) << " MiB)";
  return tier_.get();
}

bool TableStore::Pinned(const Table& t, uint32_t slot, uint64_t key, const RowPins* pins) const {
  if (pins != nullptr && pins->contains(key)) return true;
  auto& pinned = t.pinned[slot];
  if (pinned.empty()) return false;
  auto it = pinned.find(key);
  if (it == pinned.end()) return false;
  if (Now() <= it->second) return true;
  pinned.erase(it);  // its time is up
  t.pinned_rows.fetch_sub(1, std::memory_order_relaxed);
  return false;
}

void TableStore::Unpin(const Table& t, uint32_t slot, uint64_t key) const {
  if (t.pinned == nullptr || t.pinned[slot].empty()) return;
  if (t.pinned[slot].erase(key) != 0) t.pinned_rows.fetch_sub(1, std::memory_order_relaxed);
}

void TableStore::ClearPins(const Table& t, uint32_t slot) const {
  if (t.pinned == nullptr || t.pinned[slot].empty()) return;
  t.pinned_rows.fetch_sub(t.pinned[slot].size(), std::memory_order_relaxed);
  t.pinned[slot].clear();
}

void TableStore::PruneExpiredPins(const Table& t) {
  const uint32_t now = Now();
  for (uint32_t s = 0; s < kNumSlots && t.pinned_rows.load() != 0; ++s) {
    absl::MutexLock l(&slots_[s].mu);
    auto& pinned = t.pinned[s];
    const size_t before = pinned.size();
    absl::erase_if(pinned, [&](const auto& pin) { return now > pin.second; });
    t.pinned_rows.fetch_sub(before - pinned.size(), std::memory_order_relaxed);
  }
}

absl::Status TableStore::WriteBack(const Table& t, uint32_t slot, const char* row) const {
  const DiskTier::Row stored{t.Header(row)->key,
                             std::string(row + sizeof(uint64_t), StoredBytes(t))};
  PS_RETURN_IF_ERROR(OfTable(t, t.tier->Put(t.tier_prefix, slot, absl::MakeConstSpan(&stored, 1))));
  ++t.disk_rows_in_slot[slot];
  t.disk_rows.fetch_add(1, std::memory_order_relaxed);
  t.written_back.fetch_add(1, std::memory_order_relaxed);
  if (t.metrics != nullptr && t.metrics->written_back != nullptr) {
    t.metrics->written_back->Increment();
    t.metrics->disk_rows->Increment();
  }
  return absl::OkStatus();
}

absl::Status TableStore::ReadBack(Slot& slot, const Table& t, absl::Span<const uint64_t> keys,
                                  const RowPins& pins) {
  if (t.dropped.load()) return TableDroppedError(t);
  const uint32_t s = SlotIndex(slot);
  std::vector<uint64_t> missing;
  for (uint64_t key : keys) {
    if (t.index[s].Find(*t.arena, key) == RowArena::kNoRow) missing.push_back(key);
  }
  const uint64_t hits = keys.size() - missing.size();
  t.ram_hits.fetch_add(hits, std::memory_order_relaxed);
  if (t.metrics != nullptr && t.metrics->ram_hits != nullptr && hits != 0) {
    t.metrics->ram_hits->Increment(static_cast<double>(hits));
  }
  // A slot with nothing on disk needs no read (a new table, or keys never evicted).
  if (missing.empty() || t.disk_rows_in_slot[s] == 0) return absl::OkStatus();
  t.disk_lookups.fetch_add(missing.size(), std::memory_order_relaxed);
  std::vector<std::string> values;
  std::vector<bool> found;
  const absl::Time start = absl::Now();
  PS_RETURN_IF_ERROR(OfTable(t, t.tier->MultiGet(t.tier_prefix, s, missing, &values, &found)));
  if (t.metrics != nullptr && t.metrics->disk_lookups != nullptr) {
    t.metrics->disk_lookups->Increment(static_cast<double>(missing.size()));
    t.metrics->disk_read_seconds->Observe(absl::ToDoubleSeconds(absl::Now() - start));
  }
  std::vector<uint64_t> gone;  // read back into RAM, or expired: off the disk
  uint64_t loaded = 0;
  uint64_t expired = 0;
  absl::Status status;
  for (size_t j = 0; j < missing.size(); ++j) {
    if (!found[j]) continue;
    if (values[j].size() != StoredBytes(t)) {
      status = OfTable(
          t, absl::DataLossError(absl::StrCat("row ", missing[j], " on disk has ", values[j].size(),
                                              " bytes, want ", StoredBytes(t))));
      break;
    }
    uint32_t used;
    std::memcpy(&used, values[j].data() + kStoredUsedOffset, sizeof(used));
    if (Expired(t, used)) {
      gone.push_back(missing[j]);
      ++expired;
      continue;
    }
    absl::Status error;
    if (InsertRow(slot, t, missing[j], nullptr, &pins, &error, values[j].data()) == nullptr) {
      status = error.ok() ? NoMemoryError(t) : error;
      break;
    }
    gone.push_back(missing[j]);
    ++loaded;
  }
  // One batch of deletes. Should it fail (a full disk), a stale copy stays on disk: harmless,
  // since RAM is looked up first and scans pass keys in RAM by; the next write-back replaces it.
  if (!gone.empty() && t.tier->Delete(t.tier_prefix, s, gone).ok()) {
    t.disk_rows_in_slot[s] -= static_cast<uint32_t>(gone.size());
    t.disk_rows.fetch_sub(gone.size(), std::memory_order_relaxed);
    if (t.metrics != nullptr && t.metrics->disk_rows != nullptr) {
      t.metrics->disk_rows->Decrement(static_cast<double>(gone.size()));
    }
  }
  t.disk_reads.fetch_add(loaded, std::memory_order_relaxed);
  if (t.metrics != nullptr && t.metrics->disk_reads != nullptr && loaded != 0) {
    t.metrics->disk_reads->Increment(static_cast<double>(loaded));
  }
  CountNewRows(t, loaded);
  CountEvicted(t, 0, expired);
  return status;
}

uint64_t TableStore::ExpireOnDisk(const Table& t) {
  uint64_t budget = kDiskSweepRows;
  uint64_t expired = 0;
  uint32_t s = t.disk_sweep_slot.load() % kNumSlots;
  uint64_t from = t.disk_sweep_key.load();
  const uint64_t chunk_rows = std::max<uint64_t>(1, options_.disk_sweep_chunk);
  std::vector<uint64_t> gone;
  // A slot's lock is held for one chunk of its rows at a time: its requests wait for a chunk's
  // reads and deletes at most. Each chunk looks again under the lock whether a key is in RAM.
  for (uint32_t visited = 0; visited < kNumSlots && budget > 0;) {
    bool slot_done = true;
    {
      Slot& slot = slots_[s];
      absl::MutexLock l(&slot.mu);
      if (t.dropped.load()) return expired;
      if (t.disk_rows_in_slot[s] != 0) {
        gone.clear();
        uint64_t chunk = std::min(budget, chunk_rows);
        const absl::Status scanned =
            t.tier->ScanSlotFrom(t.tier_prefix, s, from, [&](uint64_t key, absl::string_view row) {
              if (chunk == 0) {  // the next chunk (or call) goes on from here
                from = key;
                slot_done = false;
                return false;
              }
              --chunk;
              --budget;
              if (row.size() != StoredBytes(t)) return true;  // a read of it says DATA_LOSS
              uint32_t used;
              std::memcpy(&used, row.data() + kStoredUsedOffset, sizeof(used));
              // A key in RAM has a stale copy here at most (its RAM row rules): left alone.
              if (Expired(t, used) && t.index[s].Find(*t.arena, key) == RowArena::kNoRow) {
                gone.push_back(key);
              }
              return true;
            });
        LOG_IF_EVERY_N(WARNING, !scanned.ok(), 100) << OfTable(t, scanned);
        // Deleted, or left for the next sweep (a full disk may refuse the deletes too).
        if (!gone.empty() && t.tier->Delete(t.tier_prefix, s, gone).ok()) {
          t.disk_rows_in_slot[s] -= static_cast<uint32_t>(gone.size());
          t.disk_rows.fetch_sub(gone.size(), std::memory_order_relaxed);
          if (t.metrics != nullptr && t.metrics->disk_rows != nullptr) {
            t.metrics->disk_rows->Decrement(static_cast<double>(gone.size()));
          }
          expired += gone.size();
        }
      }
    }
    if (slot_done) {
      s = (s + 1) % kNumSlots;
      from = 0;
      ++visited;
    } else if (budget > 0 && options_.between_disk_sweep_chunks) {
      options_.between_disk_sweep_chunks(s);
    }
  }
  t.disk_sweep_slot.store(s);
  t.disk_sweep_key.store(from);
  CountEvicted(t, 0, expired);
  return expired;
}

absl::Status TableStore::TieredBatch(const Table& t, absl::Span<const SlotGroupRef<Slot>> batch,
                                     absl::Span<const uint64_t> keys, Missing missing, bool pull,
                                     uint64_t* created, absl::FunctionRef<void(char*, uint32_t)> fn)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // The batch's keys stay in RAM until the pass is done: making room for one never pushes out
  // another (which would then look new).
  RowPins pins;
  for (const SlotGroupRef<Slot>& g : batch) {
    for (uint32_t i : g.group) pins.insert(keys[i]);
  }
  PS_RETURN_IF_ERROR(SwapIn(t, batch, keys, pins));
  const uint32_t now = Now();
  for (const SlotGroupRef<Slot>& g : batch) {
    Slot& slot = *g.slot;
    const uint32_t s = SlotIndex(slot);
    for (uint32_t i : g.group) {
      const uint64_t key = keys[i];
      const uint32_t found = t.index[s].Find(*t.arena, key);
      char* row = nullptr;
      if (found != RowArena::kNoRow) {
        row = t.arena->At(found);
        t.Header(row)->used = now;
      } else if (!t.admission || missing == Missing::kCreate ||
                 (missing == Missing::kPush && Admit(slot, t, key))) {
        absl::Status error;
        row = InsertRow(slot, t, key, nullptr, &pins, &error);
        if (row == nullptr) return error.ok() ? NoMemoryError(t) : error;
        ++*created;
      } else if (missing == Missing::kPush) {
        continue;  // not admitted: the push only counted
      }
      if (pull) Unpin(t, s, key);
      fn(row, i);
    }
  }
  TrimToCap(t, batch);
  return absl::OkStatus();
}

absl::Status TableStore::SwapIn(const Table& t, absl::Span<const SlotGroupRef<Slot>> batch,
                                absl::Span<const uint64_t> keys,
                                const RowPins& pins) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // 1. The keys not in RAM, and those of them on disk: one read for the batch of slots.
  struct OnDisk {
    size_t group;
    uint64_t key;
    std::string row;
  };
  std::vector<OnDisk> on_disk;
  std::vector<std::pair<uint32_t, uint64_t>> deletes;  // (slot, key) read back or expired
  std::vector<std::pair<uint32_t, uint64_t>> missing;  // (slot, key) to look up on disk
  std::vector<size_t> missing_group;                   // the batch group of each
  uint64_t hits = 0, not_in_ram = 0, expired = 0;
  for (size_t g = 0; g < batch.size(); ++g) {
    const uint32_t s = SlotIndex(*batch[g].slot);
    const bool on_disk_here = t.disk_rows_in_slot[s] != 0;  // else no read: new keys
    for (uint32_t i : batch[g].group) {
      if (t.index[s].Find(*t.arena, keys[i]) != RowArena::kNoRow) continue;
      ++not_in_ram;
      if (!on_disk_here) continue;
      missing.emplace_back(s, keys[i]);
      missing_group.push_back(g);
    }
    hits += batch[g].group.size();
  }
  hits -= not_in_ram;
  const uint64_t lookups = missing.size();
  if (!missing.empty()) {
    // One read for the batch's slots (at most one per request and slot, as promised).
    std::vector<std::string> values;
    std::vector<bool> found;
    const absl::Time start = absl::Now();
    PS_RETURN_IF_ERROR(OfTable(t, t.tier->MultiGet(t.tier_prefix, missing, &values, &found)));
    if (t.metrics != nullptr && t.metrics->disk_read_seconds != nullptr) {
      t.metrics->disk_read_seconds->Observe(absl::ToDoubleSeconds(absl::Now() - start));
    }
    for (size_t j = 0; j < missing.size(); ++j) {
      if (!found[j]) continue;
      const auto [s, key] = missing[j];
      if (values[j].size() != StoredBytes(t)) {
        return OfTable(t, absl::DataLossError(absl::StrCat("row ", key, " on disk has ",
                                                           values[j].size(), " bytes")));
      }
      uint32_t used;
      std::memcpy(&used, values[j].data() + kStoredUsedOffset, sizeof(used));
      if (Expired(t, used)) {
        deletes.emplace_back(s, key);
        ++expired;
        continue;
      }
      on_disk.push_back({missing_group[j], key, std::move(values[j])});
    }
  }
  t.ram_hits.fetch_add(hits, std::memory_order_relaxed);
  t.disk_lookups.fetch_add(lookups, std::memory_order_relaxed);
  if (t.metrics != nullptr && t.metrics->ram_hits != nullptr) {
    if (hits != 0) t.metrics->ram_hits->Increment(static_cast<double>(hits));
    if (lookups != 0) t.metrics->disk_lookups->Increment(static_cast<double>(lookups));
  }
  // 2. Room for every key not in RAM: victims among the batch's slots (their locks are held),
  // the least recently used of samples, never a key of the batch.
  const uint64_t rows = t.rows.load(std::memory_order_relaxed);
  // (Only for keys coming in: a batch found whole in RAM writes nothing, even over the cap.)
  uint64_t need =
      rows + not_in_ram > t.max_rows ? std::min(not_in_ram, rows + not_in_ram - t.max_rows) : 0;
  std::vector<std::pair<size_t, uint32_t>> victims;  // (group, row)
  std::vector<DiskTier::Write> puts;
  absl::flat_hash_set<uint32_t> chosen;
  for (size_t g = 0, idle = 0; need > 0 && idle < 2 * batch.size(); g = (g + 1) % batch.size()) {
    const uint32_t v = PickVictim(*batch[g].slot, t, &pins);
    if (v == RowArena::kNoRow || !chosen.insert(v).second) {
      ++idle;
      continue;
    }
    idle = 0;
    --need;
    victims.emplace_back(g, v);
    const char* row = t.arena->At(v);
    puts.push_back({SlotIndex(*batch[g].slot), t.Header(row)->key,
                    std::string(row + sizeof(uint64_t), StoredBytes(t))});
  }
  // 3. The rows read back enter RAM (until the write below, their copies on disk stay: harmless,
  // RAM is looked up first), then one write: the victims out, the rows read back deleted.
  uint64_t placed = 0;
  absl::Status status;
  for (const OnDisk& r : on_disk) {
    const uint32_t s = SlotIndex(*batch[r.group].slot);
    if (PlaceRow(*batch[r.group].slot, t, r.key, nullptr, r.row.data()) == nullptr) {
      status = NoMemoryError(t);
      break;
    }
    deletes.emplace_back(s, r.key);
    ++placed;
  }
  CountNewRows(t, placed);
  t.disk_reads.fetch_add(placed, std::memory_order_relaxed);
  if (t.metrics != nullptr && t.metrics->disk_reads != nullptr && placed != 0) {
    t.metrics->disk_reads->Increment(static_cast<double>(placed));
  }
  if (!status.ok()) return status;  // the victims stay; nothing was deleted
  PS_RETURN_IF_ERROR(OfTable(t, t.tier->Apply(t.tier_prefix, puts, deletes)));
  // 4. Written: the victims leave RAM.
  for (const auto& [g, v] : victims) {
    Slot& slot = *batch[g].slot;
    EraseRow(slot, t, t.Header(t.arena->At(v))->key, v);
    ++t.disk_rows_in_slot[SlotIndex(slot)];
  }
  for (const auto& [s, key] : deletes) --t.disk_rows_in_slot[s];
  const int64_t disk_change =
      static_cast<int64_t>(victims.size()) - static_cast<int64_t>(deletes.size());
  t.disk_rows.fetch_add(static_cast<uint64_t>(disk_change), std::memory_order_relaxed);
  t.written_back.fetch_add(victims.size(), std::memory_order_relaxed);
  if (t.metrics != nullptr && t.metrics->written_back != nullptr) {
    t.metrics->written_back->Increment(static_cast<double>(victims.size()));
    t.metrics->disk_rows->Increment(static_cast<double>(disk_change));
  }
  CountErasedRows(t, victims.size());
  CountEvicted(t, victims.size(), expired);
  return absl::OkStatus();
}

void TableStore::TrimToCap(const Table& t, absl::Span<const SlotGroupRef<Slot>> batch)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // A batch's own rows were pinned while it ran (the table may have passed its cap by up to
  // the batch's keys); now they may go. An error (a full disk) leaves the rest in RAM: the next
  // request that needs room fails with it.
  size_t next = 0;
  size_t idle = 0;  // slots tried in a row without an eviction
  while (t.rows.load(std::memory_order_relaxed) > t.max_rows && idle < batch.size()) {
    absl::Status error;
    if (EvictOne(*batch[next].slot, t, nullptr, &error)) {
      idle = 0;
    } else {
      if (!error.ok()) {
        LOG_EVERY_N(WARNING, 1000) << "table over its RAM cap: " << error;
        return;
      }
      ++idle;
    }
    next = (next + 1) % batch.size();
  }
}

void TableStore::ReadBackPending(
    Slot& slot, const absl::flat_hash_map<RowKey, std::vector<float>>& sums,
    const absl::flat_hash_map<uint32_t, std::shared_ptr<const Table>>& tables,
    absl::flat_hash_map<uint32_t, RowPins>* pins) {
  absl::flat_hash_map<uint32_t, std::vector<uint64_t>> keys;
  for (const auto& [row_key, sum] : sums) {
    auto t = tables.find(row_key.first);
    if (t != tables.end() && t->second->tier != nullptr)
      keys[row_key.first].push_back(row_key.second);
  }
  for (auto& [id, k] : keys) {
    const Table& t = *tables.at(id);
    RowPins p(k.begin(), k.end());
    if (absl::Status s = ReadBack(slot, t, k, p); !s.ok()) {
      LOG_EVERY_N(ERROR, 100) << "sync sums of slot " << SlotIndex(slot) << " not applied: " << s;
      continue;
    }
    (*pins)[id] = std::move(p);
  }
}

absl::Status TableStore::Prefetch(const BlockView& view, absl::Duration pin_for) {
  const Table& t = *view.table;
  if (t.tier == nullptr || view.keys.empty()) return absl::OkStatus();
  const uint32_t until = static_cast<uint32_t>(std::min<int64_t>(
      int64_t{Now()} + std::max<int64_t>(1, absl::ToInt64Seconds(pin_for)), UINT32_MAX));
  const absl::Span<const uint64_t> keys = view.keys;
  const RowPins pins(keys.begin(), keys.end());
  // As a pull's pass does (TieredBatch): the slots taken kBatchKeys keys at a time, each batch
  // with one read from disk and one write (SwapIn), never pushing out a key of the request.
  // Bounded: a batch is read only if its keys fit under PinBound (reserved before the read, so
  // that concurrent prefetches cannot pass it together) and the table's RAM rows are within a
  // batch of the cap (requests' own rows may overshoot it for a while); else its keys are
  // skipped (counted). A batch read is trimmed back to the cap (never a pinned row): a
  // prefetch takes RAM rows two batches' keys past the cap at most.
  const uint64_t bound = PinBound(t);
  auto fetch = [&](absl::Span<const SlotGroupRef<Slot>> batch)
                   ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
    if (t.dropped.load()) return TableDroppedError(t);
    uint64_t n = 0;
    for (const SlotGroupRef<Slot>& g : batch) n += g.group.size();
    if (t.pinned_rows.fetch_add(n) + n > bound ||
        t.rows.load(std::memory_order_relaxed) > t.max_rows + kBatchKeys) {
      t.pinned_rows.fetch_sub(n);
      t.prefetch_skipped.fetch_add(n, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    uint64_t added = 0;
    absl::Status status = SwapIn(t, batch, keys, pins);
    if (status.ok()) {
      for (const SlotGroupRef<Slot>& g : batch) {
        const uint32_t s = SlotIndex(*g.slot);
        for (uint32_t i : g.group) {
          if (t.index[s].Find(*t.arena, keys[i]) == RowArena::kNoRow) continue;
          added += t.pinned[s].insert_or_assign(keys[i], until).second;
        }
      }
    }
    t.pinned_rows.fetch_sub(n - added);  // the reservation's unused part
    if (status.ok()) TrimToCap(t, batch);
    return status;
  };
  return ForEachSlotBatch(slots_.get(), t.spec.table_id(), keys, kBatchKeys, &view.groups, fetch);
}

absl::Status TableStore::AppendDiskRows(const Table& t, uint32_t s, SlotRows* r) const {
  if (t.tier == nullptr || t.disk_rows_in_slot[s] == 0) return absl::OkStatus();
  std::vector<uint64_t> buffer = RowBuffer(t);
  char* row = reinterpret_cast<char*>(buffer.data());
  absl::Status bad;
  PS_RETURN_IF_ERROR(
      OfTable(t, t.tier->ScanSlot(t.tier_prefix, s, [&](uint64_t key, absl::string_view stored) {
        if (stored.size() != StoredBytes(t)) {
          bad = OfTable(t, absl::DataLossError(absl::StrCat("row ", key, " on disk has ",
                                                            stored.size(), " bytes")));
          return;
        }
        if (t.index[s].Find(*t.arena, key) != RowArena::kNoRow) return;  // a stale copy
        std::memcpy(row + sizeof(uint64_t), stored.data(), stored.size());
        if (Expired(t, t.Header(row)->used)) return;
        r->keys.push_back(key);
        r->updates.push_back(t.Header(row)->updates);
        const size_t at = r->data.size();
        r->data.resize(at + r->row_floats);
        t.ReadValues(row, r->data.data() + at);
        std::memcpy(r->data.data() + at + t.dim, t.State(row), t.state_floats * sizeof(float));
      })));
  return bad;
}

absl::Status TableStore::ClearDiskSlot(const Table& t, uint32_t s) const {
  if (t.tier == nullptr || t.disk_rows_in_slot[s] == 0) return absl::OkStatus();
  PS_RETURN_IF_ERROR(OfTable(t, t.tier->DeleteSlot(t.tier_prefix, s)));
  const uint32_t rows = t.disk_rows_in_slot[s];
  t.disk_rows_in_slot[s] = 0;
  t.disk_rows.fetch_sub(rows, std::memory_order_relaxed);
  if (t.metrics != nullptr && t.metrics->disk_rows != nullptr) {
    t.metrics->disk_rows->Decrement(static_cast<double>(rows));
  }
  return absl::OkStatus();
}

absl::Status TableStore::PutOnDisk(const Table& t, uint32_t s, const SlotRows& r,
                                   absl::Span<const size_t> which) const {
  if (which.empty()) return absl::OkStatus();
  std::vector<uint64_t> buffer = RowBuffer(t);
  char* row = reinterpret_cast<char*>(buffer.data());
  RowHeader* header = t.Header(row);
  std::vector<DiskTier::Row> rows;
  rows.reserve(which.size());
  for (size_t i : which) {
    header->key = r.keys[i];
    header->updates = static_cast<uint32_t>(
        std::clamp<int64_t>(r.updates[i], 0, std::numeric_limits<uint32_t>::max()));
    header->used = Now();
    t.WriteValues(row, r.row(i));
    std::memcpy(t.State(row), r.row(i) + t.dim, t.state_floats * sizeof(float));
    t.StampRow(row);
    rows.emplace_back(r.keys[i], std::string(row + sizeof(uint64_t), StoredBytes(t)));
  }
  PS_RETURN_IF_ERROR(OfTable(t, t.tier->Put(t.tier_prefix, s, rows)));
  t.disk_rows_in_slot[s] += static_cast<uint32_t>(rows.size());
  t.disk_rows.fetch_add(rows.size(), std::memory_order_relaxed);
  if (t.metrics != nullptr && t.metrics->disk_rows != nullptr) {
    t.metrics->disk_rows->Increment(static_cast<double>(rows.size()));
  }
  return absl::OkStatus();
}

}  // namespace ps
