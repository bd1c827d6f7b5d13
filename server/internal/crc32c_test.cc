#include "server/internal/crc32c.h"

#include <string>

#include "gtest/gtest.h"

namespace ps {
namespace {

// Bit by bit, straight from the definition.
uint32_t Reference(const std::string& data) {
  uint32_t crc = ~0u;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78 : crc >> 1;
  }
  return ~crc;
}

TEST(Crc32cTest, KnownValues) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
}

TEST(Crc32cTest, EveryLengthAndAlignmentMatchesTheDefinitionAndExtendConcatenates) {
  std::string data(300, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);
  for (size_t start = 0; start < 9; ++start) {
    for (size_t len = 0; start + len <= data.size(); len += 13) {
      const std::string part = data.substr(start, len);
      ASSERT_EQ(Crc32c(data.data() + start, len), Reference(part)) << start << " " << len;
      const size_t cut = len / 3;
      EXPECT_EQ(Crc32cExtend(Crc32c(part.data(), cut), part.data() + cut, len - cut),
                Reference(part));
    }
  }
}

}  // namespace
}  // namespace ps
