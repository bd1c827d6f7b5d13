// Loader for the Fashion-MNIST data set in its gzipped IDX form (Debian: dataset-fashion-mnist).
#ifndef PS_WORKER_DATA_FASHION_MNIST_H_
#define PS_WORKER_DATA_FASHION_MNIST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ps {

// Where the Debian package dataset-fashion-mnist installs the files.
inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

// A dense classification data set held in host memory.
struct Dataset {
  int num_examples = 0;
  int total_examples = 0;  // examples in the file, before sharding
  int num_features = 0;    // 784 for Fashion-MNIST (28 x 28 pixels)
  int num_classes = 10;
  std::vector<float> features;  // num_examples * num_features, row-major, pixels scaled to [0, 1]
  std::vector<int32_t> labels;  // num_examples, each in [0, num_classes)
};

// Reads `<dir>/<prefix>-images-idx3-ubyte.gz` and `<dir>/<prefix>-labels-idx1-ubyte.gz`
// (prefix "train" or "t10k"; uncompressed files are read as well). Keeps only the examples i with
// i % num_shards == shard, in their original order; shard 0 of 1 keeps all.
// Errors: INVALID_ARGUMENT for a bad shard spec; NOT_FOUND naming a missing file (with a hint to
// `apt-get install dataset-fashion-mnist`); DATA_LOSS for a bad magic number, a truncated or
// corrupt file, mismatched image and label counts, or a label out of range.
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, const std::string& prefix,
                                         int shard, int num_shards);

}  // namespace ps

#endif  // PS_WORKER_DATA_FASHION_MNIST_H_
