// The models a worker can train, built from a job spec.
#ifndef PS_WORKER_DAEMON_MODEL_ZOO_H_
#define PS_WORKER_DAEMON_MODEL_ZOO_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/job_tables.h"  // FirstTableIdOf
#include "ps/v1/job.pb.h"
#include "worker/compute/device.h"
#include "worker/daemon/job_runner.h"
#include "worker/models/model.h"

namespace ps {

// The zoo model the spec names (common/zoo_models.h: fashion_mlp, a dense MLP on
// Fashion-MNIST; spam_logreg, sparse logistic regression on SpamAssassin), with the model's
// defaults where the spec leaves its settings, data_dir or optimizer unset, and its seed. Both
// train on the device of `compute` (a resolved device): fashion_mlp on its backend, spam_logreg
// on the host in double precision for the CPU and on the CUDA backend for a GPU (spam_step.h).
// INVALID_ARGUMENT for an unknown model or bad settings; data errors as the loaders report
// them; backend errors as MakeBackend.
absl::StatusOr<std::unique_ptr<Model>> MakeModel(const v1::JobSpec& spec,
                                                 const ComputeOptions& compute = {});

// True if this worker can build the model named `model` (every ZooModels() entry must).
bool HasBuilder(const std::string& model);

// The runner options of a spec (epochs, batch size, workers, consistency, seed, evaluation).
JobRunnerOptions RunnerOptionsOf(const v1::JobSpec& spec);

}  // namespace ps

#endif  // PS_WORKER_DAEMON_MODEL_ZOO_H_
