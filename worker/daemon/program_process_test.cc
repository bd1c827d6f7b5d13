#include "worker/daemon/program_process.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

class ProgramProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("program_process_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  ProgramProcessOptions Shell(const std::string& script) {
    ProgramProcessOptions o;
    o.argv = {"/bin/sh", "-c", script};
    o.working_dir = dir_.string();
    o.log_path = (dir_ / "program.log").string();
    return o;
  }
  // Polls until the program exits (bounded).
  int WaitExit(ProgramProcess& p) {
    for (int i = 0; i < 1000; ++i) {
      if (auto s = p.Poll(); s.has_value()) return *s;
      absl::SleepFor(absl::Milliseconds(10));
    }
    ADD_FAILURE() << "the program did not exit";
    return p.Stop(absl::ZeroDuration());
  }

  std::filesystem::path dir_;
};

TEST_F(ProgramProcessTest, RunsWithTheEnvironmentAndKeepsItsOutput) {
  ProgramProcessOptions o = Shell("echo out $PS_TEST; echo err >&2; pwd; exit 3");
  o.env["PS_TEST"] = "hello";
  auto p = ProgramProcess::Start(o);
  ASSERT_TRUE(p.ok()) << p.status();
  const int status = WaitExit(**p);
  EXPECT_FALSE(ProgramProcess::Succeeded(status));
  EXPECT_EQ(ProgramProcess::DescribeExit(status), "exited with status 3");
  const std::string out = absl::StrJoin((*p)->Tail(10), "\n");
  EXPECT_NE(out.find("out hello"), std::string::npos) << out;
  EXPECT_NE(out.find(dir_.string()), std::string::npos) << out;  // its working directory
  EXPECT_EQ((*p)->StderrTail(10), std::vector<std::string>{"err"});
  std::ifstream log(o.log_path);
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("out hello"), std::string::npos) << text;
}

TEST_F(ProgramProcessTest, MissingOrNotExecutableIsFailedPrecondition) {
  ProgramProcessOptions o = Shell("");
  o.argv = {(dir_ / "nope").string()};
  auto missing = ProgramProcess::Start(o);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.status().message().find("does not exist"), std::string::npos);
  const std::string file = (dir_ / "plain").string();
  std::ofstream(file) << "#!/bin/sh\n";
  chmod(file.c_str(), 0644);
  o.argv = {file};
  auto plain = ProgramProcess::Start(o);
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(plain.status().message().find("not executable"), std::string::npos);
  o.argv = {"surely-no-such-command-in-path"};
  auto unnamed = ProgramProcess::Start(o);
  EXPECT_EQ(unnamed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(unnamed.status().message().find("PATH"), std::string::npos);
}

TEST_F(ProgramProcessTest, StopTermsThenKillsTheWholeGroup) {
  // Ignores SIGTERM, and has a child of its own: both must end.
  auto p = ProgramProcess::Start(
      Shell("trap '' TERM; sleep 1000 & echo child $!; while true; do sleep 0.05; done"));
  ASSERT_TRUE(p.ok()) << p.status();
  pid_t child = 0;
  for (int i = 0; i < 500 && child == 0; ++i) {
    for (const std::string& line : (*p)->Tail(5)) {
      if (line.rfind("child ", 0) == 0) child = std::stoi(line.substr(6));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_GT(child, 0);
  const absl::Time start = absl::Now();
  const int status = (*p)->Stop(absl::Milliseconds(300));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));  // it ignored TERM: the grace ran
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << ProgramProcess::DescribeExit(status);
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = kill(child, 0) != 0;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(gone) << "the program's child " << child << " outlived it";
}

TEST_F(ProgramProcessTest, LogIsCapped) {
  ProgramProcessOptions o = Shell(
      "i=0; while [ $i -lt 3000 ]; do echo line-$i-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; "
      "i=$((i+1)); done");
  o.max_log_bytes = 16384;
  auto p = ProgramProcess::Start(o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(ProgramProcess::Succeeded(WaitExit(**p)));
  EXPECT_LE(std::filesystem::file_size(o.log_path), 16384u);
  EXPECT_LE(std::filesystem::file_size(o.log_path + ".1"), 16384u);
  EXPECT_GT(std::filesystem::file_size(o.log_path + ".1"), 0u);
  EXPECT_EQ((*p)->Tail(1),
            std::vector<std::string>{"line-2999-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"});
  EXPECT_GT((*p)->bytes_read(), 3000u * 40);
}

}  // namespace
}  // namespace ps
