// TableStore's checks of a request's blocks, before anything is touched: the table and its job,
// the keys (range, owner, no repeats), the values, and what the request may create or answer.
#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/packed_bytes.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "server/internal/slot_groups.h"
#include "server/reject_reason.h"
#include "server/table_store.h"

namespace ps {

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

}  // namespace ps
