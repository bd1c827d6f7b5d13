#include "worker/data/fashion_mnist.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

constexpr uint32_t kLabelsMagic = 0x00000801;
constexpr uint32_t kImagesMagic = 0x00000803;

// True when all four files of the real data set are installed.
bool HaveRealData() {
  for (const char* name : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                           "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    struct stat st;
    if (stat(absl::StrCat(kDefaultFashionMnistDir, "/", name).c_str(), &st) != 0) return false;
  }
  return true;
}

std::string NoRealDataMessage() {
  return absl::StrCat("Fashion-MNIST not found in ", kDefaultFashionMnistDir,
                      "; install it with `apt-get install dataset-fashion-mnist` to run this test");
}

// Checks the invariants every loaded data set must hold.
void ExpectWellFormed(const Dataset& data) {
  EXPECT_EQ(data.num_classes, 10);
  ASSERT_EQ(data.labels.size(), static_cast<size_t>(data.num_examples));
  ASSERT_EQ(data.features.size(), static_cast<size_t>(data.num_examples) * data.num_features);
  EXPECT_TRUE(std::all_of(data.labels.begin(), data.labels.end(),
                          [](int32_t l) { return l >= 0 && l < 10; }));
  EXPECT_TRUE(std::all_of(data.features.begin(), data.features.end(),
                          [](float x) { return x >= 0.0f && x <= 1.0f; }));
}

TEST(FashionMnistTest, LoadsRealTrainingSet) {
  if (!HaveRealData()) GTEST_SKIP() << NoRealDataMessage();
  absl::StatusOr<Dataset> data = LoadFashionMnist(kDefaultFashionMnistDir, "train", 0, 1);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_examples, 60000);
  EXPECT_EQ(data->total_examples, 60000);
  EXPECT_EQ(data->num_features, 784);
  ExpectWellFormed(*data);
  // Fashion-MNIST is balanced: 6000 training examples per class.
  std::vector<int> per_class(10, 0);
  for (int32_t l : data->labels) ++per_class[l];
  EXPECT_EQ(per_class, std::vector<int>(10, 6000));
  // Pixels span the whole range: 0 maps to 0 and 255 to 1.
  EXPECT_EQ(*std::min_element(data->features.begin(), data->features.end()), 0.0f);
  EXPECT_EQ(*std::max_element(data->features.begin(), data->features.end()), 1.0f);
}

TEST(FashionMnistTest, LoadsRealTestSet) {
  if (!HaveRealData()) GTEST_SKIP() << NoRealDataMessage();
  absl::StatusOr<Dataset> data = LoadFashionMnist(kDefaultFashionMnistDir, "t10k", 0, 1);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_examples, 10000);
  EXPECT_EQ(data->total_examples, 10000);
  EXPECT_EQ(data->num_features, 784);
  ExpectWellFormed(*data);
  std::vector<int> per_class(10, 0);
  for (int32_t l : data->labels) ++per_class[l];
  EXPECT_EQ(per_class, std::vector<int>(10, 1000));
}

TEST(FashionMnistTest, TwoShardsPartitionTheRealTrainingSet) {
  if (!HaveRealData()) GTEST_SKIP() << NoRealDataMessage();
  absl::StatusOr<Dataset> all = LoadFashionMnist(kDefaultFashionMnistDir, "train", 0, 1);
  absl::StatusOr<Dataset> shard0 = LoadFashionMnist(kDefaultFashionMnistDir, "train", 0, 2);
  absl::StatusOr<Dataset> shard1 = LoadFashionMnist(kDefaultFashionMnistDir, "train", 1, 2);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_TRUE(shard0.ok()) << shard0.status();
  ASSERT_TRUE(shard1.ok()) << shard1.status();
  const Dataset* shards[] = {&*shard0, &*shard1};
  const int f = all->num_features;
  for (int s = 0; s < 2; ++s) {
    const Dataset& shard = *shards[s];
    EXPECT_EQ(shard.num_examples, 30000) << "shard " << s;
    EXPECT_EQ(shard.total_examples, 60000) << "shard " << s;
    EXPECT_EQ(shard.num_features, f) << "shard " << s;
    ExpectWellFormed(shard);
    // Example j of shard s is example 2j + s of the whole set, so the shards are disjoint and
    // together cover it.
    for (int j = 0; j < shard.num_examples; ++j) {
      const int i = 2 * j + s;
      ASSERT_EQ(shard.labels[j], all->labels[i]) << "shard " << s << " example " << j;
      ASSERT_TRUE(std::equal(shard.features.begin() + static_cast<ptrdiff_t>(j) * f,
                             shard.features.begin() + static_cast<ptrdiff_t>(j + 1) * f,
                             all->features.begin() + static_cast<ptrdiff_t>(i) * f))
          << "shard " << s << " example " << j;
    }
  }
}

TEST(FashionMnistTest, RejectsBadShardArgumentsBeforeOpeningFiles) {
  const int bad[][2] = {{-1, 2}, {2, 2}, {3, 2}, {0, 0}, {0, -1}, {-1, -1}};
  for (const auto& [shard, num_shards] : bad) {
    absl::StatusOr<Dataset> data = LoadFashionMnist("/nonexistent", "train", shard, num_shards);
    EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument)
        << shard << " of " << num_shards << ": " << data.status();
  }
}

TEST(FashionMnistTest, MissingDirectoryIsNotFoundWithInstallHint) {
  const std::string dir = "/nonexistent/fashion-mnist";
  absl::StatusOr<Dataset> data = LoadFashionMnist(dir, "train", 0, 1);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound) << data.status();
  EXPECT_NE(data.status().message().find("apt-get install dataset-fashion-mnist"),
            std::string::npos)
      << data.status();
  EXPECT_NE(data.status().message().find(dir), std::string::npos) << data.status();
}

// An IDX file of unsigned bytes.
std::string IdxBytes(uint32_t magic, const std::vector<uint32_t>& dims,
                     const std::vector<uint8_t>& payload) {
  std::string bytes;
  auto put32 = [&bytes](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<char>(v >> shift));
  };
  put32(magic);
  for (uint32_t d : dims) put32(d);
  bytes.append(payload.begin(), payload.end());
  return bytes;
}

std::string Gzip(const std::string& path, const std::string& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  EXPECT_NE(file, nullptr) << path;
  if (file == nullptr) return "";
  EXPECT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  EXPECT_EQ(gzclose(file), Z_OK);
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteRaw(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// Synthetic IDX files in a fresh temporary directory, prefix "tiny": 5 images of 2 x 3 pixels.
class FashionMnistFilesTest : public testing::Test {
 protected:
  static constexpr int kExamples = 5;
  static constexpr int kRows = 2, kCols = 3;

  void SetUp() override {
    std::string tmpl = testing::TempDir() + "fashion_mnist_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << tmpl;
    dir_ = tmpl;
    for (int i = 0; i < kExamples; ++i) {
      labels_.push_back(static_cast<uint8_t>((3 * i + 1) % 10));
      for (int p = 0; p < kRows * kCols; ++p)
        pixels_.push_back(static_cast<uint8_t>((51 * p + 13 * i) % 256));
    }
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string LabelsPath() const { return dir_ + "/tiny-labels-idx1-ubyte.gz"; }
  std::string ImagesPath() const { return dir_ + "/tiny-images-idx3-ubyte.gz"; }
  std::string GoodLabels() const { return IdxBytes(kLabelsMagic, {kExamples}, labels_); }
  std::string GoodImages() const {
    return IdxBytes(kImagesMagic, {kExamples, kRows, kCols}, pixels_);
  }
  // Writes both files gzipped.
  void WriteGzipped(const std::string& labels, const std::string& images) {
    Gzip(LabelsPath(), labels);
    Gzip(ImagesPath(), images);
  }
  absl::StatusOr<Dataset> Load(int shard = 0, int num_shards = 1) const {
    return LoadFashionMnist(dir_, "tiny", shard, num_shards);
  }
  // Expects DATA_LOSS whose message contains `needle`.
  void ExpectDataLoss(const std::string& needle) const {
    absl::StatusOr<Dataset> data = Load();
    EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss) << data.status();
    EXPECT_NE(data.status().message().find(needle), std::string::npos)
        << "want \"" << needle << "\" in: " << data.status();
  }

  std::string dir_;
  std::vector<uint8_t> labels_;
  std::vector<uint8_t> pixels_;
};

TEST_F(FashionMnistFilesTest, LoadsSyntheticFilesExactly) {
  WriteGzipped(GoodLabels(), GoodImages());
  absl::StatusOr<Dataset> data = Load();
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_examples, kExamples);
  EXPECT_EQ(data->total_examples, kExamples);
  EXPECT_EQ(data->num_features, kRows * kCols);
  EXPECT_EQ(data->labels, std::vector<int32_t>(labels_.begin(), labels_.end()));
  ASSERT_EQ(data->features.size(), pixels_.size());
  for (size_t i = 0; i < pixels_.size(); ++i) {
    EXPECT_FLOAT_EQ(data->features[i], pixels_[i] / 255.0f) << "at " << i;
  }
  EXPECT_EQ(data->features[0], 0.0f);  // pixel 0 of example 0 is 0
}

TEST_F(FashionMnistFilesTest, ReadsUncompressedFilesToo) {
  WriteRaw(LabelsPath(), GoodLabels());
  WriteRaw(ImagesPath(), GoodImages());
  absl::StatusOr<Dataset> data = Load();
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_examples, kExamples);
  EXPECT_EQ(data->labels, std::vector<int32_t>(labels_.begin(), labels_.end()));
}

TEST_F(FashionMnistFilesTest, ShardsTakeEveryNthExampleInOrder) {
  WriteGzipped(GoodLabels(), GoodImages());
  absl::StatusOr<Dataset> all = Load();
  ASSERT_TRUE(all.ok()) << all.status();
  const int f = kRows * kCols;
  for (int num_shards : {2, 3, 5, 7}) {
    int covered = 0;
    for (int shard = 0; shard < num_shards; ++shard) {
      SCOPED_TRACE(absl::StrCat("shard ", shard, " of ", num_shards));
      absl::StatusOr<Dataset> part = Load(shard, num_shards);
      ASSERT_TRUE(part.ok()) << part.status();
      const int want = shard < kExamples ? (kExamples - shard - 1) / num_shards + 1 : 0;
      ASSERT_EQ(part->num_examples, want);
      EXPECT_EQ(part->total_examples, kExamples);
      ASSERT_EQ(part->labels.size(), static_cast<size_t>(want));
      ASSERT_EQ(part->features.size(), static_cast<size_t>(want * f));
      for (int j = 0; j < want; ++j) {
        const int i = shard + j * num_shards;
        EXPECT_EQ(part->labels[j], all->labels[i]);
        EXPECT_TRUE(std::equal(part->features.begin() + j * f, part->features.begin() + (j + 1) * f,
                               all->features.begin() + i * f));
      }
      covered += want;
    }
    EXPECT_EQ(covered, kExamples) << num_shards << " shards";
  }
}

TEST_F(FashionMnistFilesTest, MissingImagesFileIsNotFound) {
  Gzip(LabelsPath(), GoodLabels());
  absl::StatusOr<Dataset> data = Load();
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound) << data.status();
  EXPECT_NE(data.status().message().find(ImagesPath()), std::string::npos) << data.status();
}

TEST_F(FashionMnistFilesTest, BadImagesMagicIsDataLoss) {
  WriteGzipped(GoodLabels(), IdxBytes(0x00000802, {kExamples, kRows, kCols}, pixels_));
  ExpectDataLoss("magic");
}

TEST_F(FashionMnistFilesTest, SwappedFilesAreDataLoss) {
  WriteGzipped(GoodImages(), GoodLabels());
  ExpectDataLoss("magic");
}

TEST_F(FashionMnistFilesTest, TruncatedImagePayloadIsDataLoss) {
  std::string images = GoodImages();
  images.resize(images.size() - 4);
  WriteGzipped(GoodLabels(), images);
  ExpectDataLoss("truncated");
}

TEST_F(FashionMnistFilesTest, TruncatedLabelPayloadIsDataLoss) {
  std::string labels = GoodLabels();
  labels.pop_back();
  WriteGzipped(labels, GoodImages());
  ExpectDataLoss("truncated");
}

TEST_F(FashionMnistFilesTest, TruncatedHeaderIsDataLoss) {
  WriteGzipped(GoodLabels(), GoodImages().substr(0, 10));
  ExpectDataLoss("truncated");
}

TEST_F(FashionMnistFilesTest, EmptyFileIsDataLoss) {
  WriteGzipped(GoodLabels(), GoodImages());
  WriteRaw(LabelsPath(), "");
  ExpectDataLoss("truncated");
}

TEST_F(FashionMnistFilesTest, TrailingBytesAreDataLoss) {
  WriteGzipped(GoodLabels(), GoodImages() + "extra");
  ExpectDataLoss("trailing");
}

TEST_F(FashionMnistFilesTest, LabelOutOfRangeIsDataLoss) {
  labels_[3] = 10;
  WriteGzipped(GoodLabels(), GoodImages());
  ExpectDataLoss("out of range");
  labels_[3] = 255;
  WriteGzipped(GoodLabels(), GoodImages());
  ExpectDataLoss("out of range");
}

TEST_F(FashionMnistFilesTest, LabelOutOfRangeOutsideTheShardIsStillDataLoss) {
  labels_[1] = 200;  // example 1 belongs to shard 1 of 2
  WriteGzipped(GoodLabels(), GoodImages());
  absl::StatusOr<Dataset> data = Load(0, 2);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss) << data.status();
}

TEST_F(FashionMnistFilesTest, ImageAndLabelCountMismatchIsDataLoss) {
  labels_.pop_back();
  WriteGzipped(IdxBytes(kLabelsMagic, {kExamples - 1}, labels_), GoodImages());
  ExpectDataLoss("holds");
}

TEST_F(FashionMnistFilesTest, ZeroSizedImagesAreDataLoss) {
  WriteGzipped(GoodLabels(), IdxBytes(kImagesMagic, {kExamples, kRows, 0}, {}));
  ExpectDataLoss("zero size");
}

TEST_F(FashionMnistFilesTest, ImplausibleDimensionsAreDataLossWithoutAllocating) {
  WriteGzipped(IdxBytes(kLabelsMagic, {0x7fffffff}, {}),
               IdxBytes(kImagesMagic, {0x7fffffff, 0xffff, 0xffff}, {}));
  ExpectDataLoss("implausible");
}

TEST_F(FashionMnistFilesTest, GarbageBytesAreDataLoss) {
  WriteGzipped(GoodLabels(), GoodImages());
  WriteRaw(ImagesPath(), "this is not an IDX file, compressed or otherwise\n");
  ExpectDataLoss("");
}

TEST_F(FashionMnistFilesTest, GzipHeaderFollowedByGarbageIsDataLoss) {
  WriteGzipped(GoodLabels(), GoodImages());
  std::string bytes = "\x1f\x8b\x08";
  bytes += std::string(7, '\0');
  bytes += "\xff\xff\xff\xff garbage where deflate data should be";
  WriteRaw(LabelsPath(), bytes);
  ExpectDataLoss("");
}

TEST_F(FashionMnistFilesTest, CorruptGzipStreamIsDataLoss) {
  const std::string gz = Gzip(ImagesPath(), GoodImages());
  ASSERT_GT(gz.size(), 20u);
  Gzip(LabelsPath(), GoodLabels());
  // Flip every bit of the deflate data between the 10-byte header and the 8-byte trailer.
  std::string corrupt = gz;
  for (size_t i = 10; i + 8 < corrupt.size(); ++i) corrupt[i] = static_cast<char>(~corrupt[i]);
  WriteRaw(ImagesPath(), corrupt);
  ExpectDataLoss("");
}

TEST_F(FashionMnistFilesTest, BadGzipChecksumIsDataLoss) {
  const std::string gz = Gzip(ImagesPath(), GoodImages());
  Gzip(LabelsPath(), GoodLabels());
  std::string corrupt = gz;
  corrupt[corrupt.size() - 8] = static_cast<char>(corrupt[corrupt.size() - 8] ^ 0x01);  // CRC32
  WriteRaw(ImagesPath(), corrupt);
  ExpectDataLoss("corrupt");
}

TEST_F(FashionMnistFilesTest, GzipCutShortIsDataLoss) {
  const std::string gz = Gzip(ImagesPath(), GoodImages());
  Gzip(LabelsPath(), GoodLabels());
  // Without its trailer the stream still decompresses, but cannot be verified.
  WriteRaw(ImagesPath(), gz.substr(0, gz.size() - 8));
  ExpectDataLoss("");
  // Cut in the middle of the deflate data.
  WriteRaw(ImagesPath(), gz.substr(0, gz.size() / 2));
  ExpectDataLoss("");
}

}  // namespace
}  // namespace ps
