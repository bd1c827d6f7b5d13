#include "common/table_features.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/value_codec.h"

namespace ps {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::Status CheckAdmission(const v1::AdmissionSpec& a) {
  if (a.min_count() > kMaxAdmissionCount) {
    return Invalid(absl::StrCat("admission.min_count = ", a.min_count(), " is not in 0..",
                                kMaxAdmissionCount, " (the sketch counts to 255)"));
  }
  if (a.has_probability() && !(a.probability() > 0.0f && a.probability() <= 1.0f)) {
    return Invalid(absl::StrCat("admission.probability = ", a.probability(),
                                " is not in (0, 1] (leave it out to admit on the count alone)"));
  }
  if (a.sketch_counters() != 0 &&
      (a.sketch_counters() < kMinSketchCounters || a.sketch_counters() > kMaxSketchCounters)) {
    return Invalid(absl::StrCat("admission.sketch_counters = ", a.sketch_counters(), " is not in ",
                                kMinSketchCounters, "..", kMaxSketchCounters, " (0: the default, ",
                                kDefaultSketchCounters, ")"));
  }
  if (a.decay_seconds() != 0 && a.min_count() <= 1) {
    return Invalid(absl::StrCat("admission.decay_seconds = ", a.decay_seconds(),
                                " needs admission.min_count >= 2 (nothing is counted otherwise)"));
  }
  if (a.min_count() <= 1 && !a.has_probability()) {
    return Invalid(
        "admission admits every key as it is: set min_count >= 2 and/or probability < 1, or "
        "leave admission out");
  }
  return absl::OkStatus();
}

absl::Status CheckEviction(const v1::EvictionSpec& e) {
  if (e.has_max_rows() && e.max_rows() == 0) {
    return Invalid(
        "eviction.max_rows = 0: a table must be allowed at least one row per server (leave "
        "max_rows out for no cap)");
  }
  if (e.has_max_rows() && e.max_rows() > (uint64_t{1} << 40)) {
    return Invalid(absl::StrCat("eviction.max_rows = ", e.max_rows(), " is over 2^40"));
  }
  if (e.has_ttl_seconds() && e.ttl_seconds() <= 0) {
    return Invalid(absl::StrCat("eviction.ttl_seconds = ", e.ttl_seconds(),
                                " must be >= 1 (leave it out for rows that never expire)"));
  }
  if (e.has_ttl_seconds() && e.ttl_seconds() > (int64_t{1} << 31)) {
    return Invalid(absl::StrCat("eviction.ttl_seconds = ", e.ttl_seconds(), " is over 2^31"));
  }
  if (!e.has_max_rows() && !e.has_ttl_seconds()) {
    return Invalid("eviction needs max_rows and/or ttl_seconds (or leave eviction out)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTableFeatures(const v1::TableSpec& spec) {
  if (!v1::TableSpec::Storage_IsValid(spec.storage())) {
    return Invalid(
        absl::StrCat("storage = ", static_cast<int>(spec.storage()), " is not FP32, FP16 or BF16"));
  }
  const bool sparse = spec.kind() == v1::SPARSE;
  if (spec.has_admission()) {
    if (!sparse) return Invalid("admission is for SPARSE tables (a dense table has all its rows)");
    if (absl::Status s = CheckAdmission(spec.admission()); !s.ok()) return s;
  }
  if (spec.has_eviction()) {
    if (!sparse) return Invalid("eviction is for SPARSE tables (a dense table has all its rows)");
    if (absl::Status s = CheckEviction(spec.eviction()); !s.ok()) return s;
  }
  if (spec.has_tier() && spec.tier().disk()) {
    if (!sparse) {
      return Invalid("tier.disk is for SPARSE tables (a dense table's rows all stay in RAM)");
    }
    if (!spec.has_eviction() || !spec.eviction().has_max_rows()) {
      return Invalid(
          "tier.disk needs eviction.max_rows (>= 1): the rows a server keeps in RAM; the rest go "
          "to its disk tier");
    }
  }
  return ValidateTableCodecs(spec);
}

}  // namespace ps
