// Data-parallel training of an MLP on Fashion-MNIST through the parameter servers.
#ifndef PS_WORKER_TRAINER_H_
#define PS_WORKER_TRAINER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/v1/types.pb.h"
#include "worker/client.h"

namespace ps {

struct TrainerOptions {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  // Input, hidden..., classes. {784, 10} is softmax regression.
  std::vector<int> layers = {784, 128, 10};
  int epochs = 5;
  int batch_size = 64;  // per worker
  uint32_t worker_id = 0;
  int num_workers = 1;
  v1::ConsistencySpec consistency;
  v1::OptimizerSpec optimizer;
  // Tables 2l (weights of layer l) and 2l+1 (its bias) start at this id.
  uint32_t first_table_id = 1;
  uint64_t seed = 1;
  // Evaluate on the test set after every epoch (worker 0 by default).
  bool evaluate = false;
  // Print a progress line every this many steps (0: per epoch only).
  int log_every_steps = 0;

  absl::Status Validate() const;
};

struct EpochReport {
  int epoch = 0;          // 1-based
  int64_t steps = 0;      // steps this worker ran so far
  double train_loss = 0;  // mean over this worker's examples of the epoch
  double train_accuracy = 0;
  double test_loss = -1;  // -1 when not evaluated
  double test_accuracy = -1;
  double samples_per_second = 0;  // this worker
  double seconds = 0;             // epoch wall time
};

// Runs the job's training loop for one worker. Not thread-safe; one per worker.
class Trainer {
 public:
  // `client` must outlive the trainer and be connected to the job's servers.
  Trainer(TrainerOptions options, Client* client);

  // Creates the job's tables (idempotent: every worker may call it), trains, and returns the
  // last epoch's report. `on_epoch` sees every epoch's report; `on_progress` every
  // log_every_steps steps (epoch, step in epoch, steps per epoch, running loss).
  absl::StatusOr<EpochReport> Run(
      const std::function<void(const EpochReport&)>& on_epoch,
      const std::function<void(int, int64_t, int64_t, double)>& on_progress = nullptr);

 private:
  TrainerOptions options_;
  Client* const client_;
};

}  // namespace ps

#endif  // PS_WORKER_TRAINER_H_
