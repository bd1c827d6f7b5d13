// Token files, PEM loading and the constant-time comparison. The tokens and TLS over real
// daemons are tested by tests/security_test.sh.
#include "common/security.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "common/node_identity.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

std::string WriteFile(const std::string& name, const std::string& text, mode_t mode = 0600) {
  const std::string path = std::string(::testing::TempDir()) + "/" + name;
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
  return path;
}

TEST(ConstantTimeEqualsTest, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("s3cret", "s3cret"));
  EXPECT_FALSE(ConstantTimeEquals("s3cret", "s3cre"));
  EXPECT_FALSE(ConstantTimeEquals("s3cre", "s3cret"));
  EXPECT_FALSE(ConstantTimeEquals("s3cret", "S3cret"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
}

TEST(ReadTokenFileTest, TrimsTheLineAndRefusesEmptyOrSeveralWords) {
  auto token = ReadTokenFile(WriteFile("token_ok", "  abc123\n"));
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "abc123");
  EXPECT_EQ(ReadTokenFile(WriteFile("token_empty", "\n \n")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTokenFile(WriteFile("token_words", "abc def\n")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTokenFile("/nonexistent/token").status().code(), absl::StatusCode::kNotFound);
}

TEST(TokenFromFileOrEnvTest, FileFirstThenEnvironment) {
  setenv("PS_TEST_TOKEN", " from-env \n", 1);
  EXPECT_EQ(*TokenFromFileOrEnv("", "PS_TEST_TOKEN"), "from-env");
  EXPECT_EQ(*TokenFromFileOrEnv(WriteFile("token_file", "from-file"), "PS_TEST_TOKEN"),
            "from-file");
  unsetenv("PS_TEST_TOKEN");
  EXPECT_EQ(*TokenFromFileOrEnv("", "PS_TEST_TOKEN"), "");
}

TEST(SecurityLoadTest, PlaintextByDefault) {
  auto s = Security::Load({});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE((*s)->server_tls());
  EXPECT_FALSE((*s)->client_tls());
  EXPECT_EQ((*s)->Describe(), "serves plaintext, dials plaintext, no token");
}

TEST(SecurityLoadTest, RefusesHalfAPairMissingFilesAndNonPem) {
  SecurityOptions cert_only;
  cert_only.tls_cert_file = WriteFile("cert.pem", "-----BEGIN CERTIFICATE-----\n");
  EXPECT_EQ(Security::Load(cert_only).status().code(), absl::StatusCode::kInvalidArgument);

  SecurityOptions missing;
  missing.tls_ca_file = "/nonexistent/ca.crt";
  auto s = Security::Load(missing);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.status().message().find("--tls_ca"), std::string::npos) << s.status();

  SecurityOptions not_pem;
  not_pem.tls_ca_file = WriteFile("ca.txt", "hello");
  s = Security::Load(not_pem);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("not a PEM file"), std::string::npos) << s.status();
}

// What a worker daemon hands a job's programs; tests/security_test.sh mints the same in Python.
TEST(JobTokenTest, IsTheJobIdAndAnHmacOfItUnderTheClusterToken) {
  const std::string token = JobToken("cluster-token", "job-3");
  EXPECT_EQ(token, "job:job-3:" + HmacSha256Hex("cluster-token", "job-token\njob-3"));
  EXPECT_NE(token, JobToken("cluster-token", "job-4"));
  EXPECT_NE(token, JobToken("another-cluster", "job-3"));
}

}  // namespace
}  // namespace ps
