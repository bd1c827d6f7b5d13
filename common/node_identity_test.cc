#include "common/node_identity.h"

#include <string>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(NodeIdentityTest, SecretsAreFreshHex) {
  const std::string a = NewSecret(), b = NewSecret();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
}

TEST(NodeIdentityTest, HmacMatchesRfc4231) {
  // RFC 4231, test case 2.
  EXPECT_EQ(HmacSha256Hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(NodeIdentityTest, ReceiptsBindTheServerTheCheckpointAndTheFigures) {
  const std::string r = CheckpointReceipt("s1", "job-1", 3, 10, 400);
  EXPECT_EQ(r.size(), 64u);
  EXPECT_NE(r, CheckpointReceipt("s2", "job-1", 3, 10, 400));
  EXPECT_NE(r, CheckpointReceipt("s1", "job-2", 3, 10, 400));
  EXPECT_NE(r, CheckpointReceipt("s1", "job-1", 4, 10, 400));
  EXPECT_NE(r, CheckpointReceipt("s1", "job-1", 3, 11, 400));
  EXPECT_NE(r, CheckpointReceipt("s1", "job-1", 3, 10, 401));
  EXPECT_EQ(CheckpointReceipt("", "job-1", 3, 10, 400), "");  // no secret: no receipt
}

TEST(NodeIdentityTest, HostPortMustParse) {
  for (const char* good : {"10.0.0.1:7100", "[::1]:7100", "[fe80::1]:1", "host-a.example.com:65535",
                           "localhost:80", "a_b:9"}) {
    EXPECT_TRUE(ValidateHostPort("address", good).ok()) << good;
  }
  for (const char* bad :
       {"",           "not an address", "../../etc:99999", "host",    "host:",  ":80",    "host:0",
        "host:65536", "host:-1",        "host:+1",         "host:1x", "[::1]",  "[::1]:", "[]:80",
        "[::1]80",    "a/b:80",         ".x:80",           "-x:80",   "h\n:80", "[x]:80"}) {
    absl::Status s = ValidateHostPort("address", bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("address"), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace ps
