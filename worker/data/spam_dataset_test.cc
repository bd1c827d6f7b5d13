#include "worker/data/spam_dataset.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using Tokens = std::vector<std::string>;

bool Contains(absl::string_view haystack, absl::string_view needle) {
  return absl::StrContains(haystack, needle);
}

// A fresh directory under the test's temp dir.
std::string MakeTempDir(const std::string& name) {
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/spam_dataset_test_", getpid(), "_", name);
  EXPECT_EQ(system(absl::StrCat("rm -rf '", dir, "' && mkdir -p '", dir, "'").c_str()), 0);
  return dir;
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  ASSERT_TRUE(out.good()) << path;
}

bool RealCorpusPresent() {
  return std::ifstream(absl::StrCat(kDefaultSpamAssassinDir, "/", kSpamMessagesFile)).good();
}

constexpr char kSkipHint[] =
    "no SpamAssassin corpus in /usr/share/datasets/spam-assassin; run "
    "deploy/fetch-spam-assassin.sh to install it";

TEST(SpamTokenizerTest, ReadsSubjectFromToAndBody) {
  const std::string message =
      "From someone@example.com  Thu Aug 22 13:17:22 2002\n"  // mbox line: skipped
      "Return-Path: <bounce@example.com>\n"                   // other header: skipped
      "Subject: FREE Money\n"
      "\tNow!! x\n"  // folded Subject line
      "X-Mailer: Outlook\n"
      " continued-mailer\n"  // folded skipped header
      "From: Alice <alice@mail.EXAMPLE.com>\n"
      "to: bob@b.org\n"
      "\n"
      "Hello World, a 123 caf\xc3\xa9 bar_baz\n"
      "Subject: not-a-header\n";
  EXPECT_EQ(TokenizeMessage(message),
            Tokens({"subject:free", "subject:money", "subject:now", "from:alice", "from:alice",
                    "from:mail", "from:example", "from:com", "to:bob", "to:org", "hello", "world",
                    "123", "caf", "bar", "baz", "subject", "not", "header"}));
}

TEST(SpamTokenizerTest, TokenLengthsAreTwoToThirty) {
  const std::string thirty(30, 'k'), thirty_one(31, 'q');
  EXPECT_EQ(TokenizeMessage(absl::StrCat("\nI a ok ", thirty, " ", thirty_one, " end")),
            Tokens({"ok", thirty, "end"}));
}

TEST(SpamTokenizerTest, HandlesCrLfAndSkipsBase64Lines) {
  const std::string base64 = "SGVsbG8gd29ybGQhIFRoaXMgaXMgYmFzZTY0IGVuY29kZWQgdGV4dC4=";
  ASSERT_GE(base64.size(), 40u);
  EXPECT_EQ(
      TokenizeMessage(absl::StrCat("Subject: Hi there\r\n\r\nbody text\r\n", base64,
                                   "\r\nshort+line/of=base64\r\n")),
      Tokens({"subject:hi", "subject:there", "body", "text", "short", "line", "of", "base64"}));
}

TEST(SpamTokenizerTest, MessageWithoutBodyOrHeaders) {
  EXPECT_TRUE(TokenizeMessage("").empty());
  EXPECT_EQ(TokenizeMessage("Subject: only headers"), Tokens({"subject:only", "subject:headers"}));
  EXPECT_EQ(TokenizeMessage("\njust body"), Tokens({"just", "body"}));
}

TEST(SpamHashTest, StableAcrossRunsAndPlatforms) {
  // Pinned values (checked against an independent Python FNV-1a + splitmix64): feature ids must
  // never change, or trained tables stop matching the data.
  EXPECT_EQ(StableHash64(""), 0xf52a15e9a9b5e89bULL);
  EXPECT_EQ(StableHash64("subject:free"), 0x5d11fa8d0d36b859ULL);
  EXPECT_EQ(TokenFeature("subject:free", 20), StableHash64("subject:free") >> 44);
  EXPECT_NE(StableHash64("free"), StableHash64("subject:free"));
}

TEST(SpamHashTest, FeaturesStayInRangeAndSpread) {
  for (int bits : {1, 4, 20, 63}) {
    for (int i = 0; i < 1000; ++i) {
      EXPECT_LT(TokenFeature(absl::StrCat("tok", i), bits), uint64_t{1} << bits) << bits;
    }
  }
  std::vector<uint64_t> buckets(16, 0);
  for (int i = 0; i < 16000; ++i) ++buckets[TokenFeature(absl::StrCat("word", i), 4)];
  for (uint64_t n : buckets) EXPECT_NEAR(static_cast<double>(n), 1000.0, 150.0);
}

TEST(SpamHashTest, MessageFeaturesAreSortedUniqueHashes) {
  const std::vector<uint64_t> features =
      MessageFeatures("Subject: spam spam\n\nSpam eggs SPAM eggs", 20);
  std::vector<uint64_t> expected = {TokenFeature("subject:spam", 20), TokenFeature("spam", 20),
                                    TokenFeature("eggs", 20)};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(features, expected);
  // With one bit, everything lands in feature 0 or 1.
  for (uint64_t f : MessageFeatures("\nmany different words here", 1)) EXPECT_LT(f, 2u);
}

TEST(SpamEscapeTest, DecodesTheFourEscapes) {
  auto text = UnescapeSpamField(R"(a\\b\tc\nd\re\\n)");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "a\\b\tc\nd\re\\n");
  EXPECT_EQ(UnescapeSpamField("").value(), "");
  EXPECT_EQ(UnescapeSpamField(R"(bad\x)").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(UnescapeSpamField("trailing\\").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SpamDatasetTest, LoadsHandWrittenFile) {
  const std::string dir = MakeTempDir("load");
  const std::string spam = R"(Subject: WIN cash\n\nClick\there\r\nnow \\o/)";
  const std::string ham = R"(Subject: meeting\nFrom: boss@work.com\n\nsee you at noon)";
  WriteFile(absl::StrCat(dir, "/messages.tsv"),
            absl::StrCat("1\tspam-1\t00001\t", spam, "\n", "0\teasy-ham-1\t00001\t", ham, "\n"));
  SpamDatasetOptions options;
  options.hash_bits = 12;
  options.test_percent = 0;
  auto data = SpamDataset::Load(dir, options);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->num_train(), 2);
  EXPECT_EQ(data->num_test(), 0);
  EXPECT_EQ(data->num_examples(), 2);
  EXPECT_EQ(data->num_spam(), 1);
  EXPECT_EQ(data->train()[0].label, 1);
  EXPECT_EQ(data->train()[0].features,
            MessageFeatures("Subject: WIN cash\n\nClick\there\r\nnow \\o/", 12));
  EXPECT_EQ(data->train()[1].label, 0);
  EXPECT_EQ(data->train()[1].features,
            MessageFeatures("Subject: meeting\nFrom: boss@work.com\n\nsee you at noon", 12));
  // A last line without its newline is read as well.
  WriteFile(absl::StrCat(dir, "/messages.tsv"), "0\tg\ti\t\\nbody");
  data = SpamDataset::Load(dir, options);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train()[0].features, std::vector<uint64_t>{TokenFeature("body", 12)});
}

TEST(SpamDatasetTest, MalformedLineIsDataLossNamingFileAndLine) {
  const std::string dir = MakeTempDir("malformed");
  const std::string good = "0\teasy-ham-1\t00001\tSubject: hi\\n\\nbody\n1\tspam-1\t00002\tx\n";
  const std::vector<std::string> bad_lines = {
      "1\tspam-1\t00003\n",                  // three fields
      "1\tspam-1\t00003\ttext\textra\n",     // five fields
      "2\tspam-1\t00003\ttext\n",            // label out of range
      "spam\tspam-1\t00003\ttext\n",         // label not a number
      "1\t\t00003\ttext\n",                  // empty group
      "1\tspam-1\t\ttext\n",                 // empty id
      "1\tspam-1\t00003\tbad \\q escape\n",  // unknown escape
      "1\tspam-1\t00003\ttrailing\\\n",      // trailing backslash
      "\n",                                  // empty line
  };
  for (const std::string& bad : bad_lines) {
    WriteFile(absl::StrCat(dir, "/messages.tsv"), absl::StrCat(good, bad, good));
    auto data = SpamDataset::Load(dir);
    EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss) << bad;
    EXPECT_PRED2(Contains, data.status().message(), absl::StrCat(dir, "/messages.tsv:3: ")) << bad;
  }
  WriteFile(absl::StrCat(dir, "/messages.tsv"), "");
  EXPECT_EQ(SpamDataset::Load(dir).status().code(), absl::StatusCode::kDataLoss);
}

TEST(SpamDatasetTest, MissingFileIsNotFoundWithHint) {
  const std::string dir = MakeTempDir("missing");
  auto data = SpamDataset::Load(dir);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_PRED2(Contains, data.status().message(), "deploy/fetch-spam-assassin.sh");
  EXPECT_PRED2(Contains, data.status().message(), absl::StrCat(dir, "/messages.tsv"));
}

TEST(SpamDatasetTest, RejectsBadOptions) {
  for (int bits : {0, -1, 64}) {
    SpamDatasetOptions options;
    options.hash_bits = bits;
    EXPECT_EQ(SpamDataset::Load("/nonexistent", options).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bits;
  }
  for (int percent : {-1, 101}) {
    SpamDatasetOptions options;
    options.test_percent = percent;
    EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument) << percent;
  }
}

TEST(SpamDatasetTest, SplitDependsOnlyOnGroupAndId) {
  EXPECT_TRUE(InTestSplit("spam-1", "00001", 100));
  EXPECT_FALSE(InTestSplit("spam-1", "00001", 0));
  int in_test = 0;
  for (int i = 0; i < 5000; ++i) in_test += InTestSplit("easy-ham-1", absl::StrCat(i), 20);
  EXPECT_NEAR(in_test, 1000, 100);
  // The same ids in another group land elsewhere: the split is not per id alone.
  int same = 0;
  for (int i = 0; i < 1000; ++i) {
    same += InTestSplit("spam-1", absl::StrCat(i), 20) == InTestSplit("ham", absl::StrCat(i), 20);
  }
  EXPECT_LT(same, 900);

  // File order does not matter: the reversed file gives the same train and test sets.
  const std::string dir = MakeTempDir("split");
  std::vector<std::string> lines;
  for (int i = 0; i < 200; ++i) {
    lines.push_back(absl::StrCat(i % 3 == 0 ? 1 : 0, "\tg\t", i, "\t\\nword", i, " common\n"));
  }
  WriteFile(absl::StrCat(dir, "/messages.tsv"), absl::StrJoin(lines, ""));
  auto forward = SpamDataset::Load(dir);
  ASSERT_TRUE(forward.ok()) << forward.status();
  std::reverse(lines.begin(), lines.end());
  WriteFile(absl::StrCat(dir, "/messages.tsv"), absl::StrJoin(lines, ""));
  auto backward = SpamDataset::Load(dir);
  ASSERT_TRUE(backward.ok()) << backward.status();
  auto feature_sets = [](const std::vector<SpamExample>& examples) {
    std::vector<std::vector<uint64_t>> sets;
    for (const SpamExample& e : examples) sets.push_back(e.features);
    std::sort(sets.begin(), sets.end());
    return sets;
  };
  EXPECT_EQ(forward->num_test(), backward->num_test());
  EXPECT_GT(forward->num_test(), 20);
  EXPECT_LT(forward->num_test(), 60);
  EXPECT_EQ(feature_sets(forward->train()), feature_sets(backward->train()));
  EXPECT_EQ(feature_sets(forward->test()), feature_sets(backward->test()));
}

TEST(SpamDatasetTest, RealCorpusCounts) {
  if (!RealCorpusPresent()) GTEST_SKIP() << kSkipHint;
  auto data = SpamDataset::Load(kDefaultSpamAssassinDir);
  ASSERT_TRUE(data.ok()) << data.status();
  // 2500 + 1400 + 250 ham and 500 + 1396 spam (the package ships each message as .json and .txt).
  EXPECT_EQ(data->num_examples(), 6046);
  EXPECT_EQ(data->num_spam(), 1896);
  EXPECT_NEAR(static_cast<double>(data->num_test()) / data->num_examples(), 0.2, 0.02);
  for (const auto* split : {&data->train(), &data->test()}) {
    int64_t spam = 0;
    for (const SpamExample& e : *split) {
      spam += e.label;
      ASSERT_TRUE(std::is_sorted(e.features.begin(), e.features.end()));
    }
    EXPECT_GT(spam, 0);
    EXPECT_LT(spam, static_cast<int64_t>(split->size()));
  }
}

}  // namespace
}  // namespace ps
