// The zoo's dense model: an MLP on Fashion-MNIST, as a Model for the job runner.
#ifndef PS_WORKER_MODELS_FASHION_MODEL_H_
#define PS_WORKER_MODELS_FASHION_MODEL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/v1/types.pb.h"
#include "worker/compute/device.h"
#include "worker/data/fashion_mnist.h"
#include "worker/models/model.h"

namespace ps {

// How an MLP job computes, beyond its spec.
struct MlpRunOptions {
  ComputeOptions compute;  // the backend (a resolved device), GEMM precision, overlap mode
  // The job's consistency: overlap only where it lets a worker run ahead.
  v1::ConsistencySpec consistency;
  int batch_size = 64;  // examples per step: sizes the buffers allocated once at Start()
};

// Whether an MLP job overlaps communication with compute: `mode` kOn, or kAuto on a CUDA
// device; and never where the consistency mode forbids reading parameters one clock staler than
// the servers guarantee: sync, and ssp with staleness 0. (An overlapping worker computes step
// t+1 with the parameters pulled at clock t, while step t's push is still in flight; so in ssp
// with staleness s its reads lag by up to s + 1 clocks.)
bool OverlapsCommunication(OverlapMode mode, const DeviceSpec& device,
                           const v1::ConsistencySpec& consistency);

// Loads the whole training set (the runner picks each worker's shard by index) and the test
// set from `data_dir`. Weight tables are Glorot-uniform (seeded), biases zero; `optimizer` is
// the tables' server-side optimizer. The model computes on the backend of `options.compute`
// (created here). Errors: bad layers (INVALID_ARGUMENT), missing or corrupt data (NOT_FOUND,
// DATA_LOSS), no such device (FAILED_PRECONDITION).
absl::StatusOr<std::unique_ptr<Model>> MakeFashionMlp(const std::string& data_dir,
                                                      const std::vector<int>& layers,
                                                      const v1::OptimizerSpec& optimizer,
                                                      uint64_t seed,
                                                      const MlpRunOptions& options = {});

// The same model over data sets in memory (benchmarks and tests: e.g. synthetic data for a
// layer shape Fashion-MNIST does not fit). `train` and `test` must have layers.front() features
// and layers.back() classes.
absl::StatusOr<std::unique_ptr<Model>> MakeMlpModel(Dataset train, Dataset test,
                                                    const std::vector<int>& layers,
                                                    const v1::OptimizerSpec& optimizer,
                                                    uint64_t seed, const MlpRunOptions& options);

}  // namespace ps

#endif  // PS_WORKER_MODELS_FASHION_MODEL_H_
