#include "server/replication_source.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/shard_map.h"

namespace ps {
namespace {

template <typename T>
void PackInto(const T* data, size_t n, std::string* out) {
  out->resize(n * sizeof(T));
  if (n > 0) std::memcpy(out->data(), data, n * sizeof(T));  // little-endian hosts only
}

}  // namespace

ReplicationSource::ReplicationSource(const TableStore* store, std::string self)
    : store_(store), self_(std::move(self)) {}

absl::StatusOr<v1::ReplicateRequest> ReplicationSource::Prepare(const std::string& job_id,
                                                                const std::vector<bool>& slots,
                                                                int64_t clock) {
  if (slots.size() != kNumSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("slots to replicate: ", slots.size(), " entries, want ", kNumSlots));
  }
  // Copied before numbered: a slot's rows and its number come from the same update as long as
  // the caller keeps its order (see the class comment).
  JobSnapshot snap = store_->SnapshotSlots(job_id, slots);
  if (!snap.status.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot copy the slots to replicate: ", snap.status.message()));
  }
  v1::ReplicateRequest req;
  req.set_job_id(job_id);
  req.set_shard_epoch(snap.shard_epoch);
  req.set_primary(self_);
  std::vector<v1::ReplicatedSlot*> by_slot(kNumSlots, nullptr);
  {
    absl::MutexLock l(&mu_);
    std::vector<uint64_t>& seq = seq_[job_id];
    seq.resize(kNumSlots, 0);
    for (uint32_t s = 0; s < kNumSlots; ++s) {
      if (!slots[s]) continue;
      v1::ReplicatedSlot* out = req.add_slots();
      out->set_slot(s);
      out->set_seq(++seq[s]);
      out->set_clock(clock);
      by_slot[s] = out;
    }
  }
  for (const SlotRows& rows : snap.rows) {
    EncodeReplicatedRows(rows, by_slot[rows.slot]->add_tables());
  }
  return req;
}

void ReplicationSource::ForgetJob(const std::string& job_id) {
  absl::MutexLock l(&mu_);
  seq_.erase(job_id);
}

void EncodeReplicatedRows(const SlotRows& rows, v1::ReplicatedRows* out) {
  out->set_table_id(rows.table_id);
  out->set_row_floats(rows.row_floats);
  PackInto(rows.keys.data(), rows.keys.size(), out->mutable_keys());
  PackInto(rows.updates.data(), rows.updates.size(), out->mutable_updates());
  PackInto(rows.data.data(), rows.data.size(), out->mutable_rows());
}

absl::StatusOr<SlotRows> DecodeReplicatedRows(uint32_t slot, const v1::ReplicatedRows& in) {
  const size_t n = in.keys().size() / sizeof(uint64_t);
  if (in.keys().size() % sizeof(uint64_t) != 0 || in.updates().size() != n * sizeof(int64_t) ||
      in.row_floats() == 0 ||
      in.rows().size() != n * static_cast<size_t>(in.row_floats()) * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replicated rows of table ", in.table_id(), " in slot ", slot, ": ", in.keys().size(),
        " key bytes, ", in.updates().size(), " update bytes and ", in.rows().size(),
        " row bytes do not make whole rows of ", in.row_floats(), " floats"));
  }
  SlotRows rows;
  rows.slot = slot;
  rows.table_id = in.table_id();
  rows.row_floats = in.row_floats();
  rows.keys.resize(n);
  rows.updates.resize(n);
  rows.data.resize(n * rows.row_floats);
  if (n > 0) {
    std::memcpy(rows.keys.data(), in.keys().data(), in.keys().size());
    std::memcpy(rows.updates.data(), in.updates().data(), in.updates().size());
    std::memcpy(rows.data.data(), in.rows().data(), in.rows().size());
  }
  return rows;
}

}  // namespace ps
