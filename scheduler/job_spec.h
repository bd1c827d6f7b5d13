// Validation of submitted job specs and their defaults.
#ifndef PS_SCHEDULER_JOB_SPEC_H_
#define PS_SCHEDULER_JOB_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ps/v1/job.pb.h"

namespace ps {

// Sane ranges of a spec's sizes (INVALID_ARGUMENT outside them; docs/operations.md lists them).
// A zoo model's own settings (layers, hash_bits) are its to check (common/zoo_models.h).
inline constexpr int kMaxWorkersPerJob = 1024;
inline constexpr int kMaxServersPerJob = 1024;
inline constexpr int kMaxEpochs = 10000;
inline constexpr int kMaxBatchSize = 65536;
inline constexpr int kMaxKeepCheckpoints = 1000;
inline constexpr int kMaxReplicas = 1;  // backups per slot (JobSpec.replication)
// Program jobs.
inline constexpr int kMaxProgramArgs = 256;          // argv entries, env entries
inline constexpr size_t kMaxProgramArgBytes = 4096;  // one argument or env value
inline constexpr int kMaxTablesPerJob = 1000;        // a job's table ids are first_id + index
inline constexpr uint32_t kMaxTableDim = 1 << 20;    // servers may cap lower (--max_dim)
inline constexpr int64_t kDefaultProgressTimeoutSeconds = 600;
inline constexpr int64_t kMaxProgramSeconds = 7 * 24 * 3600;
inline constexpr int64_t kDefaultStopGraceSeconds = 10;
// Default cap on a model's bytes (parameters and optimizer state): 4 GiB.
inline constexpr uint64_t kDefaultMaxModelBytes = uint64_t{4} << 30;

// What the scheduler's operator allows a job (SchedulerOptions fills it).
struct JobLimits {
  // A spec's checkpoint.root must, once lexically normalized, be one of these directories or lie
  // under one (absolute and normalized: see NormalPath). Empty: a spec may not name a root.
  std::vector<std::string> checkpoint_roots;
  // A job whose model (parameters and optimizer state, see ModelBytes) is larger is refused
  // with RESOURCE_EXHAUSTED naming both sizes.
  uint64_t max_model_bytes = kDefaultMaxModelBytes;
};

// The bytes the servers hold for a normalized spec's model at most: float32 parameters times
// (1 + the optimizer's state per parameter: sgd 0, momentum 1, adagrad 1, adam 2, ftrl 2).
// A zoo model: its ZooModel::parameters (fashion_mlp: weights and biases of every layer;
// spam_logreg: 2^hash_bits weights and a bias); a program: its dense tables (sparse ones grow
// as keys are touched, within the servers' per-job cap).
uint64_t ModelBytes(const v1::JobSpec& spec);

// Gives a normalized program job's tables their ids (first_id, first_id + 1, ... in order) and
// the job's id.
void AssignTableIds(const std::string& job_id, uint32_t first_id, v1::JobSpec* spec);

// `path` lexically normalized ("/a/./b/../c/" -> "/a/c"): `..` cannot climb above "/".
std::string NormalPath(absl::string_view path);

// Checks `spec` and fills its defaults in place (batch_size 64, epochs 1, layers 784,128,10,
// hash_bits 20, evaluate on, data_dir per model; a program's progress timeout and stop grace).
// A bad field is INVALID_ARGUMENT naming it. A job names a zoo model or a program with its
// tables (names unique, a kind, dim >= 1, num_rows for dense tables only).
//
// data_dir is checked for its form only (absolute, at most kMaxPathBytes, no control
// character) and stored lexically normalized: it names a directory on the worker hosts, and the
// scheduler never looks at its own disk for it (that would tell any client which paths exist on
// the scheduler's host). A worker that lacks the data reports the error in its progress, which
// fails the job with that reason.
//
// checkpoint.root, if set, is replaced by its normal form, which must lie under one of
// limits.checkpoint_roots (INVALID_ARGUMENT naming the root and the allowed ones otherwise).
absl::Status NormalizeJobSpec(v1::JobSpec* spec, const JobLimits& limits);

}  // namespace ps

#endif  // PS_SCHEDULER_JOB_SPEC_H_
