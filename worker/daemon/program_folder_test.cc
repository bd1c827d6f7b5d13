// A program run's folders as the daemon makes them: modes and owners, a socket path that would
// not fit, and (as root) a later run under another uid, which finds nothing of the earlier one's
// and whose daemon does not follow a link the earlier one planted.
#include "worker/daemon/program_folder.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

class ProgramFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / absl::StrCat("program_folder_test_", getpid());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  // "uid gid mode" of `path` (not following a link).
  static std::string Owner(const fs::path& path) {
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) return "missing";
    return absl::StrCat(st.st_uid, " ", st.st_gid, " ", absl::StrCat(st.st_mode & 07777));
  }
  fs::path root_;
};

TEST_F(ProgramFolderTest, WithoutAUserTheFolderIsTheDaemonsOnly) {
  const fs::path dir = root_ / "job-1" / "worker-0";
  auto f = MakeProgramFolder(dir.string(), std::nullopt);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->home, dir.string());
  EXPECT_EQ(f->socket, (dir / "agent.sock").string());
  EXPECT_EQ(Owner(dir), absl::StrCat(geteuid(), " ", getegid(), " ", 0700));
}

TEST_F(ProgramFolderTest, ASocketPathThatDoesNotFitIsRefused) {
  const std::string dir = (root_ / std::string(120, 'x')).string();
  auto f = MakeProgramFolder(dir, std::nullopt);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(f.status().message().find("too long for a Unix socket path"), std::string::npos);
}

TEST_F(ProgramFolderTest, ALaterRunUnderAnotherUidFindsNothingOfTheEarliers) {
  if (geteuid() != 0) GTEST_SKIP() << "not root: cannot give folders to other uids";
  const fs::path dir = root_ / "job-1" / "worker-0";
  auto f = MakeProgramFolder(dir.string(), ProgramUser{60201, 60201});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->home, (dir / "home").string());
  EXPECT_EQ(Owner(dir), absl::StrCat("0 60201 ", 0710));
  EXPECT_EQ(Owner(dir / "home"), absl::StrCat("60201 60201 ", 0700));
  EXPECT_EQ(Owner(dir.parent_path()), absl::StrCat("0 0 ", 0711));
  std::ofstream(dir / "home" / "model.bin") << "the earlier run's";
  // The same uid again (a restart of the same run): its files stay.
  ASSERT_TRUE(MakeProgramFolder(dir.string(), ProgramUser{60201, 60201}).ok());
  EXPECT_TRUE(fs::exists(dir / "home" / "model.bin"));
  // Another uid: a fresh home.
  f = MakeProgramFolder(dir.string(), ProgramUser{60202, 60202});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_FALSE(fs::exists(dir / "home" / "model.bin"));
  EXPECT_EQ(Owner(dir), absl::StrCat("0 60202 ", 0710));
  EXPECT_EQ(Owner(dir / "home"), absl::StrCat("60202 60202 ", 0700));
  // A home the earlier program replaced with a link to a folder of the daemon's: the link goes,
  // the folder it named is neither emptied nor given away.
  const fs::path precious = root_ / "precious";
  fs::create_directories(precious);
  std::ofstream(precious / "keep") << "the daemon's";
  fs::remove_all(dir / "home");
  fs::create_directory_symlink(precious, dir / "home");
  f = MakeProgramFolder(dir.string(), ProgramUser{60203, 60203});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_FALSE(fs::is_symlink(dir / "home"));
  EXPECT_EQ(Owner(dir / "home"), absl::StrCat("60203 60203 ", 0700));
  EXPECT_TRUE(fs::exists(precious / "keep"));
  EXPECT_EQ(Owner(precious).substr(0, 4), "0 0 ");
}

}  // namespace
}  // namespace ps
