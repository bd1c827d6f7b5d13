// TableStore's row passes: finding and creating rows under their slots' locks (admission,
// eviction at a cap, expiry), and pulls, pushes and sync sums applied to them. The hot path of
// every request (compiled at -O3, see CMakeLists.txt).
#include <glog/logging.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "common/half.h"
#include "common/packed_bytes.h"
#include "common/shard_map.h"
#include "server/initializer.h"
#include "server/internal/prefetch.h"
#include "server/internal/slot_groups.h"
#include "server/internal/store_helpers.h"
#include "server/table_store.h"

namespace ps {

using store_internal::NoMemoryError;
using store_internal::TableDroppedError;

char* TableStore::RowFor(Slot& slot, const Table& table, uint64_t key, Missing missing,
                         const RowPins* pins, absl::Status* status) {
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
  char* row = InsertRow(slot, table, key, nullptr, pins, status);
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

char* TableStore::InsertRow(Slot& slot, const Table& table, uint64_t key, RowCache* cache,
                            const RowPins* pins, absl::Status* error, const char* stored) {
  // At the cap, a row of this slot goes first, else one of another slot that is free now;
  // where neither was found the table goes over by one, which the next inserts take back (two
  // evictions each at most). A row that cannot be written back to disk stays, and so no row is
  // added.
  absl::Status written;
  for (int i = 0;
       i < 2 && table.max_rows != 0 && table.rows.load(std::memory_order_relaxed) >= table.max_rows;
       ++i) {
    if (EvictOne(slot, table, pins, &written)) continue;
    if (!written.ok() || !EvictElsewhere(slot, table, &written)) break;
  }
  if (!written.ok()) {
    if (error != nullptr) *error = std::move(written);
    return nullptr;
  }
  return PlaceRow(slot, table, key, cache, stored);
}

char* TableStore::PlaceRow(Slot& slot, const Table& table, uint64_t key, RowCache* cache,
                           const char* stored) {
  const uint32_t handle = cache != nullptr ? cache->Take() : table.arena->Allocate();
  if (handle == RowArena::kNoRow) return nullptr;
  char* row = table.arena->At(handle);
  RowHeader* header = table.Header(row);
  header->key = key;
  header->updates = 0;
  header->used = Now();
  if (stored != nullptr) {
    std::memcpy(row + sizeof(uint64_t), stored, StoredBytes(table));
    header->used = Now();
  } else if (float* values = table.Values32(row)) {
    InitializeRow(table.spec.initializer(), table.init_stream, key, values, table.dim);
    table.optimizer->InitState(values, table.State(row), table.dim);
  } else {
    absl::InlinedVector<float, 256> initial(table.dim);
    InitializeRow(table.spec.initializer(), table.init_stream, key, initial.data(), table.dim);
    table.optimizer->InitState(initial.data(), table.State(row), table.dim);
    table.WriteValues(row, initial.data());
  }
  table.StampRow(row);
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
  Unpin(table, SlotIndex(slot), key);  // a prefetch pin ends with its row
  table.arena->Free(row);
  table.rows.fetch_sub(1, std::memory_order_relaxed);
}

uint32_t TableStore::PickVictim(Slot& slot, const Table& table, const RowPins* pins) {
  constexpr size_t kSample = 8;
  uint32_t sample[kSample];
  size_t n = table.index[SlotIndex(slot)].Sample(NextRandom(slot), sample, kSample);
  if (n == 0) return RowArena::kNoRow;
  for (size_t i = 0; i < n; ++i) PrefetchRead(table.arena->At(sample[i]));
  if (table.tier != nullptr) {  // rows the request (or a prefetch) needs are passed by
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t key = table.Header(table.arena->At(sample[i]))->key;
      if (!Pinned(table, SlotIndex(slot), key, pins)) sample[kept++] = sample[i];
    }
    n = kept;
    if (n == 0) return RowArena::kNoRow;
  }
  uint32_t victim = sample[0];
  uint32_t oldest = table.Header(table.arena->At(victim))->used;
  for (size_t i = 1; i < n; ++i) {
    const uint32_t used = table.Header(table.arena->At(sample[i]))->used;
    if (used < oldest) {
      oldest = used;
      victim = sample[i];
    }
  }
  return victim;
}

bool TableStore::EvictOne(Slot& slot, const Table& table, const RowPins* pins,
                          absl::Status* error) {
  const uint32_t victim = PickVictim(slot, table, pins);
  if (victim == RowArena::kNoRow) return false;
  if (table.tier != nullptr) {
    absl::Status s = WriteBack(table, SlotIndex(slot), table.arena->At(victim));
    if (!s.ok()) {
      if (error != nullptr) *error = std::move(s);
      return false;
    }
  }
  EraseRow(slot, table, table.Header(table.arena->At(victim))->key, victim);
  CountErasedRows(table, 1);
  CountEvicted(table, 1, 0);
  return true;
}

bool TableStore::EvictElsewhere(Slot& slot, const Table& table, absl::Status* error) {
  constexpr int kTries = 8;
  for (int i = 0; i < kTries; ++i) {
    Slot& other = slots_[NextRandom(slot) % kNumSlots];
    if (&other == &slot) continue;
    // Never waits: a slot held by this request (or another) is skipped, so no lock order forms.
    if (!other.mu.TryLock()) continue;
    const bool evicted = !table.dropped.load() && EvictOne(other, table, nullptr, error);
    other.mu.Unlock();
    if (evicted) return true;
    if (error != nullptr && !error->ok()) return false;
  }
  return false;
}

uint64_t TableStore::ClearSlot(Slot& slot, const Table& table) {
  RowIndex& index = table.index[SlotIndex(slot)];
  const uint64_t rows = index.size();
  ClearPins(table, SlotIndex(slot));
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

// One function of about 100 lines, on purpose: the fetching pipeline's state (the stream of keys,
// the ring of rows found, the stages' positions) lives in locals of one loop, on the hot path of
// every pull and push; split up, it would be handed from function to function per key.
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
    if (t.tier != nullptr) {
      return TieredBatch(t, batch, keys, missing, /*pull=*/missing != Missing::kPush, &created,
                         [&](char* row, uint32_t i) { fn(row, i); });
    }
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
  if (keys.size() < SlotGroups::kGroupFrom && t.tier == nullptr) {
    // Too few keys to group: slot by slot, each key under its own lock. (Tiered tables group
    // always: one read from disk per slot.)
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
  // Delta pulls: the values before, to stamp those that change.
  float* const before = table.delta ? scratch + table.dim : nullptr;
  if (before != nullptr) table.ReadValues(row, before);
  float* values = table.Values32(row);
  if (values != nullptr) {
    table.optimizer->ApplyScaled(grad, table.dim, header->updates, lr_scale, values,
                                 table.State(row));
  } else {
    // Half precision: the arithmetic in float32, the values rounded back to nearest.
    table.ReadValues(row, scratch);
    table.optimizer->ApplyScaled(grad, table.dim, header->updates, lr_scale, scratch,
                                 table.State(row));
    table.WriteValues(row, scratch);
    values = scratch;  // (a value rounded back to what it was is stamped too: harmless)
  }
  if (before == nullptr) return;
  const uint32_t now = table.StampNow();
  uint32_t* stamps = table.Stamps(row);
  for (int i = 0; i < table.dim; ++i) {
    uint32_t a, b;
    std::memcpy(&a, &before[i], sizeof(a));
    std::memcpy(&b, &values[i], sizeof(b));
    if (a != b) stamps[i] = now;
  }
}

absl::Status TableStore::PullDelta(const BlockView& view, uint64_t since, size_t max_changed,
                                   float* out, std::vector<uint32_t>* changed, bool* full,
                                   uint64_t* token) {
  const Table& t = *view.table;
  changed->clear();
  // First the epoch, then the rows (see Table::delta).
  const uint64_t epoch = t.pull_epoch.fetch_add(1, std::memory_order_acq_rel);
  const uint64_t since_epoch = since & 0xffffffffu;
  *full = since == 0 || static_cast<uint32_t>(since >> 32) != t.instance || since_epoch == 0 ||
          since_epoch > epoch;
  *token = epoch + 1 < UINT32_MAX ? (uint64_t{t.instance} << 32) | (epoch + 1) : 0;
  if (epoch + 1 >= UINT32_MAX) *full = true;
  const size_t dim = static_cast<size_t>(t.dim);
  auto read = [&](const char* row, uint32_t i) {
    t.ReadValues(row, out + i * dim);
    if (*full) return;
    const uint32_t* stamps = t.Stamps(row);
    for (size_t j = 0; j < dim; ++j) {
      if (stamps[j] >= since_epoch) changed->push_back(static_cast<uint32_t>(i * dim + j));
    }
    if (changed->size() > max_changed) {  // the whole block is smaller: stop collecting
      *full = true;
      changed->clear();
      changed->shrink_to_fit();
    }
  };
  PS_RETURN_IF_ERROR(ForEachRow(t, view.keys, &view.groups, t.row_bytes, /*for_write=*/false,
                                Missing::kCreate, read));
  // Rows come slot by slot, not in key order.
  if (!*full) std::sort(changed->begin(), changed->end());
  return absl::OkStatus();
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
  std::vector<float> values(ApplyScratchFloats(t));
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
  size_t max_scratch = 0;
  bool tiered = false;
  absl::flat_hash_map<uint32_t, RowPins> tier_pins;
  for (TableRef& t : TablesOf(job_id)) {
    max_scratch = std::max(max_scratch, ApplyScratchFloats(*t));
    tiered |= t->tier != nullptr;
    job_tables[t->spec.table_id()] = std::move(t);
  }
  std::vector<float> scratch(max_scratch);
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    Slot& slot = slots_[s];
    absl::MutexLock l(&slot.mu);
    auto pending = slot.pending.find(clock);
    if (pending == slot.pending.end()) continue;
    auto& sums = pending->second;
    tier_pins.clear();
    if (tiered) ReadBackPending(slot, sums, job_tables, &tier_pins);
    for (auto it = sums.begin(); it != sums.end();) {
      auto table = job_tables.find(it->first.first);
      if (table == job_tables.end()) {
        ++it;
        continue;
      }
      // A table dropped meanwhile: its sums are erased unapplied (DropJob would erase them);
      // so are those of keys not admitted (the push counted towards admission), and (tables
      // with a disk tier) those of rows that could not be read back or make room (logged).
      // Sums lost so are not silent: the job is refused here from now on (CheckNotLost).
      const RowPins* pins = nullptr;
      if (table->second->tier != nullptr) {
        auto p = tier_pins.find(it->first.first);
        if (p == tier_pins.end()) {
          MarkLost(job_id, s, clock,
                   absl::ResourceExhaustedError(
                       absl::StrCat("table ", it->first.first,
                                    ": its rows could not be read back from the "
                                    "disk tier or make room there (the server's log says why)")));
          sums.erase(it++);
          continue;
        }
        pins = &p->second;
      }
      absl::Status error;
      if (char* row =
              RowFor(slot, *table->second, it->first.second, Missing::kPush, pins, &error)) {
        ApplyToRow(*table->second, it->second.data(), lr_scale, row, scratch.data());
      } else if (!error.ok()) {
        LOG_EVERY_N(ERROR, 1000) << "sync sums of clock " << clock << " not applied: " << error;
        MarkLost(job_id, s, clock, error);
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
      const bool tiered = t->tier != nullptr;
      if ((t->ttl_seconds != 0 || decays || tiered) && !t->dropped.load()) tables.push_back(t);
    }
  }
  uint64_t expired = 0;
  for (const auto& t : tables) {
    if (t->ttl_seconds != 0) expired += Expire(*t, current);
    if (t->ttl_seconds != 0 && t->tier != nullptr) expired += ExpireOnDisk(*t);
    if (t->tier != nullptr) PruneExpiredPins(*t);  // pins of rows no pull or eviction met
    if (t->tier != nullptr && t->metrics != nullptr && t->metrics->disk_bytes != nullptr) {
      t->metrics->disk_bytes->Set(static_cast<double>(t->DiskBytes()));
    }
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
