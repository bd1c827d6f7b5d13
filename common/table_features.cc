#include "common/table_features.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "common/value_codec.h"

namespace ps {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::Status CheckStorage(v1::TableSpec::Storage storage) {
  if (v1::TableSpec::Storage_IsValid(storage)) return absl::OkStatus();
  return Invalid(
      absl::StrCat("storage = ", static_cast<int>(storage), " is not FP32, FP16 or BF16"));
}

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

absl::Status CheckCodec(const v1::CodecSpec& c, absl::string_view field, bool pull, bool dense) {
  if (!v1::ValueCodec_IsValid(c.codec())) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".codec = ", static_cast<int>(c.codec()),
                     " is not a known codec (none, fp16, bf16, topk, sign, int8)"));
  }
  const std::string name = CodecName(c.codec());
  if (c.codec() == v1::CODEC_TOPK) {
    if (!(c.ratio() > 0.0f && c.ratio() <= 1.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".ratio = ", c.ratio(),
                       " is not in (0, 1] (the fraction of a block's values sent)"));
    }
    if (!(c.momentum() >= 0.0f && c.momentum() < 1.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".momentum = ", c.momentum(),
                       " is not in [0, 1) (the worker's momentum correction; 0: off)"));
    }
  } else if (c.ratio() != 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".ratio = ", c.ratio(), " is for topk, not ", name));
  } else if (c.momentum() != 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".momentum = ", c.momentum(), " is for topk, not ", name));
  } else if (c.warmup_steps() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".warmup_steps = ", c.warmup_steps(), " is for topk, not ", name));
  }
  if (KeepsResidual(c.codec()) && pull) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = ", name,
                     ": topk and sign are for gradients (push_codec); pulls take "
                     "fp16, bf16 or int8"));
  }
  if (c.codec() == v1::CODEC_INT8 && !pull) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " = int8: int8 is for values (pull_codec); pushes take fp16, bf16, topk or sign"));
  }
  if (c.delta() && !pull) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".delta: delta is for pulls (pull_codec), not pushes"));
  }
  if (c.delta() && !dense) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".delta is for DENSE tables (a client keeps a copy of the rows it pulls)"));
  }
  if (KeepsResidual(c.codec()) && !dense) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = ", name,
                     " is for DENSE tables (a sparse table's pushes are its touched "
                     "rows already; use fp16 or bf16)"));
  }
  return absl::OkStatus();
}

absl::Status CheckCodecs(const v1::TableSpec& spec) {
  const bool dense = spec.kind() == v1::DENSE;
  if (absl::Status s = CheckCodec(spec.push_codec(), "push_codec", false, dense); !s.ok()) return s;
  if (absl::Status s = CheckCodec(spec.pull_codec(), "pull_codec", true, dense); !s.ok()) return s;
  if (spec.push_codec().momentum() != 0.0f && spec.optimizer().kind() != v1::OptimizerSpec::SGD) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push_codec.momentum = ", spec.push_codec().momentum(),
        " applies the momentum on the workers: the table's optimizer must be SGD, not ",
        v1::OptimizerSpec::Kind_Name(spec.optimizer().kind())));
  }
  return absl::OkStatus();
}

absl::Status CheckTier(const v1::TableSpec& spec) {
  if (!spec.tier().disk()) return absl::OkStatus();
  if (spec.kind() != v1::SPARSE) {
    return Invalid("tier.disk is for SPARSE tables (a dense table's rows all stay in RAM)");
  }
  if (!spec.eviction().has_max_rows()) {
    return Invalid(
        "tier.disk needs eviction.max_rows (>= 1): the rows a server keeps in RAM; the rest go "
        "to its disk tier");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTableFeatures(const v1::TableSpec& spec) {
  PS_RETURN_IF_ERROR(CheckStorage(spec.storage()));
  const bool sparse = spec.kind() == v1::SPARSE;
  if (spec.has_admission()) {
    if (!sparse) return Invalid("admission is for SPARSE tables (a dense table has all its rows)");
    PS_RETURN_IF_ERROR(CheckAdmission(spec.admission()));
  }
  if (spec.has_eviction()) {
    if (!sparse) return Invalid("eviction is for SPARSE tables (a dense table has all its rows)");
    PS_RETURN_IF_ERROR(CheckEviction(spec.eviction()));
  }
  PS_RETURN_IF_ERROR(CheckTier(spec));
  return CheckCodecs(spec);
}

v1::TableSpec TableSettingsOf(const v1::TableSpec& spec) {
  v1::TableSpec settings = spec;
  settings.clear_table_id();
  settings.clear_name();
  settings.clear_job_id();
  settings.clear_kind();
  settings.clear_dim();
  settings.clear_num_rows();
  settings.clear_initializer();
  settings.clear_optimizer();
  return settings;
}

}  // namespace ps
