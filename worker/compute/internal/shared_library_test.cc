#include "worker/compute/internal/shared_library.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ps {
namespace internal {
namespace {

TEST(SharedLibraryTest, BindsFunctionsByName) {
  absl::StatusOr<SharedLibrary> libm = SharedLibrary::Open("libm.so.6", "", "libm", "");
  ASSERT_TRUE(libm.ok()) << libm.status();
  double (*cos_fn)(double) = nullptr;
  libm->Bind("cos", &cos_fn);
  ASSERT_TRUE(libm->AllBound("libm.so.6").ok());
  ASSERT_NE(cos_fn, nullptr);
  EXPECT_EQ(cos_fn(0.0), 1.0);
}

TEST(SharedLibraryTest, AMissingLibraryOrFunctionIsAFailedPreconditionThatSaysWhat) {
  absl::StatusOr<SharedLibrary> none =
      SharedLibrary::Open("libps-no-such-library.so.1", "/nonexistent", "NoSuchLib", "install it");
  ASSERT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  // Both places tried, then the remedy.
  EXPECT_NE(none.status().message().find("cannot load NoSuchLib (libps-no-such-library.so.1"),
            absl::string_view::npos)
      << none.status();
  EXPECT_NE(none.status().message().find("/nonexistent/libps-no-such-library.so.1"),
            absl::string_view::npos)
      << none.status();
  EXPECT_NE(none.status().message().find("): install it"), absl::string_view::npos);

  absl::StatusOr<SharedLibrary> libm = SharedLibrary::Open("libm.so.6", "", "libm", "");
  ASSERT_TRUE(libm.ok()) << libm.status();
  double (*cos_fn)(double) = nullptr;
  void (*a)() = nullptr;
  void (*b)() = nullptr;
  libm->Bind("ps_no_such_function_a", &a);
  libm->Bind("cos", &cos_fn);
  libm->Bind("ps_no_such_function_b", &b);
  EXPECT_EQ(a, nullptr);
  EXPECT_NE(cos_fn, nullptr);
  const absl::Status s = libm->AllBound("libm.so.6", " (too old?)");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "the loaded libm.so.6 lacks ps_no_such_function_a, ps_no_such_function_b (too old?)");
}

}  // namespace
}  // namespace internal
}  // namespace ps
