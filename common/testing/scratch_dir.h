// Test support: a fresh directory under the test temp dir, removed with the object. Tests only.
#ifndef PS_COMMON_TESTING_SCRATCH_DIR_H_
#define PS_COMMON_TESTING_SCRATCH_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "gtest/gtest.h"

namespace ps {
namespace testing {

class ScratchDir {
 public:
  // `prefix` names the directory (`<prefix>-XXXXXX`), so that a leftover one says whose it is.
  explicit ScratchDir(const std::string& prefix) {
    std::string templ =
        (std::filesystem::path(::testing::TempDir()) / (prefix + "-XXXXXX")).string();
    if (mkdtemp(templ.data()) != nullptr) path_ = templ;
    EXPECT_FALSE(path_.empty()) << "mkdtemp " << templ << " failed";
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace testing
}  // namespace ps

#endif  // PS_COMMON_TESTING_SCRATCH_DIR_H_
