// Sparse logistic regression over hashed binary token features (the zoo's "spam_logreg").
#ifndef PS_WORKER_MODELS_SPARSE_LOGREG_H_
#define PS_WORKER_MODELS_SPARSE_LOGREG_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/rpc_client.h"
#include "ps/v1/types.pb.h"
#include "worker/compute/compute_backend.h"
#include "worker/compute/device.h"
#include "worker/data/spam_dataset.h"
#include "worker/models/model.h"
#include "worker/models/spam_step.h"

namespace ps {

// The optimizer a spam_logreg job uses when its spec names none: the zoo registry's
// (common/zoo/spam_logreg.cc, FTRL-Proximal with alpha 1, beta 1, l1 1e-4, l2 0).
v1::OptimizerSpec DefaultSpamLogRegOptimizer();

// Held-out quality: loss and accuracy, plus the area under the ROC curve.
struct SpamEvaluation {
  StepStats stats;
  double auc = 0;  // 0.5 when the test set lacks one of the classes
};

// p(spam | x) = sigmoid(b + sum_f w_f) over the example's distinct features f. Two tables:
// table first_table_id is SPARSE, dim 1 (w_f keyed by feature id, rows created on first touch,
// zero init); table first_table_id + 1 is DENSE, 1 row of dim 1 (b). Not thread-safe.
class SparseLogReg : public Model {
 public:
  // `optimizer` applies to both tables; `seed` goes into the (zero) initializers. Without a
  // backend a training step computes on the host in double precision; with one (a GPU worker's)
  // it computes there in single precision (spam_step.h). Evaluation computes on the host.
  SparseLogReg(SpamDataset data, v1::OptimizerSpec optimizer, uint64_t seed,
               std::unique_ptr<ComputeBackend> backend = nullptr);

  // Also records `first_table_id` as the ids this model pulls and pushes: call it (as the runner
  // does, to create the tables) before Start().
  std::vector<v1::TableSpec> Tables(const std::string& job_id,
                                    uint32_t first_table_id) const override;
  int64_t num_train_examples() const override { return data_.num_train(); }

  // Checks that both tables exist with the expected shapes.
  absl::Status Start(RpcClient* client) override;
  // Pulls the batch's weights and the bias, and pushes (p - y) * grad_scale summed over the batch
  // for every feature of the batch and for the bias, with one PushPull (one clock).
  absl::StatusOr<StepStats> TrainStep(RpcClient* client, absl::Span<const int64_t> examples,
                                      float grad_scale) override;
  absl::StatusOr<StepStats> Evaluate(RpcClient* client) override;
  // Evaluate(), with the AUC.
  absl::StatusOr<SpamEvaluation> EvaluateWithAuc(RpcClient* client);

  const SpamDataset& data() const { return data_; }
  // The backend training steps compute on; null: the host.
  ComputeBackend* backend() const { return backend_.get(); }
  uint32_t weights_table_id() const { return first_table_id_; }
  uint32_t bias_table_id() const { return first_table_id_ + 1; }

 private:
  // Pulls w for `keys` (sorted, unique) and b.
  absl::Status PullWeights(RpcClient* client, absl::Span<const uint64_t> keys,
                           std::vector<float>* weights, float* bias);

  const SpamDataset data_;
  const v1::OptimizerSpec optimizer_;
  const uint64_t seed_;
  mutable uint32_t first_table_id_ = 0;  // set by Tables()
  std::vector<uint64_t> test_keys_;      // sorted unique features of the test set
  // Scratch of TrainStep, kept to avoid reallocating every step.
  std::vector<uint64_t> keys_;
  std::vector<float> weights_, grads_;
  // The step's bias gradient: a member, not a local, because the client keeps the pushed ops
  // (borrowed) for a re-send after a failover (RpcClient::FailedPushPull), read after TrainStep
  // returned.
  float bias_grad_ = 0;
  std::vector<double> margins_;
  std::unique_ptr<ComputeBackend> backend_;
  std::unique_ptr<SpamBackendStep> backend_step_;
  SpamBatch batch_;
};

// Loads `<data_dir>/messages.tsv` (80/20 split) with `hash_bits` and builds the model, training
// on `compute.device`: the host for the CPU (double precision, as ever), the CUDA backend for a
// GPU. Errors: those of SpamDataset::Load and MakeBackend, INVALID_ARGUMENT for bad hash_bits.
absl::StatusOr<std::unique_ptr<Model>> MakeSpamLogReg(const std::string& data_dir, int hash_bits,
                                                      const v1::OptimizerSpec& optimizer,
                                                      uint64_t seed,
                                                      const ComputeOptions& compute = {});

}  // namespace ps

#endif  // PS_WORKER_MODELS_SPARSE_LOGREG_H_
