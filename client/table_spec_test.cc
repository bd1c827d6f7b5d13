// TableSpecOf and CheckDeclaredSettings: a TableConfig's typed fields and its spec string reach
// the same TableSpec, and what the spec may not set is refused naming the field.
#include "client/table_spec.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

// A namespace of its own: the unity build compiles test files together.
namespace ps::table_spec_test {
namespace {

using ::testing::HasSubstr;

TableConfig Sparse(const std::string& name) {
  TableConfig c;
  c.name = name;
  c.kind = TableKind::kSparse;
  c.dim = 4;
  return c;
}

v1::TableSpec Parse(const std::string& text) {
  v1::TableSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &spec)) << text;
  return spec;
}

void ExpectSameSpec(const v1::TableSpec& a, const v1::TableSpec& b) {
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(a, b))
      << a.ShortDebugString() << "\nvs\n"
      << b.ShortDebugString();
}

TEST(TableSpecTest, TypedFieldsMapToTheirTableSpecFields) {
  TableConfig c = Sparse("emb");
  c.optimizer = Optimizer::Adagrad(0.05f);
  c.storage = Storage::kBf16;
  c.admission.min_count = 2;
  c.eviction.max_rows = 100;
  c.disk_tier = true;
  c.push_codec.codec = Codec::kFp16;
  c.pull_codec.codec = Codec::kInt8;
  auto spec = TableSpecOf(c, "job");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ExpectSameSpec(*spec,
                 Parse(absl::StrCat("table_id: ", TableIdFor("job", "emb"),
                                    " name: 'emb' job_id: 'job' kind: SPARSE dim: 4 initializer {} "
                                    "optimizer { kind: ADAGRAD learning_rate: 0.05 } storage: BF16 "
                                    "admission { min_count: 2 } eviction { max_rows: 100 } "
                                    "tier { disk: true } push_codec { codec: CODEC_FP16 } "
                                    "pull_codec { codec: CODEC_INT8 }")));
  c.id = 77;
  EXPECT_EQ(TableSpecOf(c, "job")->table_id(), 77u);
}

TEST(TableSpecTest, TheSpecStringReachesEverySettingAsTheTypedFieldsDo) {
  TableConfig typed = Sparse("emb");
  typed.storage = Storage::kFp16;
  typed.eviction.max_rows = 100;
  typed.eviction.ttl_seconds = 60;
  typed.disk_tier = true;
  typed.pull_codec.codec = Codec::kBf16;
  auto want = TableSpecOf(typed, "job");
  ASSERT_TRUE(want.ok()) << want.status();
  for (const char* text :
       {"storage: FP16 eviction { max_rows: 100 ttl_seconds: 60 } tier { disk: true } "
        "pull_codec { codec: CODEC_BF16 }",
        R"({"storage": "FP16", "eviction": {"max_rows": 100, "ttlSeconds": "60"},
            "tier": {"disk": true}, "pull_codec": {"codec": "CODEC_BF16"}})",
        "  \n{\"storage\": 1, \"eviction\": {\"maxRows\": 100, \"ttl_seconds\": 60}, "
        "\"tier\": {\"disk\": true}, \"pullCodec\": {\"codec\": 2}}"}) {
    TableConfig c = Sparse("emb");
    c.spec = text;
    auto spec = TableSpecOf(c, "job");
    ASSERT_TRUE(spec.ok()) << spec.status() << " for " << text;
    ExpectSameSpec(*spec, *want);
  }
}

TEST(TableSpecTest, TheSpecIsMergedOverTheTypedFields) {
  TableConfig c = Sparse("emb");
  c.eviction.max_rows = 10;
  c.spec = "eviction { ttl_seconds: 60 } tier { disk: true }";
  auto spec = TableSpecOf(c, "job");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->eviction().max_rows(), 10u);
  EXPECT_EQ(spec->eviction().ttl_seconds(), 60);
  EXPECT_TRUE(spec->tier().disk());
  c.spec = " \n\t";  // blank: none
  spec = TableSpecOf(c, "job");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->has_tier());
}

TEST(TableSpecTest, ASpecThatDoesNotParseIsRefusedNamingTheField) {
  struct Case {
    const char* spec;
    const char* words;
  };
  for (const Case& k : {Case{"evction { max_rows: 1 }", "no field named \"evction\""},
                        Case{"storage: FP8", "\"FP8\""}, Case{"tier { disk: maybe }", "disk"},
                        Case{"tier {", "line 1"}, Case{R"({"evction": {}})", "evction"},
                        Case{R"({"eviction": {"max_rows": -3}})", "eviction.max_rows"},
                        Case{R"({"storage": "FP8"})", "FP8"}, Case{"{", "JSON"}}) {
    TableConfig c = Sparse("emb");
    c.spec = k.spec;
    absl::Status s = TableSpecOf(c, "job").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k.spec;
    EXPECT_THAT(s.message(), HasSubstr(k.words)) << k.spec;
    EXPECT_THAT(s.message(), HasSubstr("spec")) << k.spec;
  }
}

TEST(TableSpecTest, TheSpecSetsSettingsOnlyNotIdentityShapeInitializerOrOptimizer) {
  for (const char* field :
       {"table_id: 5", "name: 'x'", "job_id: 'other'", "kind: DENSE", "dim: 8", "num_rows: 3",
        "initializer { kind: CONSTANT value: 1 }", "optimizer { kind: ADAM }"}) {
    TableConfig c = Sparse("emb");
    c.spec = absl::StrCat("tier { disk: true } ", field);
    absl::Status s = TableSpecOf(c, "job").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    const std::string name(field, std::string(field).find_first_of(" :"));
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("spec sets ", name, ","))) << s;
  }
  TableConfig c = Sparse("emb");
  c.spec = R"({"dim": 8})";
  EXPECT_THAT(TableSpecOf(c, "job").status().message(), HasSubstr("spec sets dim"));
}

TEST(TableSpecTest, AProgramJobsTableTakesNoSettingsOrExactlyTheDeclaredOnes) {
  v1::TableSpec declared = Parse(
      "table_id: 3 name: 'emb' job_id: 'job' kind: SPARSE dim: 4 optimizer { kind: ADAM } "
      "eviction { max_rows: 100 } tier { disk: true } storage: FP16");
  TableConfig c = Sparse("emb");
  EXPECT_TRUE(CheckDeclaredSettings(c, declared).ok());  // none asked: the job file's apply
  c.eviction.max_rows = 100;
  c.disk_tier = true;
  c.storage = Storage::kFp16;
  EXPECT_TRUE(CheckDeclaredSettings(c, declared).ok()) << CheckDeclaredSettings(c, declared);
  TableConfig by_spec = Sparse("emb");
  by_spec.spec = "storage: FP16 eviction { max_rows: 100 } tier { disk: true }";
  EXPECT_TRUE(CheckDeclaredSettings(by_spec, declared).ok());
  by_spec.spec = "storage: FP16 eviction { max_rows: 100 }";  // no tier: another table
  absl::Status s = CheckDeclaredSettings(by_spec, declared);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("are the job file's"));
  c.disk_tier = false;
  EXPECT_FALSE(CheckDeclaredSettings(c, declared).ok());
  // An empty message in the job file is no setting.
  declared.clear_tier();
  declared.mutable_admission();
  EXPECT_TRUE(CheckDeclaredSettings(c, declared).ok()) << CheckDeclaredSettings(c, declared);
  c.spec = "dim: 4";
  EXPECT_THAT(CheckDeclaredSettings(c, declared).message(), HasSubstr("spec sets dim"));
}

}  // namespace
}  // namespace ps::table_spec_test
