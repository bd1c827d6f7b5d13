// ParameterServerOptions of the disk tier (ps_server --tier_block_cache_mb,
// --tier_write_buffer_mb): they reach the tier's RocksDB, as its options file and properties say.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/testing/service_fixture.h"

namespace ps::parameter_server_tier_test {
namespace {

namespace fs = std::filesystem;

class ParameterServerTierTest : public testing::ServiceFixture {
 protected:
  void TearDown() override {
    ServiceFixture::TearDown();  // the server (and its tier) first
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const std::string dir_ = absl::StrCat(::testing::TempDir(), "/ps_tier_test_", getpid());
};

// The text of the latest RocksDB OPTIONS file in `db` ("" if none).
std::string OptionsFile(const std::string& db) {
  std::string latest;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(db, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("OPTIONS-", 0) == 0 && name > fs::path(latest).filename().string()) {
      latest = entry.path().string();
    }
  }
  if (latest.empty()) return "";
  std::ifstream in(latest);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_F(ParameterServerTierTest, TheTiersBlockCacheAndWriteBuffersAreTheOptionsGiven) {
  ParameterServerOptions options;
  options.tier_dir = dir_ + "/tier";
  options.tier_min_free_bytes = 0;
  options.tier_block_cache_bytes = uint64_t{5} << 20;
  options.tier_write_buffer_bytes = uint64_t{3} << 20;
  ASSERT_NO_FATAL_FAILURE(StartServer(options));
  v1::TableSpec spec;
  spec.set_table_id(1);
  spec.set_name("emb");
  spec.set_job_id("job");
  spec.set_kind(v1::SPARSE);
  spec.set_dim(4);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  spec.mutable_eviction()->set_max_rows(10);
  spec.mutable_tier()->set_disk(true);
  const grpc::Status created = CreateTable(spec);  // opens the tier
  ASSERT_TRUE(created.ok()) << created.error_message();
  const std::string text = OptionsFile(options.tier_dir);
  EXPECT_NE(text.find("write_buffer_size=3145728"), std::string::npos) << text;
  EXPECT_EQ(server_->store()->TierIntProperty("rocksdb.block-cache-capacity"), uint64_t{5} << 20);
}

}  // namespace
}  // namespace ps::parameter_server_tier_test
