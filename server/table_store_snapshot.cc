// TableStore's snapshots of a job's rows (checkpoints, replicas). Tiered tables' rows on disk
// are not copied into a checkpoint's snapshot: each slot's copy of its rows in RAM comes with a
// view of the disk tier taken under the same lock (a RocksDB snapshot), and the checkpoint
// writer reads the slot's rows on disk at that view (TierRows), slot by slot, while it writes.
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/shard_map.h"
#include "server/table_store.h"

namespace ps {

// A snapshot's reader of rows on disk: each slot's view of the tier, taken with the slot's
// copy in RAM, and the store's clock then (rows whose TTL had run out are passed by, as a copy
// passes them by). Holds the tables read (their layout) and the views until destroyed.
class TableStore::TierRows : public DiskRowReader {
 public:
  explicit TierRows(const DiskTier* tier) : tier_(tier), slots_(kNumSlots) {}

  // The view of the tier now, for slot `s`, as of the store's clock `now`; taken once per slot
  // (with the slot's lock held), and shared with the previous slot's where nothing was written
  // in between.
  const DiskTier::Snapshot& ViewOf(uint32_t s, uint32_t now) {
    SlotView& slot = slots_[s];
    if (slot.view == nullptr) {
      last_ = tier_->TakeSnapshot(last_);
      slot.view = last_;
      slot.now = now;
    }
    return slot.view;
  }
  void AddTable(TableRef table) {
    const uint32_t id = table->spec.table_id();
    tables_.emplace(id, std::move(table));
  }

  absl::Status Read(const DiskSlotRows& part, RowFn fn) const override {
    auto it = tables_.find(part.table_id);
    if (it == tables_.end() || part.slot >= kNumSlots || slots_[part.slot].view == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("the snapshot holds no rows on disk of table ",
                                                     part.table_id, " in slot ", part.slot));
    }
    const Table& t = *it->second;
    const SlotView& at = slots_[part.slot];
    std::vector<uint64_t> buffer((t.row_bytes + 7) / 8);  // a row, aligned
    char* row = reinterpret_cast<char*>(buffer.data());
    const RowHeader* header = t.Header(row);
    std::vector<float> floats(t.row_floats);
    absl::Status status;
    const absl::Status scanned = tier_->ScanSlotFrom(
        t.tier_prefix, part.slot, 0,
        [&](uint64_t key, absl::string_view stored) {
          if (stored.size() != StoredBytes(t)) {
            status = absl::DataLossError(absl::StrCat("row ", key, " on disk has ", stored.size(),
                                                      " bytes, want ", StoredBytes(t)));
            return false;
          }
          std::memcpy(row + sizeof(uint64_t), stored.data(), stored.size());
          if (t.ttl_seconds != 0 && at.now >= header->used &&
              at.now - header->used > t.ttl_seconds) {
            return true;  // expired by then
          }
          t.ReadValues(row, floats.data());
          std::memcpy(floats.data() + t.dim, t.State(row), t.state_floats * sizeof(float));
          status = fn(key, header->updates, floats.data());
          return status.ok();
        },
        at.view);
    if (status.ok()) status = scanned;
    if (status.ok()) return status;
    return absl::Status(status.code(), absl::StrCat("table ", t.spec.table_id(), " ('",
                                                    t.spec.name(), "'), rows on disk of slot ",
                                                    part.slot, ": ", status.message()));
  }

 private:
  struct SlotView {
    DiskTier::Snapshot view;  // null: the slot has no rows on disk in the snapshot
    uint32_t now = 0;
  };
  const DiskTier* const tier_;
  std::vector<SlotView> slots_;  // kNumSlots
  DiskTier::Snapshot last_;      // the latest view taken
  absl::flat_hash_map<uint32_t, TableRef> tables_;
};

JobSnapshot TableStore::Snapshot(const std::string& job_id) const {
  return SnapshotOf(job_id, shards_.Of(job_id)->OwnedSlots(), /*stream_disk=*/true);
}

JobSnapshot TableStore::SnapshotSlots(const std::string& job_id,
                                      const std::vector<bool>& slots) const {
  return SnapshotOf(job_id, slots, /*stream_disk=*/false);
}

uint64_t TableStore::TierSnapshots() const {
  absl::MutexLock l(&tier_mu_);
  return tier_ == nullptr ? 0 : tier_->NumSnapshots();
}

uint64_t TableStore::TierIntProperty(const std::string& name) const {
  absl::MutexLock l(&tier_mu_);
  return tier_ == nullptr ? 0 : tier_->IntProperty(name);
}

void TableStore::CopyRamRows(const Table& t, uint32_t s, SlotRows* r) const {
  const RowIndex& rows = t.index[s];
  r->keys.reserve(r->keys.size() + rows.size());
  r->updates.reserve(r->updates.size() + rows.size());
  size_t at = r->data.size();
  r->data.resize(at + rows.size() * r->row_floats);  // exact size: no regrowth
  float* out = r->data.data() + at;
  rows.ForEach([&](uint32_t handle) {
    const char* row = t.arena->At(handle);
    const RowHeader* header = t.Header(row);
    r->keys.push_back(header->key);
    r->updates.push_back(header->updates);
    t.ReadValues(row, out);
    std::memcpy(out + t.dim, t.State(row), t.state_floats * sizeof(float));
    out += r->row_floats;
  });
}

JobSnapshot TableStore::SnapshotOf(const std::string& job_id, const std::vector<bool>& slots,
                                   bool stream_disk) const {
  JobSnapshot snap;
  snap.job_id = job_id;
  snap.shard_epoch = shards_.Of(job_id)->epoch;
  snap.slots = slots;
  snap.slots.resize(kNumSlots, false);
  const std::vector<TableRef> tables = TablesOf(job_id);
  for (const TableRef& t : tables) snap.tables.push_back(t->spec);
  if (tables.empty()) return snap;
  std::shared_ptr<TierRows> reader;  // made at the first slot with rows on disk
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    if (!snap.slots[s]) continue;
    Slot& slot = slots_[s];
    absl::MutexLock l(&slot.mu);
    for (const TableRef& tr : tables) {
      const Table& t = *tr;
      const bool on_disk = t.tier != nullptr && t.disk_rows_in_slot[s] != 0;
      if (t.index[s].size() == 0 && !on_disk) continue;
      SlotRows& r = snap.rows.emplace_back();
      r.slot = s;
      r.table_id = t.spec.table_id();
      r.row_floats = static_cast<uint32_t>(t.row_floats);
      CopyRamRows(t, s, &r);
      if (on_disk && stream_disk) {
        // The slot's rows on disk as of now, with the lock held: the view and the copy in
        // RAM are of the same moment.
        if (reader == nullptr) reader = std::make_shared<TierRows>(t.tier);
        reader->ViewOf(s, Now());
        reader->AddTable(tr);
        snap.disk.push_back({s, r.table_id, r.row_floats, t.disk_rows_in_slot[s]});
      } else if (on_disk) {
        // Copied: a scan of the slot's range, under the slot's lock (a consistent copy).
        if (absl::Status st = AppendDiskRows(t, s, &r); !st.ok() && snap.status.ok()) {
          snap.status = st;
        }
      }
      if (r.size() == 0) snap.rows.pop_back();
    }
  }
  for (const SlotRows& r : snap.rows) {
    snap.num_rows += r.size();
    snap.bytes += r.bytes();
  }
  for (const DiskSlotRows& d : snap.disk) {
    snap.num_rows += d.rows;
    snap.bytes += d.rows * d.row_floats * sizeof(float);
  }
  snap.disk_reader = std::move(reader);
  return snap;
}

}  // namespace ps
