// The one check of a table's settings (ValidateTableFeatures): a refusal of each setting, named
// by its field, and what TableSettingsOf keeps.
#include "common/table_features.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "google/protobuf/util/message_differencer.h"

// A namespace of its own: the unity build compiles this file with value_codec_test.cc, whose
// helpers have the same names.
namespace ps::table_features_test {
namespace {

v1::TableSpec Sparse() {
  v1::TableSpec t;
  t.set_kind(v1::SPARSE);
  t.set_dim(4);
  return t;
}

v1::TableSpec Dense() {
  v1::TableSpec t;
  t.set_kind(v1::DENSE);
  t.set_dim(4);
  t.set_num_rows(10);
  return t;
}

// The check refuses `spec` with INVALID_ARGUMENT whose message holds `words`.
void ExpectRefused(const v1::TableSpec& spec, const std::string& words) {
  absl::Status s = ValidateTableFeatures(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << spec.ShortDebugString();
  EXPECT_NE(s.message().find(words), std::string::npos) << s << " (expected \"" << words << "\")";
}

TEST(TableFeaturesTest, AcceptsEverySettingInRange) {
  EXPECT_TRUE(ValidateTableFeatures(Sparse()).ok());
  EXPECT_TRUE(ValidateTableFeatures(Dense()).ok());
  v1::TableSpec t = Sparse();
  t.set_storage(v1::TableSpec::BF16);
  t.mutable_admission()->set_min_count(3);
  t.mutable_admission()->set_probability(0.5f);
  t.mutable_admission()->set_decay_seconds(60);
  t.mutable_admission()->set_sketch_counters(kMinSketchCounters);
  t.mutable_eviction()->set_max_rows(100);
  t.mutable_eviction()->set_ttl_seconds(3600);
  t.mutable_tier()->set_disk(true);
  t.mutable_push_codec()->set_codec(v1::CODEC_FP16);
  t.mutable_pull_codec()->set_codec(v1::CODEC_INT8);
  EXPECT_TRUE(ValidateTableFeatures(t).ok()) << ValidateTableFeatures(t);
}

TEST(TableFeaturesTest, RefusesAnUnknownStorage) {
  v1::TableSpec t = Sparse();
  t.set_storage(static_cast<v1::TableSpec::Storage>(7));
  ExpectRefused(t, "storage = 7 is not FP32, FP16 or BF16");
}

TEST(TableFeaturesTest, RefusesAdmissionOutOfRangeOrOnADenseTable) {
  v1::TableSpec dense = Dense();
  dense.mutable_admission()->set_min_count(2);
  ExpectRefused(dense, "admission is for SPARSE tables");
  v1::TableSpec t = Sparse();
  t.mutable_admission()->set_min_count(256);
  ExpectRefused(t, "admission.min_count = 256 is not in 0..255");
  for (float p : {0.0f, -1.0f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    t = Sparse();
    t.mutable_admission()->set_probability(p);
    ExpectRefused(t, "admission.probability");
  }
  t = Sparse();
  t.mutable_admission()->set_min_count(2);
  t.mutable_admission()->set_sketch_counters(kMinSketchCounters - 1);
  ExpectRefused(t, "admission.sketch_counters = 1023");
  t.mutable_admission()->set_sketch_counters(kMaxSketchCounters + 1);
  ExpectRefused(t, "admission.sketch_counters");
  t = Sparse();
  t.mutable_admission()->set_min_count(1);
  t.mutable_admission()->set_decay_seconds(10);
  ExpectRefused(t, "admission.decay_seconds = 10 needs admission.min_count >= 2");
  t = Sparse();
  t.mutable_admission();  // set, but admits every key as it is
  ExpectRefused(t, "admission admits every key as it is");
}

TEST(TableFeaturesTest, RefusesEvictionOutOfRangeOrOnADenseTable) {
  v1::TableSpec dense = Dense();
  dense.mutable_eviction()->set_max_rows(2);
  ExpectRefused(dense, "eviction is for SPARSE tables");
  v1::TableSpec t = Sparse();
  t.mutable_eviction()->set_max_rows(0);
  ExpectRefused(t, "eviction.max_rows = 0");
  t.mutable_eviction()->set_max_rows((uint64_t{1} << 40) + 1);
  ExpectRefused(t, "is over 2^40");
  for (int64_t ttl : {int64_t{0}, int64_t{-5}}) {
    t = Sparse();
    t.mutable_eviction()->set_ttl_seconds(ttl);
    ExpectRefused(t, "eviction.ttl_seconds = " + std::to_string(ttl) + " must be >= 1");
  }
  t.mutable_eviction()->set_ttl_seconds((int64_t{1} << 31) + 1);
  ExpectRefused(t, "is over 2^31");
  t = Sparse();
  t.mutable_eviction();
  ExpectRefused(t, "eviction needs max_rows and/or ttl_seconds");
}

TEST(TableFeaturesTest, RefusesADiskTierOnADenseTableOrWithoutARowCap) {
  v1::TableSpec dense = Dense();
  dense.mutable_tier()->set_disk(true);
  ExpectRefused(dense, "tier.disk is for SPARSE tables");
  v1::TableSpec t = Sparse();
  t.mutable_tier()->set_disk(true);
  ExpectRefused(t, "tier.disk needs eviction.max_rows");
  t.mutable_eviction()->set_ttl_seconds(60);  // a TTL alone is no RAM cap
  ExpectRefused(t, "tier.disk needs eviction.max_rows");
  t.mutable_eviction()->set_max_rows(10);
  EXPECT_TRUE(ValidateTableFeatures(t).ok());
  t.mutable_tier()->set_disk(false);  // off: nothing to check
  t.clear_eviction();
  EXPECT_TRUE(ValidateTableFeatures(t).ok());
}

TEST(TableFeaturesTest, ChecksInOrderStorageAdmissionEvictionTierCodecs) {
  v1::TableSpec t = Dense();
  t.set_storage(static_cast<v1::TableSpec::Storage>(9));
  t.mutable_admission()->set_min_count(2);
  t.mutable_eviction()->set_max_rows(1);
  t.mutable_tier()->set_disk(true);
  t.mutable_pull_codec()->set_codec(v1::CODEC_SIGN);
  ExpectRefused(t, "storage = 9");
  t.clear_storage();
  ExpectRefused(t, "admission is for SPARSE tables");
  t.clear_admission();
  ExpectRefused(t, "eviction is for SPARSE tables");
  t.clear_eviction();
  ExpectRefused(t, "tier.disk is for SPARSE tables");
  t.clear_tier();
  ExpectRefused(t, "pull_codec = sign");
}

TEST(TableFeaturesTest, SettingsAreEveryFieldButIdentityShapeInitializerAndOptimizer) {
  v1::TableSpec t = Dense();
  t.set_table_id(7);
  t.set_name("w");
  t.set_job_id("j");
  t.mutable_initializer()->set_kind(v1::InitializerSpec::CONSTANT);
  t.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  EXPECT_EQ(TableSettingsOf(t).ByteSizeLong(), 0u) << TableSettingsOf(t).ShortDebugString();
  v1::TableSpec settings;
  settings.set_storage(v1::TableSpec::FP16);
  settings.mutable_eviction()->set_ttl_seconds(5);
  settings.mutable_tier()->set_disk(true);
  settings.mutable_push_codec()->set_codec(v1::CODEC_BF16);
  settings.mutable_pull_codec()->set_delta(true);
  settings.mutable_admission()->set_min_count(2);
  t.MergeFrom(settings);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(TableSettingsOf(t), settings))
      << TableSettingsOf(t).ShortDebugString();
}

v1::CodecSpec Spec(v1::ValueCodec codec, float ratio = 0.0f) {
  v1::CodecSpec s;
  s.set_codec(codec);
  s.set_ratio(ratio);
  return s;
}

v1::TableSpec Table(v1::TableKind kind, v1::CodecSpec push, v1::CodecSpec pull = {}) {
  v1::TableSpec t;
  t.set_kind(kind);
  *t.mutable_push_codec() = push;
  *t.mutable_pull_codec() = pull;
  return t;
}

TEST(TableFeaturesTest, ValidatesTableCodecs) {
  EXPECT_TRUE(ValidateTableFeatures(Table(v1::DENSE, Spec(v1::CODEC_TOPK, 0.01f))).ok());
  EXPECT_TRUE(ValidateTableFeatures(Table(v1::DENSE, Spec(v1::CODEC_SIGN))).ok());
  EXPECT_TRUE(
      ValidateTableFeatures(Table(v1::SPARSE, Spec(v1::CODEC_FP16), Spec(v1::CODEC_BF16))).ok());
  for (float ratio : {0.0f, -0.5f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    absl::Status s = ValidateTableFeatures(Table(v1::DENSE, Spec(v1::CODEC_TOPK, ratio)));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << ratio;
    EXPECT_NE(s.message().find("push_codec.ratio"), std::string::npos) << s;
  }
  EXPECT_FALSE(ValidateTableFeatures(Table(v1::DENSE, Spec(v1::CODEC_FP16, 0.5f))).ok());
  EXPECT_FALSE(ValidateTableFeatures(Table(v1::SPARSE, Spec(v1::CODEC_TOPK, 0.1f))).ok());
  EXPECT_FALSE(ValidateTableFeatures(Table(v1::SPARSE, Spec(v1::CODEC_SIGN))).ok());
  EXPECT_FALSE(ValidateTableFeatures(Table(v1::DENSE, {}, Spec(v1::CODEC_TOPK, 0.1f))).ok());
  EXPECT_FALSE(ValidateTableFeatures(Table(v1::DENSE, {}, Spec(v1::CODEC_SIGN))).ok());
  EXPECT_TRUE(ValidateTableFeatures(Table(v1::DENSE, {}, Spec(v1::CODEC_INT8))).ok());
  EXPECT_TRUE(ValidateTableFeatures(Table(v1::SPARSE, {}, Spec(v1::CODEC_INT8))).ok());
  absl::Status int8_push = ValidateTableFeatures(Table(v1::DENSE, Spec(v1::CODEC_INT8)));
  EXPECT_NE(int8_push.message().find("push_codec = int8: int8 is for values (pull_codec)"),
            std::string::npos)
      << int8_push;
  absl::Status s = ValidateTableFeatures(Table(v1::DENSE, Spec(static_cast<v1::ValueCodec>(17))));
  EXPECT_NE(s.message().find("push_codec.codec = 17"), std::string::npos) << s;
}

TEST(TableFeaturesTest, ValidatesDeltaPulls) {
  v1::CodecSpec delta = Spec(v1::CODEC_INT8);
  delta.set_delta(true);
  EXPECT_TRUE(ValidateTableFeatures(Table(v1::DENSE, {}, delta)).ok());
  absl::Status s = ValidateTableFeatures(Table(v1::SPARSE, {}, delta));
  EXPECT_NE(s.message().find("pull_codec.delta is for DENSE tables"), std::string::npos) << s;
  v1::CodecSpec push = Spec(v1::CODEC_FP16);
  push.set_delta(true);
  s = ValidateTableFeatures(Table(v1::DENSE, push));
  EXPECT_NE(s.message().find("push_codec.delta: delta is for pulls"), std::string::npos) << s;
}

TEST(TableFeaturesTest, ValidatesTopkMomentumAndWarmup) {
  v1::CodecSpec dgc = Spec(v1::CODEC_TOPK, 0.01f);
  dgc.set_momentum(0.9f);
  dgc.set_warmup_steps(100);
  v1::TableSpec sgd = Table(v1::DENSE, dgc);  // OptimizerSpec's default kind: SGD
  EXPECT_TRUE(ValidateTableFeatures(sgd).ok());
  for (float m : {-0.1f, 1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN()}) {
    v1::TableSpec t = sgd;
    t.mutable_push_codec()->set_momentum(m);
    absl::Status s = ValidateTableFeatures(t);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << m;
    EXPECT_NE(s.message().find("push_codec.momentum"), std::string::npos) << s;
  }
  // The momentum is the worker's: a server-side optimizer with its own state is refused.
  v1::TableSpec adam = sgd;
  adam.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  absl::Status s = ValidateTableFeatures(adam);
  EXPECT_NE(s.message().find("optimizer must be SGD, not ADAM"), std::string::npos) << s;
  adam.mutable_push_codec()->set_momentum(0.0f);  // warm-up alone: any optimizer
  EXPECT_TRUE(ValidateTableFeatures(adam).ok());
  // Only topk takes them.
  v1::CodecSpec sign = Spec(v1::CODEC_SIGN);
  sign.set_momentum(0.5f);
  s = ValidateTableFeatures(Table(v1::DENSE, sign));
  EXPECT_NE(s.message().find("push_codec.momentum = 0.5 is for topk, not sign"), std::string::npos)
      << s;
  v1::CodecSpec fp16 = Spec(v1::CODEC_FP16);
  fp16.set_warmup_steps(3);
  s = ValidateTableFeatures(Table(v1::DENSE, {}, fp16));
  EXPECT_NE(s.message().find("pull_codec.warmup_steps = 3 is for topk, not fp16"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace ps::table_features_test
