#include "common/cpu_set.h"

#include <sys/wait.h>
#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CpuListTest, ParsesNumbersAndRanges) {
  EXPECT_THAT(*ParseCpuList("0"), ElementsAre(0));
  EXPECT_THAT(*ParseCpuList("8,0-3"), ElementsAre(0, 1, 2, 3, 8));
  EXPECT_THAT(*ParseCpuList("5-5,7"), ElementsAre(5, 7));
}

TEST(CpuListTest, RefusesBadListsNamingThePart) {
  struct Case {
    const char* list;
    const char* says;
  } cases[] = {{"", "empty"},
               {"a", "'a' is not a CPU number"},
               {"1,,2", "'' is not"},
               {"3-1", "range 3-1 is reversed"},
               {"0-2,1", "CPU 1 is named twice"},
               {"-1", "'' is not"},
               {"+1", "'+1' is not"},
               {"0-", "'' is not"},
               {"99999", "beyond the largest"}};
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<int>> cpus = ParseCpuList(c.list);
    ASSERT_FALSE(cpus.ok()) << c.list;
    EXPECT_EQ(cpus.status().code(), absl::StatusCode::kInvalidArgument) << c.list;
    EXPECT_THAT(cpus.status().message(), HasSubstr(c.says)) << c.list;
  }
}

TEST(CpuListTest, FormatsTheShortestList) {
  EXPECT_EQ(FormatCpuList({0, 1, 2, 3, 8}), "0-3,8");
  EXPECT_EQ(FormatCpuList({1, 3}), "1,3");
  EXPECT_EQ(FormatCpuList({}), "");
}

// Pinning changes the whole process: done in a child, which reports through its exit status.
TEST(PinToCpusTest, PinsTheProcessToTheListAndRefusesCpusItMayNotUse) {
  const std::vector<int> allowed = *AllowedCpus();
  ASSERT_FALSE(allowed.empty());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Not a CPU of this process: refused, nothing changed.
    absl::StatusOr<std::vector<int>> bad = PinToCpus(absl::StrCat(CPU_SETSIZE - 1));
    if (bad.ok() || bad.status().message().find("not available") == std::string::npos) _exit(1);
    if (*AllowedCpus() != allowed) _exit(2);
    absl::StatusOr<std::vector<int>> pinned = PinToCpus(absl::StrCat(allowed.back()));
    if (!pinned.ok() || *pinned != std::vector<int>{allowed.back()}) _exit(3);
    if (*AllowedCpus() != std::vector<int>{allowed.back()}) _exit(4);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace ps
