#include "worker/data/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ps {
namespace {

constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension
constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions
constexpr int kNumClasses = 10;
// Refuse headers that claim absurd sizes rather than trying to allocate them.
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 32;
constexpr size_t kReadChunkBytes = size_t{1} << 20;

// Owns a zlib file handle; reads gzip and plain files alike.
class GzFile {
 public:
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  ~GzFile() {
    if (file_ != nullptr) gzclose(file_);
  }

  static absl::StatusOr<GzFile> Open(const std::string& path) {
    errno = 0;
    gzFile file = gzopen(path.c_str(), "rb");
    if (file == nullptr) {
      const int error = errno;
      if (error == ENOENT) {
        return absl::NotFoundError(
            absl::StrCat(path,
                         " not found; install the data set with "
                         "`apt-get install dataset-fashion-mnist` or point the data "
                         "directory at a copy of Fashion-MNIST"));
      }
      return absl::ErrnoToStatus(error != 0 ? error : ENOMEM, absl::StrCat("cannot open ", path));
    }
    gzbuffer(file, 1 << 18);
    return GzFile(path, file);
  }

  GzFile(GzFile&& other) noexcept : path_(std::move(other.path_)), file_(other.file_) {
    other.file_ = nullptr;
  }

  // Reads exactly `n` bytes into `out`; DATA_LOSS if the file ends early or is corrupt.
  absl::Status ReadExactly(uint8_t* out, size_t n, const char* what) {
    size_t done = 0;
    while (done < n) {
      const unsigned want = static_cast<unsigned>(std::min(n - done, kReadChunkBytes));
      const int got = gzread(file_, out + done, want);
      if (got < 0) return CorruptError();
      if (got == 0) {
        return absl::DataLossError(
            absl::StrCat(path_, " is truncated: ", what, " needs ", n, " bytes, file has ", done));
      }
      done += static_cast<size_t>(got);
    }
    return absl::OkStatus();
  }

  // DATA_LOSS unless the file ends here and its gzip trailer (CRC, length) checks out.
  absl::Status ExpectEnd() {
    uint8_t extra;
    const int got = gzread(file_, &extra, 1);
    if (got < 0) return CorruptError();
    if (got > 0) return absl::DataLossError(absl::StrCat(path_, " has unexpected trailing data"));
    int zerr = Z_OK;
    gzerror(file_, &zerr);
    if (zerr != Z_OK) return CorruptError();
    return absl::OkStatus();
  }

 private:
  GzFile(std::string path, gzFile file) : path_(std::move(path)), file_(file) {}

  absl::Status CorruptError() {
    int zerr = Z_OK;
    const char* message = gzerror(file_, &zerr);
    return absl::DataLossError(
        absl::StrCat(path_, " is corrupt: ", message != nullptr ? message : "read error"));
  }

  std::string path_;
  gzFile file_;
};

uint32_t ReadBigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// The header of an IDX file of unsigned bytes: its dimensions.
absl::StatusOr<std::vector<uint32_t>> ReadIdxHeader(GzFile& file, const std::string& path,
                                                    uint32_t magic, int num_dims) {
  uint8_t header[16];
  const size_t header_bytes = 4 * static_cast<size_t>(1 + num_dims);
  PS_RETURN_IF_ERROR(file.ReadExactly(header, header_bytes, "the IDX header"));
  const uint32_t got_magic = ReadBigEndian32(header);
  if (got_magic != magic) {
    return absl::DataLossError(absl::StrCat(path, ": bad IDX magic number 0x",
                                            absl::Hex(got_magic, absl::kZeroPad8), ", expected 0x",
                                            absl::Hex(magic, absl::kZeroPad8)));
  }
  std::vector<uint32_t> dims(num_dims);
  uint64_t payload = 1;
  for (int d = 0; d < num_dims; ++d) {
    dims[d] = ReadBigEndian32(header + 4 * (d + 1));
    payload *= std::max<uint32_t>(dims[d], 1);
    if (payload > kMaxPayloadBytes) {
      return absl::DataLossError(absl::StrCat(path, ": implausible IDX dimensions"));
    }
  }
  return dims;
}

// Reads the payload in chunks, so that a corrupt header cannot make us allocate gigabytes up front.
absl::StatusOr<std::vector<uint8_t>> ReadPayload(GzFile& file, uint64_t num_bytes,
                                                 const char* what) {
  std::vector<uint8_t> bytes;
  while (bytes.size() < num_bytes) {
    const size_t start = bytes.size();
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(num_bytes - start, 8 << 20));
    bytes.resize(start + chunk);
    PS_RETURN_IF_ERROR(file.ReadExactly(bytes.data() + start, chunk, what));
  }
  PS_RETURN_IF_ERROR(file.ExpectEnd());
  return bytes;
}

}  // namespace

absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, const std::string& prefix,
                                         int shard, int num_shards) {
  if (num_shards < 1 || shard < 0 || shard >= num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad shard ", shard, " of ", num_shards, ": need 0 <= shard < num_shards"));
  }
  const std::string images_path = absl::StrCat(dir, "/", prefix, "-images-idx3-ubyte.gz");
  const std::string labels_path = absl::StrCat(dir, "/", prefix, "-labels-idx1-ubyte.gz");

  PS_ASSIGN_OR_RETURN(GzFile labels_file, GzFile::Open(labels_path));
  PS_ASSIGN_OR_RETURN(GzFile images_file, GzFile::Open(images_path));

  PS_ASSIGN_OR_RETURN(std::vector<uint32_t> label_dims,
                      ReadIdxHeader(labels_file, labels_path, kLabelsMagic, 1));
  PS_ASSIGN_OR_RETURN(std::vector<uint32_t> image_dims,
                      ReadIdxHeader(images_file, images_path, kImagesMagic, 3));
  const uint32_t num_total = label_dims[0];
  if (image_dims[0] != num_total) {
    return absl::DataLossError(absl::StrCat(images_path, " holds ", image_dims[0], " images but ",
                                            labels_path, " holds ", num_total, " labels"));
  }
  const uint64_t num_features = uint64_t{image_dims[1]} * image_dims[2];
  if (num_features == 0) {
    return absl::DataLossError(absl::StrCat(images_path, ": images of zero size"));
  }

  PS_ASSIGN_OR_RETURN(std::vector<uint8_t> label_bytes,
                      ReadPayload(labels_file, num_total, "the labels"));
  PS_ASSIGN_OR_RETURN(std::vector<uint8_t> pixels,
                      ReadPayload(images_file, num_total * num_features, "the images"));

  // Validate every label, not just this shard's: shards of one file must agree on its health.
  for (uint64_t i = 0; i < num_total; ++i) {
    if (label_bytes[i] >= kNumClasses) {
      return absl::DataLossError(absl::StrCat(labels_path, ": label ", int{label_bytes[i]},
                                              " of example ", i, " is out of range [0, ",
                                              kNumClasses, ")"));
    }
  }

  Dataset data;
  data.num_classes = kNumClasses;
  data.num_features = static_cast<int>(num_features);
  data.total_examples = static_cast<int>(num_total);
  const uint32_t first = static_cast<uint32_t>(shard);
  data.num_examples =
      num_total > first ? static_cast<int>((num_total - first - 1) / num_shards + 1) : 0;
  data.labels.reserve(data.num_examples);
  data.features.resize(static_cast<size_t>(data.num_examples) * num_features);
  float* out = data.features.data();
  constexpr float kPixelScale = 1.0f / 255.0f;
  for (uint64_t i = first; i < num_total; i += static_cast<uint64_t>(num_shards)) {
    data.labels.push_back(label_bytes[i]);
    const uint8_t* in = pixels.data() + i * num_features;
    for (uint64_t f = 0; f < num_features; ++f) out[f] = in[f] * kPixelScale;
    out += num_features;
  }
  return data;
}

}  // namespace ps
