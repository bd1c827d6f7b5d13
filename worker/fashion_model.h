// The zoo's dense model: an MLP on Fashion-MNIST, as a Model for the job runner.
#ifndef PS_WORKER_FASHION_MODEL_H_
#define PS_WORKER_FASHION_MODEL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/v1/types.pb.h"
#include "worker/model.h"

namespace ps {

// Loads the whole training set (the runner picks each worker's shard by index) and the test
// set from `data_dir`. Weight tables are Glorot-uniform (seeded), biases zero; `optimizer` is
// the tables' server-side optimizer. Errors: bad layers (INVALID_ARGUMENT), missing or corrupt
// data (NOT_FOUND, DATA_LOSS).
absl::StatusOr<std::unique_ptr<Model>> MakeFashionMlp(const std::string& data_dir,
                                                      const std::vector<int>& layers,
                                                      const v1::OptimizerSpec& optimizer,
                                                      uint64_t seed);

}  // namespace ps

#endif  // PS_WORKER_FASHION_MODEL_H_
