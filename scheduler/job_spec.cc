#include "scheduler/job_spec.h"

#include <filesystem>
#include <system_error>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/optimizer_spec.h"
#include "common/printable.h"
#include "common/status_macros.h"
#include "common/table_features.h"
#include "common/zoo_models.h"

namespace ps {
namespace {

constexpr int kDefaultBatchSize = 64;
constexpr int kDefaultEpochs = 1;

constexpr int kDefaultKeepCheckpoints = 3;

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("spec.", message));
}

// True if `path` is `root` or lies under it (both normal).
bool IsUnder(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  return absl::StartsWith(path, root) && (path.size() == root.size() || path[root.size()] == '/');
}

// A spec's checkpoint.root: absolute, and under an allowed root once normalized (so that
// "/allowed/../etc" is "/etc" and refused); stored normalized.
absl::Status CheckCheckpointRoot(v1::CheckpointPolicy* checkpoint, const JobLimits& limits) {
  if (checkpoint->root().empty()) return absl::OkStatus();
  PS_RETURN_IF_ERROR(CheckClientText("spec.checkpoint.root", checkpoint->root(), kMaxPathBytes,
                                     /*ascii_only=*/false));
  if (!std::filesystem::path(checkpoint->root()).is_absolute()) {
    return Invalid(absl::StrCat("checkpoint.root = \"", checkpoint->root(),
                                "\" must be an absolute path (servers resolve it)"));
  }
  const std::string root = NormalPath(checkpoint->root());
  for (const std::string& allowed : limits.checkpoint_roots) {
    if (IsUnder(root, allowed)) {
      checkpoint->set_root(root);
      return absl::OkStatus();
    }
  }
  return Invalid(absl::StrCat(
      "checkpoint.root = \"", checkpoint->root(), "\" (", root,
      ") is not under a checkpoint root this scheduler allows (",
      limits.checkpoint_roots.empty() ? "none" : absl::StrJoin(limits.checkpoint_roots, ", "),
      "; ps_scheduler --checkpoint_roots)"));
}

// Optimizer state per parameter (the server's row layout).
int StatePerParameter(v1::OptimizerSpec::Kind kind) {
  switch (kind) {
    case v1::OptimizerSpec::SGD:
      return 0;
    case v1::OptimizerSpec::MOMENTUM:
    case v1::OptimizerSpec::ADAGRAD:
      return 1;
    default:  // ADAM (m, v), FTRL (z, n)
      return 2;
  }
}

std::string GiB(uint64_t bytes) {
  return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / (uint64_t{1} << 30));
}

// Checks `value` is in lo..hi; `zero_means` documents a default taken by 0 ("" if none).
absl::Status CheckRange(const char* field, int64_t value, int64_t lo, int64_t hi,
                        const std::string& zero_means = "") {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return Invalid(absl::StrCat(field, " = ", value, " must be in ", lo, "..", hi,
                              zero_means.empty() ? "" : absl::StrCat(" (0: ", zero_means, ")")));
}

bool IsEnvName(absl::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) {
      return false;
    }
  }
  return true;
}

// A program job's command: argv[0] an absolute path or a bare name (looked up in the worker's
// PATH); bounded, printable arguments; environment names of letters, digits and '_' outside the
// daemon's PS_ space. Whether argv[0] exists and is executable is the worker's to say.
absl::Status CheckProgram(v1::ProgramSpec* program) {
  if (program->argv().empty()) {
    return Invalid("program.argv is empty: name the command to run (argv[0]) and its arguments");
  }
  if (program->argv_size() > kMaxProgramArgs) {
    return Invalid(absl::StrCat("program.argv has ", program->argv_size(), " entries; at most ",
                                kMaxProgramArgs));
  }
  for (int i = 0; i < program->argv_size(); ++i) {
    PS_RETURN_IF_ERROR(CheckClientText(absl::StrCat("spec.program.argv[", i, "]"), program->argv(i),
                                       kMaxProgramArgBytes, false));
  }
  const std::string& command = program->argv(0);
  if (command.empty()) return Invalid("program.argv[0] is empty");
  if (command.find('/') != std::string::npos && command[0] != '/') {
    return Invalid(absl::StrCat("program.argv[0] = \"", Printable(command, 64),
                                "\" must be an absolute path or a name found in the worker's PATH "
                                "(a relative path would depend on the worker's directory)"));
  }
  if (program->env_size() > kMaxProgramArgs) {
    return Invalid(absl::StrCat("program.env has ", program->env_size(), " entries; at most ",
                                kMaxProgramArgs));
  }
  for (const auto& [name, value] : program->env()) {
    if (!IsEnvName(name) || name.size() > kMaxNameBytes) {
      return Invalid(absl::StrCat("program.env name \"", Printable(name, 64),
                                  "\" must be letters, digits and '_', not starting with a digit"));
    }
    if (absl::StartsWith(name, "PS_")) {
      return Invalid(
          absl::StrCat("program.env name ", name,
                       " starts with PS_: those variables are set by the worker daemon"));
    }
    PS_RETURN_IF_ERROR(CheckClientText(absl::StrCat("spec.program.env[", name, "]"), value,
                                       kMaxProgramArgBytes, false));
  }
  if (!program->working_dir().empty()) {
    PS_RETURN_IF_ERROR(
        CheckClientText("spec.program.working_dir", program->working_dir(), kMaxPathBytes, false));
    if (program->working_dir()[0] != '/') {
      return Invalid(absl::StrCat("program.working_dir = \"", program->working_dir(),
                                  "\" must be an absolute path"));
    }
    program->set_working_dir(NormalPath(program->working_dir()));
  }
  PS_RETURN_IF_ERROR(CheckRange("program.max_restarts", program->max_restarts(), 0, 100));
  if (program->progress_timeout_seconds() == 0) {
    program->set_progress_timeout_seconds(kDefaultProgressTimeoutSeconds);
  }
  if (program->progress_timeout_seconds() < -1 ||
      program->progress_timeout_seconds() > kMaxProgramSeconds) {
    return Invalid(
        absl::StrCat("program.progress_timeout_seconds = ", program->progress_timeout_seconds(),
                     " must be in 1..", kMaxProgramSeconds, " (0: ", kDefaultProgressTimeoutSeconds,
                     "; -1: never)"));
  }
  if (program->stop_grace_seconds() == 0) program->set_stop_grace_seconds(kDefaultStopGraceSeconds);
  return CheckRange("program.stop_grace_seconds", program->stop_grace_seconds(), 1, 3600);
}

// A program job's tables: names unique and valid, a kind, dim >= 1, rows for dense tables only,
// known initializer and optimizer kinds. table_id and job_id are the scheduler's to set.
absl::Status CheckTables(v1::JobSpec* spec) {
  if (spec->tables_size() > kMaxTablesPerJob) {
    return Invalid(
        absl::StrCat("tables has ", spec->tables_size(), " entries; at most ", kMaxTablesPerJob));
  }
  absl::flat_hash_set<std::string> names;
  for (int i = 0; i < spec->tables_size(); ++i) {
    v1::TableSpec& t = *spec->mutable_tables(i);
    const std::string field = absl::StrCat("tables[", i, "]");
    PS_RETURN_IF_ERROR(CheckName(absl::StrCat("spec.", field, ".name"), t.name(), 1));
    const std::string which = absl::StrCat(field, " (\"", t.name(), "\")");
    if (!names.insert(t.name()).second) {
      return Invalid(absl::StrCat(which, ": another table has the name \"", t.name(), "\""));
    }
    if (t.table_id() != 0 || !t.job_id().empty()) {
      return Invalid(absl::StrCat(which,
                                  ": table_id and job_id are assigned by the scheduler; "
                                  "leave them out"));
    }
    if (t.kind() != v1::DENSE && t.kind() != v1::SPARSE) {
      return Invalid(absl::StrCat(which, ": kind must be DENSE or SPARSE"));
    }
    if (t.dim() < 1 || t.dim() > kMaxTableDim) {
      return Invalid(absl::StrCat(which, ": dim = ", t.dim(), " must be in 1..", kMaxTableDim));
    }
    if (t.kind() == v1::DENSE && t.num_rows() < 1) {
      return Invalid(absl::StrCat(which, ": a DENSE table needs num_rows >= 1"));
    }
    if (t.kind() == v1::SPARSE && t.num_rows() != 0) {
      return Invalid(absl::StrCat(which, ": num_rows is for DENSE tables (a SPARSE one grows)"));
    }
    if (!v1::InitializerSpec::Kind_IsValid(t.initializer().kind())) {
      return Invalid(absl::StrCat(which, ": initializer.kind = ", t.initializer().kind(),
                                  " is not an initializer"));
    }
    if (!v1::OptimizerSpec::Kind_IsValid(t.optimizer().kind())) {
      return Invalid(
          absl::StrCat(which, ": optimizer.kind = ", t.optimizer().kind(), " is not an optimizer"));
    }
    if (absl::Status s = ValidateOptimizerSpec(t.optimizer()); !s.ok()) {
      return Invalid(absl::StrCat(which, ": ", s.message()));
    }
    if (absl::Status s = ValidateTableFeatures(t); !s.ok()) {
      return Invalid(absl::StrCat(which, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void AssignTableIds(const std::string& job_id, uint32_t first_id, v1::JobSpec* spec) {
  for (int i = 0; i < spec->tables_size(); ++i) {
    spec->mutable_tables(i)->set_table_id(first_id + static_cast<uint32_t>(i));
    spec->mutable_tables(i)->set_job_id(job_id);
  }
}

uint64_t ModelBytes(const v1::JobSpec& spec) {
  if (spec.has_program()) {
    // Dense tables only: sparse ones grow with the keys touched (the servers cap those per job).
    uint64_t bytes = 0;
    for (const v1::TableSpec& t : spec.tables()) {
      if (t.kind() != v1::DENSE) continue;
      const uint64_t parameters = static_cast<uint64_t>(t.num_rows()) * t.dim();
      bytes += parameters * sizeof(float) * (1 + StatePerParameter(t.optimizer().kind()));
    }
    return bytes;
  }
  const ZooModel* model = FindZooModel(spec.model());
  if (model == nullptr) return 0;  // refused by NormalizeJobSpec
  const uint64_t parameters = model->parameters(spec);
  v1::OptimizerSpec::Kind optimizer = model->default_optimizer().kind();
  if (spec.has_optimizer()) optimizer = spec.optimizer().kind();
  return parameters * sizeof(float) * (1 + StatePerParameter(optimizer));
}

std::string NormalPath(absl::string_view path) {
  std::string normal = std::filesystem::path(std::string(path)).lexically_normal().string();
  while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  return normal;
}

namespace {

// NormalizeJobSpec's steps, in the order it takes them (the first error wins).

// A zoo model or a program, and a program's tables.
absl::Status CheckWhatRuns(v1::JobSpec* spec, const ZooModel* model) {
  const bool program = spec->has_program();
  if (program && !spec->model().empty()) {
    return Invalid(absl::StrCat("a job runs a model or a program, not both (model = \"",
                                Printable(spec->model(), 64), "\")"));
  }
  if (!program && model == nullptr) {
    return Invalid(absl::StrCat(spec->model().empty() ? "neither model nor program is set: " : "",
                                "model must be one of the zoo's (", ZooModelNames(),
                                ") or give a program, not \"", Printable(spec->model(), 64), "\""));
  }
  if (!program && spec->tables_size() > 0) {
    return Invalid("tables are declared by program jobs; a zoo model makes its own");
  }
  if (!program) return absl::OkStatus();
  PS_RETURN_IF_ERROR(CheckProgram(spec->mutable_program()));
  PS_RETURN_IF_ERROR(CheckTables(spec));
  if (spec->tables().empty()) {
    return Invalid("a program job declares its tables (tables { name: ... kind: ... dim: ... })");
  }
  return absl::OkStatus();
}

// Names (stored, listed and printed: printable ASCII, bounded), workers, servers, batch size
// and epochs, with their defaults.
absl::Status CheckScale(v1::JobSpec* spec) {
  PS_RETURN_IF_ERROR(CheckClientText("spec.name", spec->name(), kMaxNameBytes, true));
  PS_RETURN_IF_ERROR(CheckClientText("spec.from_checkpoint.job_id",
                                     spec->from_checkpoint().job_id(), kMaxNameBytes, true));
  PS_RETURN_IF_ERROR(CheckRange("num_workers", spec->num_workers(), 1, kMaxWorkersPerJob));
  PS_RETURN_IF_ERROR(
      CheckRange("num_servers", spec->num_servers(), 0, kMaxServersPerJob, "every live server"));
  PS_RETURN_IF_ERROR(CheckRange("batch_size", spec->batch_size(), 0, kMaxBatchSize,
                                absl::StrCat(kDefaultBatchSize)));
  if (spec->batch_size() == 0) spec->set_batch_size(kDefaultBatchSize);
  PS_RETURN_IF_ERROR(
      CheckRange("epochs", spec->epochs(), 0, kMaxEpochs, absl::StrCat(kDefaultEpochs)));
  if (spec->epochs() == 0) spec->set_epochs(kDefaultEpochs);
  return absl::OkStatus();
}

// replication.replicas: 0 or 1, and a backup needs a server of its own: at most num_servers - 1
// (so a job with replicas names its servers; "every live server" could be one).
absl::Status CheckReplication(const v1::JobSpec& spec) {
  const int replicas = spec.replication().replicas();
  PS_RETURN_IF_ERROR(CheckRange("replication.replicas", replicas, 0, kMaxReplicas, "none"));
  if (replicas == 0) return absl::OkStatus();
  // A backup's rows share its server's tables: under a row cap they would evict its own.
  for (int i = 0; i < spec.tables_size(); ++i) {
    const v1::TableSpec& t = spec.tables(i);
    if (t.eviction().has_max_rows() || t.tier().disk()) {
      return Invalid(absl::StrCat("replication.replicas = ", replicas, ": tables[", i, "] (\"",
                                  t.name(),
                                  "\") has eviction.max_rows or a disk tier, which replicas do "
                                  "not allow (backups' rows would evict the server's own)"));
    }
  }
  if (spec.has_program()) {
    // A program configures its servers with its job's credential, which may not name where
    // a server sends the job's rows (the servers forward with the cluster token).
    return Invalid("replication.replicas is not available for program jobs yet");
  }
  if (spec.num_servers() == 0) {
    return Invalid(absl::StrCat("replication.replicas = ", replicas,
                                " needs num_servers (at least ", replicas + 1,
                                "): a backup lives on another server than its primary"));
  }
  if (replicas > spec.num_servers() - 1) {
    return Invalid(absl::StrCat("replication.replicas = ", replicas,
                                " must be at most num_servers - 1 = ", spec.num_servers() - 1,
                                ": a backup lives on another server than its primary"));
  }
  return absl::OkStatus();
}

// The optimizer, consistency mode, learning-rate schedule and data assignment.
absl::Status CheckTraining(v1::JobSpec* spec) {
  if (spec->has_optimizer() && !v1::OptimizerSpec::Kind_IsValid(spec->optimizer().kind())) {
    return Invalid(
        absl::StrCat("optimizer.kind = ", spec->optimizer().kind(), " is not an optimizer"));
  }
  if (spec->has_optimizer()) PS_RETURN_IF_ERROR(ValidateOptimizerSpec(spec->optimizer()));
  const v1::ConsistencySpec& consistency = spec->consistency();
  if (!v1::ConsistencySpec::Mode_IsValid(consistency.mode())) {
    return Invalid(absl::StrCat("consistency.mode = ", consistency.mode(), " is not a mode"));
  }
  const v1::LearningRateSchedule& lr = spec->lr_schedule();
  if (!v1::LearningRateSchedule::Kind_IsValid(lr.kind())) {
    return Invalid(absl::StrCat("lr_schedule.kind = ", lr.kind(), " is not a schedule"));
  }
  if (!(lr.gamma() >= 0 && lr.gamma() <= 1)) {
    return Invalid(absl::StrCat("lr_schedule.gamma = ", lr.gamma(), " must be in [0, 1] (0: 0.1)"));
  }
  PS_RETURN_IF_ERROR(CheckRange("lr_schedule.step_epochs", lr.step_epochs(), 0, kMaxEpochs, "1"));
  if (!(lr.final_fraction() >= 0 && lr.final_fraction() <= 1)) {
    return Invalid(
        absl::StrCat("lr_schedule.final_fraction = ", lr.final_fraction(), " must be in [0, 1]"));
  }
  if (consistency.mode() == v1::ConsistencySpec::SSP && consistency.staleness() < 0) {
    return Invalid(
        absl::StrCat("consistency.staleness = ", consistency.staleness(), " must be >= 0"));
  }
  if (!v1::DataAssignment_IsValid(spec->data_assignment())) {
    return Invalid(
        absl::StrCat("data_assignment = ", spec->data_assignment(), " is not a data assignment"));
  }
  const bool sync = consistency.mode() == v1::ConsistencySpec::SYNC;
  if (spec->data_assignment() == v1::DATA_ASSIGNMENT_DEFAULT) {
    spec->set_data_assignment(sync || spec->has_program() ? v1::STATIC : v1::DYNAMIC);
  }
  if (spec->data_assignment() == v1::DYNAMIC && sync) {
    return Invalid(
        "data_assignment = DYNAMIC needs consistency ssp or async: a sync job waits for every "
        "worker at every clock, so a faster worker has nothing more to take (use STATIC)");
  }
  spec->mutable_consistency()->set_data_clocks(spec->data_assignment() == v1::DYNAMIC);
  return absl::OkStatus();
}

// A zoo model's own settings (its layers, hash_bits, ...), which a program job must not set.
absl::Status NormalizeModel(v1::JobSpec* spec, const ZooModel* model) {
  if (spec->has_program()) {
    if (spec->layers_size() > 0 || spec->hash_bits() != 0) {
      return Invalid("layers and hash_bits are zoo models' settings; a program job has tables");
    }
  } else {
    PS_RETURN_IF_ERROR(model->normalize(spec));
  }
  if (!spec->has_evaluate()) spec->set_evaluate(true);
  return absl::OkStatus();
}

absl::Status CheckCheckpointPolicy(v1::JobSpec* spec, const JobLimits& limits) {
  v1::CheckpointPolicy& checkpoint = *spec->mutable_checkpoint();
  if (checkpoint.every_steps() < 0) {
    return Invalid(absl::StrCat("checkpoint.every_steps = ", checkpoint.every_steps(),
                                " must be >= 0 (0: off)"));
  }
  if (checkpoint.every_seconds() < 0) {
    return Invalid(absl::StrCat("checkpoint.every_seconds = ", checkpoint.every_seconds(),
                                " must be >= 0 (0: off)"));
  }
  PS_RETURN_IF_ERROR(CheckRange("checkpoint.keep_last", checkpoint.keep_last(), 0,
                                kMaxKeepCheckpoints, absl::StrCat(kDefaultKeepCheckpoints)));
  if (checkpoint.keep_last() == 0) checkpoint.set_keep_last(kDefaultKeepCheckpoints);
  return CheckCheckpointRoot(&checkpoint, limits);
}

// RESOURCE_EXHAUSTED past the scheduler's --max_model_bytes.
absl::Status CheckModelFits(const v1::JobSpec& spec, const JobLimits& limits,
                            const ZooModel* model) {
  const uint64_t bytes = ModelBytes(spec);
  if (bytes <= limits.max_model_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "spec: the model needs ", bytes, " bytes (", GiB(bytes),
      ", parameters and optimizer state), over the scheduler's cap of ", limits.max_model_bytes,
      " bytes (", GiB(limits.max_model_bytes), ", ps_scheduler --max_model_bytes); use ",
      spec.has_program() ? "smaller dense tables" : model->smaller, " or ask the operator"));
}

absl::Status NormalizeRecovery(v1::JobSpec* spec) {
  if (!v1::RecoveryMode_IsValid(spec->recovery())) {
    return Invalid(absl::StrCat("recovery = ", spec->recovery(), " is not a recovery mode"));
  }
  if (spec->recovery() == v1::RECOVERY_DEFAULT) {
    spec->set_recovery(spec->consistency().mode() == v1::ConsistencySpec::SYNC
                           ? v1::ROLLBACK
                           : v1::RESTORE_LOST_SLOTS);
  }
  if (spec->has_from_checkpoint() && spec->from_checkpoint().job_id().empty()) {
    return Invalid("from_checkpoint.job_id is empty");
  }
  return absl::OkStatus();
}

// Its form only: whether it exists is the workers' to say (see the header). A program's data
// is its own business.
absl::Status NormalizeDataDir(v1::JobSpec* spec, const ZooModel* model) {
  if (spec->has_program() && spec->data_dir().empty()) return absl::OkStatus();
  if (spec->data_dir().empty()) spec->set_data_dir(model->default_data_dir);
  PS_RETURN_IF_ERROR(
      CheckClientText("spec.data_dir", spec->data_dir(), kMaxPathBytes, /*ascii_only=*/false));
  if (!std::filesystem::path(spec->data_dir()).is_absolute()) {
    return Invalid(absl::StrCat("data_dir = \"", spec->data_dir(),
                                "\" must be an absolute path (every worker host resolves it)"));
  }
  spec->set_data_dir(NormalPath(spec->data_dir()));
  return absl::OkStatus();
}

}  // namespace

absl::Status NormalizeJobSpec(v1::JobSpec* spec, const JobLimits& limits) {
  const ZooModel* model = spec->has_program() ? nullptr : FindZooModel(spec->model());
  PS_RETURN_IF_ERROR(CheckWhatRuns(spec, model));
  PS_RETURN_IF_ERROR(CheckScale(spec));
  PS_RETURN_IF_ERROR(CheckReplication(*spec));
  PS_RETURN_IF_ERROR(CheckTraining(spec));
  PS_RETURN_IF_ERROR(NormalizeModel(spec, model));
  PS_RETURN_IF_ERROR(CheckCheckpointPolicy(spec, limits));
  PS_RETURN_IF_ERROR(CheckModelFits(*spec, limits, model));
  PS_RETURN_IF_ERROR(NormalizeRecovery(spec));
  return NormalizeDataDir(spec, model);
}

}  // namespace ps
