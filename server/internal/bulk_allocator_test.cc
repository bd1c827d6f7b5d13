#include "server/internal/bulk_allocator.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(BulkAllocatorTest, SmallAndLargeBuffersHoldWhatIsWritten) {
  for (size_t n :
       {size_t{0}, size_t{10}, kBulkBytes / sizeof(float) - 1, kBulkBytes, size_t{3} << 20}) {
    std::vector<float, BulkAllocator<float>> v;
    v.reserve(n);
    for (size_t i = 0; i < n; ++i) v.push_back(static_cast<float>(i));
    v.push_back(-1.0f);  // grows: a new block, the old one freed
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % 16, 0u);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(v[i], static_cast<float>(i));
    EXPECT_EQ(v.back(), -1.0f);
  }
}

}  // namespace
}  // namespace ps
