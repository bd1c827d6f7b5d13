#include "client/table_spec.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/table_features.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"

namespace ps {
namespace {

v1::InitializerSpec ToProto(const Initializer& init) {
  v1::InitializerSpec p;
  switch (init.kind) {
    case Initializer::Kind::kZeros:
      p.set_kind(v1::InitializerSpec::ZEROS);
      break;
    case Initializer::Kind::kConstant:
      p.set_kind(v1::InitializerSpec::CONSTANT);
      break;
    case Initializer::Kind::kUniform:
      p.set_kind(v1::InitializerSpec::UNIFORM);
      break;
    case Initializer::Kind::kNormal:
      p.set_kind(v1::InitializerSpec::NORMAL);
      break;
  }
  p.set_value(init.value);
  p.set_low(init.low);
  p.set_high(init.high);
  p.set_stddev(init.stddev);
  p.set_seed(init.seed);
  return p;
}

v1::OptimizerSpec ToProto(const Optimizer& opt) {
  v1::OptimizerSpec p;
  switch (opt.kind) {
    case Optimizer::Kind::kSgd:
      p.set_kind(v1::OptimizerSpec::SGD);
      break;
    case Optimizer::Kind::kMomentum:
      p.set_kind(v1::OptimizerSpec::MOMENTUM);
      break;
    case Optimizer::Kind::kAdagrad:
      p.set_kind(v1::OptimizerSpec::ADAGRAD);
      break;
    case Optimizer::Kind::kAdam:
      p.set_kind(v1::OptimizerSpec::ADAM);
      break;
    case Optimizer::Kind::kFtrl:
      p.set_kind(v1::OptimizerSpec::FTRL);
      break;
  }
  if (opt.learning_rate) p.set_learning_rate(*opt.learning_rate);
  if (opt.momentum) p.set_momentum(*opt.momentum);
  if (opt.beta1) p.set_beta1(*opt.beta1);
  if (opt.beta2) p.set_beta2(*opt.beta2);
  if (opt.epsilon) p.set_epsilon(*opt.epsilon);
  if (opt.initial_accumulator) p.set_initial_accumulator(*opt.initial_accumulator);
  if (opt.l1) p.set_l1(*opt.l1);
  if (opt.l2) p.set_l2(*opt.l2);
  if (opt.ftrl_beta) p.set_ftrl_beta(*opt.ftrl_beta);
  if (opt.weight_decay) p.set_weight_decay(*opt.weight_decay);
  return p;
}

void SetCodec(const WireCodec& c, v1::CodecSpec* spec) {
  static constexpr v1::ValueCodec kCodecs[] = {v1::CODEC_NONE, v1::CODEC_FP16, v1::CODEC_BF16,
                                               v1::CODEC_TOPK, v1::CODEC_SIGN, v1::CODEC_INT8};
  spec->set_codec(kCodecs[static_cast<int>(c.codec)]);
  spec->set_ratio(c.ratio);
  spec->set_momentum(c.momentum);
  spec->set_warmup_steps(c.warmup_steps);
  spec->set_delta(c.delta);
}

// The config's storage, admission, eviction and codecs into the spec; a zero field stays unset
// (off).
void SetTableFeatures(const TableConfig& config, v1::TableSpec& spec) {
  auto set = [](const WireCodec& c) {
    return c.codec != Codec::kNone || c.ratio != 0 || c.momentum != 0 || c.warmup_steps != 0 ||
           c.delta;
  };
  if (set(config.push_codec)) SetCodec(config.push_codec, spec.mutable_push_codec());
  if (set(config.pull_codec)) SetCodec(config.pull_codec, spec.mutable_pull_codec());
  switch (config.storage) {
    case Storage::kFp32:
      spec.set_storage(v1::TableSpec::FP32);
      break;
    case Storage::kFp16:
      spec.set_storage(v1::TableSpec::FP16);
      break;
    case Storage::kBf16:
      spec.set_storage(v1::TableSpec::BF16);
      break;
  }
  const Admission& a = config.admission;
  if (a.min_count != 0) spec.mutable_admission()->set_min_count(a.min_count);
  if (a.probability != 0) spec.mutable_admission()->set_probability(a.probability);
  if (a.decay_seconds != 0) spec.mutable_admission()->set_decay_seconds(a.decay_seconds);
  const Eviction& e = config.eviction;
  if (e.max_rows != 0) spec.mutable_eviction()->set_max_rows(e.max_rows);
  if (e.ttl_seconds != 0) spec.mutable_eviction()->set_ttl_seconds(e.ttl_seconds);
  if (config.disk_tier) spec.mutable_tier()->set_disk(true);
}

// The text format parser's first error, with its place.
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (error_.empty()) {
      error_ = absl::StrCat("line ", line + 1, " column ", column + 1, ": ", message);
    }
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

// TableConfig::spec: text format, or JSON where it starts with '{' (text format never does).
absl::StatusOr<v1::TableSpec> ParseSpec(const std::string& text) {
  v1::TableSpec parsed;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return parsed;
  if (text[first] == '{') {
    const auto s = google::protobuf::util::JsonStringToMessage(text, &parsed);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec (JSON of TableSpec fields): ",
                       std::string(s.message().data(), s.message().size())));
    }
    return parsed;
  }
  google::protobuf::TextFormat::Parser parser;
  FirstError errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &parsed)) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec (TableSpec fields in text format), ", errors.error()));
  }
  return parsed;
}

// INVALID_ARGUMENT naming the first field of `parsed` that is not a setting.
absl::Status CheckOnlySettings(const v1::TableSpec& parsed) {
  const v1::TableSpec settings = TableSettingsOf(parsed);
  std::vector<const google::protobuf::FieldDescriptor*> all, kept;
  parsed.GetReflection()->ListFields(parsed, &all);
  settings.GetReflection()->ListFields(settings, &kept);
  for (const google::protobuf::FieldDescriptor* field : all) {
    if (std::find(kept.begin(), kept.end(), field) != kept.end()) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("spec sets ", field->name(),
                     ", which is not a table setting: set the table's name, kind, dim, rows, id, "
                     "initializer and optimizer in their own fields"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::TableSpec> TableSpecOf(const TableConfig& config, const std::string& job_id) {
  v1::TableSpec spec;
  spec.set_table_id(config.id != 0 ? config.id : TableIdFor(job_id, config.name));
  spec.set_name(config.name);
  spec.set_job_id(job_id);
  spec.set_kind(config.kind == TableKind::kDense ? v1::DENSE : v1::SPARSE);
  spec.set_dim(config.dim);
  spec.set_num_rows(config.num_rows);
  *spec.mutable_initializer() = ToProto(config.initializer);
  *spec.mutable_optimizer() = ToProto(config.optimizer);
  SetTableFeatures(config, spec);
  PS_ASSIGN_OR_RETURN(const v1::TableSpec parsed, ParseSpec(config.spec));
  PS_RETURN_IF_ERROR(CheckOnlySettings(parsed));
  spec.MergeFrom(parsed);
  return spec;
}

absl::Status CheckDeclaredSettings(const TableConfig& config, const v1::TableSpec& declared) {
  PS_ASSIGN_OR_RETURN(const v1::TableSpec spec, TableSpecOf(config, declared.job_id()));
  const v1::TableSpec wanted = TableSettingsOf(spec);
  if (wanted.ByteSizeLong() == 0) return absl::OkStatus();
  google::protobuf::util::MessageDifferencer same;
  // An unset message is the same as an empty one (a job file's `tier {}` is no tier).
  same.set_message_field_comparison(google::protobuf::util::MessageDifferencer::EQUIVALENT);
  if (same.Compare(wanted, TableSettingsOf(declared))) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the settings of a program job's table (storage, admission, eviction, tier, codecs) "
      "are the job file's (set them in its tables { ... }); the program asks for others: ",
      wanted.ShortDebugString()));
}

}  // namespace ps
