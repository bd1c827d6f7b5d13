// Programs under users of their own: the uid range, and (as root only) a real program started
// under a uid of it, which cannot read a file of the daemon's and cannot gain privileges.
#include "worker/daemon/program_users.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "worker/daemon/program_process.h"

namespace ps {
namespace {

// Live processes (not zombies) whose real uid is `uid`, from /proc.
int ProcessesOf(uid_t uid) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::ifstream status(entry.path() / "status");
    std::string line;
    bool zombie = false, ours = false;
    while (std::getline(status, line)) {
      if (line.rfind("State:", 0) == 0) zombie = line.find('Z') != std::string::npos;
      if (line.rfind("Uid:", 0) == 0) ours = std::stoul(line.substr(4)) == uid;
    }
    if (ours && !zombie) ++n;
  }
  return n;
}

TEST(ProgramUsersTest, ParsesARangeOfUids) {
  auto r = ParseUidRange("60000-60999");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->first, 60000u);
  EXPECT_EQ(r->last, 60999u);
  r = ParseUidRange("61000");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->first, 61000u);
  EXPECT_EQ(r->last, 61000u);
  for (const char* bad :
       {"", "x", "60999-60000", "0-10", "60000-", "-5", "1-2000000", "60000-60999-61000"}) {
    EXPECT_EQ(ParseUidRange(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  const uid_t own = getuid();
  if (own != 0) {
    EXPECT_FALSE(ParseUidRange(absl::StrCat(own, "-", own + 1)).ok());
  }
}

TEST(ProgramUsersTest, HandsOutTheRangeInTurn) {
  ProgramUsers users(UidRange{60000, 60002});
  for (uid_t want : {60000u, 60001u, 60002u, 60000u}) {
    const ProgramUser u = users.Next();
    EXPECT_EQ(u.uid, want);
    EXPECT_EQ(u.gid, static_cast<gid_t>(want));
  }
}

TEST(ProgramUsersTest, AProgramRunsAsItsUserWithoutPrivileges) {
  if (!CanSwitchUsers().ok()) GTEST_SKIP() << "not root: " << CanSwitchUsers();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("program_users_test_", getpid());
  std::filesystem::create_directories(dir);
  chmod(dir.c_str(), 0755);
  const std::string secret = (dir / "daemon.token").string();
  std::ofstream(secret) << "the daemon's token\n";
  chmod(secret.c_str(), 0600);
  ProgramProcessOptions o;
  o.argv = {"/bin/sh", "-c",
            absl::StrCat("id -u; id -g; id -G; cat ", secret,
                         " && echo READ; grep NoNewPrivs /proc/self/status; sleep 30 & exit 0")};
  o.working_dir = "/";
  o.log_path = (dir / "program.log").string();
  o.user = ProgramUser{60123, 60123};
  auto p = ProgramProcess::Start(o);
  ASSERT_TRUE(p.ok()) << p.status();
  std::optional<int> status;
  for (int i = 0; i < 1000 && !(status = (*p)->Poll()).has_value(); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(status.has_value());
  const std::vector<std::string> lines = (*p)->Tail(10);
  std::string all;
  for (const std::string& l : lines) absl::StrAppend(&all, l, "\n");
  EXPECT_NE(all.find("60123\n60123\n60123\n"), std::string::npos) << all;  // no other group
  EXPECT_EQ(all.find("READ"), std::string::npos) << all;
  EXPECT_NE(all.find("Permission denied"), std::string::npos) << all;
  EXPECT_NE(all.find("NoNewPrivs:\t1"), std::string::npos) << all;
  // Its `sleep` left behind, outside the program's life: gone with the run's user.
  EXPECT_GE(ProcessesOf(60123), 1);
  KillAllProcessesOf(ProgramUser{60123, 60123});
  for (int i = 0; i < 500 && ProcessesOf(60123) > 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(ProcessesOf(60123), 0);
  p->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ps
