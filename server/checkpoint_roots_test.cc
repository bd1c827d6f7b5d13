#include "server/checkpoint_roots.h"

#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

class CheckpointRootsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / absl::StrCat("checkpoint_roots_test_", getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "root" / "job");
    fs::create_directories(dir_ / "outside");
    auto roots = CheckpointRoots::Create({(dir_ / "root").string(), (dir_ / "later").string()});
    ASSERT_TRUE(roots.ok()) << roots.status();
    roots_ = *roots;
  }
  void TearDown() override { fs::remove_all(dir_); }

  absl::Status Check(const std::string& path) { return roots_.Check(path, "checkpoint path"); }

  fs::path dir_;
  CheckpointRoots roots_;
};

TEST_F(CheckpointRootsTest, PathsUnderARootPass) {
  EXPECT_TRUE(Check((dir_ / "root" / "job" / "ckpt-1" / "s0").string()).ok());
  EXPECT_TRUE(Check((dir_ / "root" / "new" / "deep" / "s0").string()).ok());
  EXPECT_TRUE(Check((dir_ / "root" / "job" / ".." / "other" / "s0").string()).ok());
  EXPECT_TRUE(Check((dir_ / "later" / "s0").string()).ok());  // a root that does not exist yet
}

TEST_F(CheckpointRootsTest, PathsOutsideEveryRootAreRefusedNamingPathAndRoots) {
  fs::create_symlink(dir_ / "outside", dir_ / "root" / "escape");
  fs::create_symlink(dir_ / "nowhere", dir_ / "root" / "dangling");
  const std::string cases[] = {
      "../../x",
      "relative/s0",
      "",
      (dir_ / "outside" / "s0").string(),
      (dir_ / "root" / ".." / "outside" / "s0").string(),
      (dir_ / "root" / "job" / ".." / ".." / "x").string(),
      (dir_ / "root").string(),                      // the root itself
      (dir_ / "rootx" / "s0").string(),              // a sibling sharing the prefix
      (dir_ / "root" / "escape" / "s0").string(),    // a symlink leading out
      (dir_ / "root" / "dangling" / "s0").string(),  // a dangling symlink
      (dir_ / "root" / "a\nb").string(),
      "/etc/x",
  };
  for (const std::string& path : cases) {
    SCOPED_TRACE(path);
    const absl::Status s = Check(path);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("checkpoint path"), std::string::npos) << s;
    EXPECT_NE(s.message().find((dir_ / "root").string()), std::string::npos) << s;
  }
}

TEST_F(CheckpointRootsTest, NoRootsRefuseEverythingAndSayWhichFlagToSet) {
  const absl::Status s = CheckpointRoots().Check((dir_ / "root" / "s0").string(), "path");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--checkpoint_roots"), std::string::npos) << s;
}

TEST_F(CheckpointRootsTest, RootsMustBeAbsoluteAndNotSlash) {
  EXPECT_FALSE(CheckpointRoots::Create({"relative"}).ok());
  EXPECT_FALSE(CheckpointRoots::Create({""}).ok());
  EXPECT_FALSE(CheckpointRoots::Create({"/"}).ok());
  EXPECT_FALSE(CheckpointRoots::Create({"/tmp/.."}).ok());
  EXPECT_TRUE(CheckpointRoots::Create({}).ok());
}

}  // namespace
}  // namespace ps
