// What the job runner trains: a model of the zoo, with its tables and its data.
#ifndef PS_WORKER_MODELS_MODEL_H_
#define PS_WORKER_MODELS_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ps/v1/types.pb.h"
#include "client/rpc_client.h"

namespace ps {

// Loss and accuracy over some examples (sums, so that reports can be merged).
struct StepStats {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t examples = 0;
  // TrainStep of a model that overlaps communication with compute: the time the push/pull that
  // completed during the step was in flight, from start to last answer, whether the step waited
  // for it or computed meanwhile. Zero for a model that just waits for its requests: the runner
  // then counts the time it was blocked, and nothing as hidden.
  absl::Duration communication;
};

// A trainable model bound to its data set. The runner owns the loop (clocks, epochs, data
// shards, progress); the model owns the math and its own pushes and pulls. Not thread-safe.
class Model {
 public:
  virtual ~Model() = default;

  // The tables the model needs, for `job_id`; table ids start at `first_table_id` (ids are
  // unique per server across jobs). Start() and the steps use the ids of the last call.
  virtual std::vector<v1::TableSpec> Tables(const std::string& job_id,
                                            uint32_t first_table_id) const = 0;
  // Examples in the training set (all of it; the runner hands each worker its shard).
  virtual int64_t num_train_examples() const = 0;

  // Called once before the first step, after the tables exist (e.g. the first pull).
  virtual absl::Status Start(RpcClient* client) = 0;
  // One step on the given training examples (indices < num_train_examples()). Must push its
  // gradients, scaled by `grad_scale` (the runner picks 1/batch or 1/global batch), and
  // advance the client's clock exactly once (PushPull does both; PushPullAsync too, and a model
  // that overlaps may return before the answer: see Flush()).
  virtual absl::StatusOr<StepStats> TrainStep(RpcClient* client, absl::Span<const int64_t> examples,
                                              float grad_scale) = 0;
  // Loss and accuracy on the held-out set with the current parameters (pulls what it needs).
  virtual absl::StatusOr<StepStats> Evaluate(RpcClient* client) = 0;
  // Waits for requests the model still has in flight (a model that overlaps communication with
  // compute returns from TrainStep before its push has been answered) and returns their error.
  // The runner calls it when it stops, on every path; the buffers those requests use stay valid
  // until then.
  virtual absl::Status Flush() { return absl::OkStatus(); }
  // Steps whose push may still be in flight when TrainStep returns (1 for a model that
  // overlaps): a step's gradients are only known applied once that many later steps returned,
  // or after Flush().
  virtual int StepsInFlight() const { return 0; }
};

}  // namespace ps

#endif  // PS_WORKER_MODELS_MODEL_H_
