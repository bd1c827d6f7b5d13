// psctl: the command-line client of ps_scheduler (nodes, submit, status, list, cancel, events,
// checkpoint, checkpoints, restore).
//
// Flags may come before or after the command (`psctl status job-1 --watch`). psctl parses them
// itself, with Abseil flags as the registry, so that every usage error exits with 2 (Abseil's
// parser exits with 1) and --help exits with 0.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "common/tls_flags.h"
#include "common/version.h"
#include "common/zoo_models.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "ps/v1/scheduler.grpc.pb.h"
#include "tools/psctl/job_format.h"
#include "tools/psctl/psctl_commands.h"

ABSL_FLAG(std::string, scheduler, "",
          "scheduler host:port (default: $PS_SCHEDULER, else localhost:7000)");
ABSL_FLAG(std::string, output, "text", "text | json (protobuf's JSON of the scheduler's answer)");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(5),
          "deadline of one request to the scheduler, connecting included");
ABSL_FLAG(std::string, token_file, "",
          "file holding the token to present (one line, mode 600): the admin token for submit, "
          "cancel, checkpoint and restore, the cluster token or the admin token for the rest. "
          "Default: $PS_TOKEN; neither: no token");
ABSL_FLAG(bool, watch, false, "status: follow the job until it ends");
ABSL_FLAG(int, worker, -1, "logs: this worker's output only (its id in the job; -1: every worker)");
ABSL_FLAG(int, lines, 20, "logs: the last this many lines of each worker's output (at most 100)");

// checkpoint and restore.
ABSL_FLAG(bool, wait, true,
          "checkpoint: wait until it is complete or failed; drain: until no job uses the node "
          "(--nowait: do not)");
ABSL_FLAG(absl::Duration, wait_timeout, absl::Minutes(10),
          "checkpoint, drain: give up waiting after this long (exit 1)");
ABSL_FLAG(uint64_t, checkpoint, 0, "restore: the checkpoint id (0: the latest complete)");

// submit: each overrides the job file's field when given.
ABSL_FLAG(std::string, name, "", "job name");
ABSL_FLAG(std::string, model, "", "a model of the zoo (listed below)");
ABSL_FLAG(std::string, layers, "", "fashion_mlp layer sizes, inputs first, e.g. 784,128,10");
ABSL_FLAG(std::string, data_dir, "", "data set directory on every worker host");
ABSL_FLAG(int, num_workers, 0, "workers training the job");
ABSL_FLAG(int, num_servers, 0, "servers holding the job's slots (0: every live server)");
ABSL_FLAG(int, epochs, 0, "passes over the data set");
ABSL_FLAG(int, batch_size, 0, "examples per step and worker");
ABSL_FLAG(std::string, consistency, "", "sync | ssp | async");
ABSL_FLAG(int, staleness, 0, "ssp: clocks a worker may run ahead of the slowest");
ABSL_FLAG(std::string, data_assignment, "",
          "static | dynamic: how workers split an epoch (default: dynamic for ssp and async, "
          "static for sync)");
ABSL_FLAG(std::string, optimizer, "", "sgd | momentum | adagrad | adam | ftrl");
ABSL_FLAG(double, learning_rate, 0, "the optimizer's learning rate (ftrl: alpha)");
ABSL_FLAG(int, hash_bits, 0, "spam_logreg: 2^hash_bits hashed features");
ABSL_FLAG(uint64_t, seed, 0, "seed of the initial weights and of the data order");
ABSL_FLAG(bool, evaluate, true, "evaluate on the held-out set every epoch");
ABSL_FLAG(int64_t, checkpoint_every_steps, 0,
          "checkpoint at every clock that is a multiple of this (dynamic data assignment: the "
          "first clock past each multiple; 0: off)");
ABSL_FLAG(int64_t, checkpoint_every_seconds, 0,
          "checkpoint at the first clock this many seconds after the last (0: off)");
ABSL_FLAG(int32_t, checkpoint_keep, 0, "complete checkpoints kept, older ones pruned (0: 3)");
ABSL_FLAG(std::string, checkpoint_root, "",
          "where servers write checkpoints, an absolute path (default: the scheduler's)");
ABSL_FLAG(std::string, recovery, "", "when a server dies: rollback | restore_lost_slots | default");
ABSL_FLAG(int, replicas, 0,
          "backups of each slot on other servers, 0 or 1 (needs --num_servers > replicas)");
ABSL_FLAG(std::string, from_checkpoint, "",
          "start from a checkpoint: JOB (its latest complete one) or JOB:ID");

namespace {

using ps::psctl::Commands;
using ps::psctl::kOk;
using ps::psctl::kUsage;
using ps::v1::JobSpec;

constexpr char kUsageText[] = R"(psctl: the command-line client of the parameter-server scheduler.

Usage: psctl [--scheduler=host:port] [--output=text|json] COMMAND [ARGS] [FLAGS]

Commands:
  nodes                  the cluster's nodes: id, role, state, address, metrics address,
                         host/pid, heartbeat, job, version (and the scheduler's metrics address)
  submit [FILE] [FLAGS]  submit a job (FILE: a ps.v1.JobSpec textproto; the submit flags
                         below override its fields); prints the job id alone on stdout:
                           JOB=$(psctl submit deploy/jobs/fashion_mlp.textproto)
                         A program job's relative program.working_dir is made absolute
                         against the directory psctl runs in
  status JOB [--watch]   state, reason, placement, progress and ETA of a job, and for each
                         table with a codec the compression its servers achieved; --watch
                         follows it with a live progress line until it ends, then prints the
                         final line
  list                   one line per job
  cancel JOB             cancel a job
  events JOB             the job's event history
  logs JOB [--worker=N] [--lines=20]
                         a program job: the last lines of each worker's program output (stdout
                         and stderr, as its worker daemon last sent them; the full log is the
                         file named, on the worker host); a zoo job: its events
  checkpoint JOB [--nowait] [--wait_timeout=10m]
                         ask the running job for a checkpoint at its next step and wait
                         until it is complete ("checkpoint 7 of job-3 complete: clock 1400,
                         203530 rows, 117.4 MiB, 3.2s") or failed
  checkpoints JOB        the job's checkpoints: id, state, clock, time taken, duration, size,
                         rows, shards; then the latest complete one
  restore JOB [--checkpoint=ID]
                         roll a running job back to a complete checkpoint (default: the latest);
                         for an ended job the scheduler submits a new job from it instead: its
                         id goes alone to stdout, like submit
  drain NODE [--nowait]  maintenance of a server (NODE: its id in psctl nodes): it gets no new
                         job, and each running job on it takes a checkpoint, then moves the
                         server's slots to others, restored from it (a sync job rolls back to
                         that checkpoint only); waits until no job uses the server, which can
                         then be stopped
  tables JOB             each of a running job's tables (from its spec) on each of its servers,
                         as the server counts it: storage, rows, bytes (values, optimizer
                         state, row header and index), bytes per row, and the rows admitted,
                         rejected (pushes of keys not admitted yet), evicted (eviction.max_rows)
                         and expired (eviction.ttl_seconds), and per direction (PUSH, PULL) the
                         table's codec and the compression it achieved on that server (float32
                         bytes / bytes on the wire: "topk 24.60x"; "int8+delta 40.1x": delta
                         pulls; "none": no codec), and for a table with a disk tier (tier.disk)
                         its rows and bytes on disk, the % of keys found in RAM, the rows
                         read back from disk, the rows prefetches pin in RAM now and the keys
                         prefetches skipped (over the pin bound or the cap) ("-" without a
                         tier); asks the servers directly
  help                   this text

The scheduler is --scheduler, else $PS_SCHEDULER, else localhost:7000.
--output=json prints the scheduler's answer as protobuf JSON, one document (status --watch:
one compact document per line and change).

Exit codes:
  0  ok (status --watch: the job SUCCEEDED)
  1  the scheduler refused the request (the message, with its gRPC code, goes to stderr;
     UNIMPLEMENTED: the scheduler is too old for the command), or the watched job ended
     FAILED or CANCELLED, or the checkpoint waited for failed or was not complete within
     --wait_timeout, or (tables) a server did not answer for a table (the rest is printed)
  2  usage error: unknown command or flag, bad flag value, unreadable or unparsable job file
  3  the scheduler is unreachable (UNAVAILABLE or DEADLINE_EXCEEDED); status --watch retries
     for a minute first, so a scheduler restart does not end the watch
)";

// The flags that only `submit` takes.
const char* const kSubmitFlags[] = {"name",        "model",       "layers",    "data_dir",
                                    "num_workers", "num_servers", "epochs",    "batch_size",
                                    "consistency", "staleness",   "optimizer", "learning_rate",
                                    "hash_bits",   "seed",        "evaluate",  "data_assignment"};
// The submit flags of checkpoints and recovery.
const char* const kCheckpointSubmitFlags[] = {"checkpoint_every_steps",
                                              "checkpoint_every_seconds",
                                              "checkpoint_keep",
                                              "checkpoint_root",
                                              "recovery",
                                              "from_checkpoint",
                                              "replicas"};

bool IsSubmitFlag(const std::string& name) {
  for (const char* f : kSubmitFlags) {
    if (name == f) return true;
  }
  for (const char* f : kCheckpointSubmitFlags) {
    if (name == f) return true;
  }
  return false;
}

void PrintFlag(std::ostream& out, const absl::CommandLineFlag& flag, bool with_default) {
  std::string line = absl::StrCat("  --", flag.Name());
  if (line.size() < 28) line.resize(28, ' ');
  absl::StrAppend(&line, " ", flag.Help());
  if (with_default && !flag.DefaultValue().empty()) {
    absl::StrAppend(&line, " (default: ", flag.DefaultValue(), ")");
  }
  out << line << "\n";
}

void PrintHelp(std::ostream& out) {
  out << kUsageText << "\nFlags:\n";
  auto flags = absl::GetAllFlags();
  for (const char* name : {"scheduler", "output", "timeout", "watch", "worker", "lines"}) {
    PrintFlag(out, *flags.at(name), true);
  }
  out << "\nsecurity flags (certificates and the token are read once per command):\n";
  for (const char* name : {"tls_ca", "tls_cert", "tls_key", "token_file"}) {
    PrintFlag(out, *flags.at(name), true);
  }
  out << "\nsubmit flags (each overrides the job file's field when given):\n";
  for (const char* name : kSubmitFlags) PrintFlag(out, *flags.at(name), false);
  for (const char* name : kCheckpointSubmitFlags) PrintFlag(out, *flags.at(name), false);
  out << "\nthe zoo's models (--model): what each trains; its default data_dir\n";
  for (const ps::ZooModel* m : ps::ZooModels()) {
    out << "  " << m->name << ": " << m->summary << "; " << m->default_data_dir << "\n";
  }
  out << "\ncheckpoint, restore and drain flags:\n";
  for (const char* name : {"wait", "wait_timeout", "checkpoint"}) {
    PrintFlag(out, *flags.at(name), true);
  }
}

// Whether `flag` may be given with `command`: the flags of one command only are refused by the
// others.
bool FlagAppliesTo(const std::string& flag, const std::string& command) {
  if (IsSubmitFlag(flag)) return command == "submit";
  if (flag == "watch") return command == "status";
  if (flag == "worker" || flag == "lines") return command == "logs";
  if (flag == "wait" || flag == "wait_timeout")
    return command == "checkpoint" || command == "drain";
  if (flag == "checkpoint") return command == "restore";
  return true;
}

// Whether `flag` is one of psctl's (not one of a library's). Abseil strips the leading '/' of
// the file name it reports.
bool IsOwnFlag(const absl::CommandLineFlag& flag) {
  return absl::EndsWith(__FILE__, flag.Filename()) ||
         absl::EndsWith(flag.Filename(), "common/tls_flags.cc");
}

// The command line: positional arguments and the names of the flags given.
struct CommandLine {
  std::vector<std::string> args;
  std::set<std::string> given;
  bool help = false;
  bool version = false;
};

// Parses argv into `psctl`'s flags (any position; --flag=value, --flag value, --bool,
// --nobool; "--" ends the flags).
absl::StatusOr<CommandLine> ParseCommandLine(int argc, char** argv) {
  CommandLine cl;
  bool flags_done = false;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (flags_done || arg.size() < 2 || arg[0] != '-') {
      cl.args.emplace_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    const size_t eq = arg.find('=');
    const bool has_value = eq != absl::string_view::npos;
    absl::string_view name = arg.substr(0, eq);
    std::string value = has_value ? std::string(arg.substr(eq + 1)) : "";
    if (name == "help" || name == "h" || name == "helpfull") {
      cl.help = true;
      continue;
    }
    if (name == "version") {
      cl.version = true;
      continue;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag != nullptr && !IsOwnFlag(*flag)) flag = nullptr;
    bool negated = false;
    if (flag == nullptr && !has_value && absl::ConsumePrefix(&name, "no")) {
      flag = absl::FindCommandLineFlag(name);
      negated = true;
      if (flag != nullptr && (!IsOwnFlag(*flag) || !flag->IsOfType<bool>())) {
        flag = nullptr;
      }
      if (flag == nullptr) name = absl::string_view(arg);
    }
    if (flag == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    if (flag->IsOfType<bool>()) {
      if (!has_value) value = negated ? "false" : "true";
    } else if (!has_value) {
      if (i + 1 >= argc)
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      value = argv[++i];
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", error));
    }
    cl.given.insert(std::string(flag->Name()));
  }
  return cl;
}

// ---- the job file -----------------------------------------------------------------------

// Collects TextFormat's errors as "FILE:LINE:COLUMN: message".
class TextErrors : public google::protobuf::io::ErrorCollector {
 public:
  explicit TextErrors(std::string file) : file_(std::move(file)) {}
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (!text_.empty()) text_ += "\n";
    absl::StrAppend(&text_, file_, ":", line + 1, ":", column + 1, ": ", message);
  }
  const std::string& text() const { return text_; }

 private:
  std::string file_;
  std::string text_;
};

absl::StatusOr<JobSpec> ReadJobFile(const std::string& file) {
  std::ifstream in(file);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", file, ": ", strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  JobSpec spec;
  TextErrors errors(file);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text.str(), &spec)) {
    return absl::InvalidArgumentError(
        errors.text().empty() ? absl::StrCat(file, ": not a ps.v1.JobSpec") : errors.text());
  }
  return spec;
}

// Applies the submit flags that were given on the command line to `spec`.
absl::Status ApplySubmitFlags(const std::set<std::string>& given, JobSpec& spec) {
  auto has = [&](const char* name) { return given.count(name) > 0; };
  if (has("name")) spec.set_name(absl::GetFlag(FLAGS_name));
  if (has("model")) spec.set_model(absl::GetFlag(FLAGS_model));
  if (has("data_dir")) spec.set_data_dir(absl::GetFlag(FLAGS_data_dir));
  if (has("num_workers")) spec.set_num_workers(absl::GetFlag(FLAGS_num_workers));
  if (has("num_servers")) spec.set_num_servers(absl::GetFlag(FLAGS_num_servers));
  if (has("replicas")) spec.mutable_replication()->set_replicas(absl::GetFlag(FLAGS_replicas));
  if (has("epochs")) spec.set_epochs(absl::GetFlag(FLAGS_epochs));
  if (has("batch_size")) spec.set_batch_size(absl::GetFlag(FLAGS_batch_size));
  if (has("hash_bits")) spec.set_hash_bits(absl::GetFlag(FLAGS_hash_bits));
  if (has("seed")) spec.set_seed(absl::GetFlag(FLAGS_seed));
  if (has("evaluate")) spec.set_evaluate(absl::GetFlag(FLAGS_evaluate));
  if (has("layers")) {
    spec.clear_layers();
    for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_layers), ',')) {
      int units = 0;
      if (!absl::SimpleAtoi(part, &units)) {
        return absl::InvalidArgumentError(absl::StrCat("--layers: '", part, "' is not a number"));
      }
      spec.add_layers(units);
    }
  }
  if (has("consistency")) {
    ps::v1::ConsistencySpec::Mode mode;
    const std::string value = absl::GetFlag(FLAGS_consistency);
    if (!ps::v1::ConsistencySpec::Mode_Parse(absl::AsciiStrToUpper(value), &mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--consistency must be sync, ssp or async, not '", value, "'"));
    }
    spec.mutable_consistency()->set_mode(mode);
  }
  if (has("staleness")) spec.mutable_consistency()->set_staleness(absl::GetFlag(FLAGS_staleness));
  if (has("data_assignment")) {
    ps::v1::DataAssignment assignment;
    const std::string value = absl::GetFlag(FLAGS_data_assignment);
    if (value.empty() || !ps::v1::DataAssignment_Parse(absl::AsciiStrToUpper(value), &assignment) ||
        assignment == ps::v1::DATA_ASSIGNMENT_DEFAULT) {
      return absl::InvalidArgumentError(
          absl::StrCat("--data_assignment must be static or dynamic, not '", value, "'"));
    }
    spec.set_data_assignment(assignment);
  }
  if (has("optimizer")) {
    ps::v1::OptimizerSpec::Kind kind;
    const std::string value = absl::GetFlag(FLAGS_optimizer);
    if (!ps::v1::OptimizerSpec::Kind_Parse(absl::AsciiStrToUpper(value), &kind)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--optimizer must be sgd, momentum, adagrad, adam or ftrl, not '", value, "'"));
    }
    spec.mutable_optimizer()->set_kind(kind);
  }
  if (has("learning_rate")) {
    spec.mutable_optimizer()->set_learning_rate(
        static_cast<float>(absl::GetFlag(FLAGS_learning_rate)));
  }
  return absl::OkStatus();
}

// Applies the submit flags of checkpoints and recovery that were given to `spec`.
absl::Status ApplyCheckpointFlags(const std::set<std::string>& given, JobSpec& spec) {
  auto has = [&](const char* name) { return given.count(name) > 0; };
  ps::psctl::CheckpointFlags flags;
  if (has("checkpoint_every_steps"))
    flags.every_steps = absl::GetFlag(FLAGS_checkpoint_every_steps);
  if (has("checkpoint_every_seconds")) {
    flags.every_seconds = absl::GetFlag(FLAGS_checkpoint_every_seconds);
  }
  if (has("checkpoint_keep")) flags.keep = absl::GetFlag(FLAGS_checkpoint_keep);
  if (has("checkpoint_root")) flags.root = absl::GetFlag(FLAGS_checkpoint_root);
  if (has("recovery")) flags.recovery = absl::GetFlag(FLAGS_recovery);
  if (has("from_checkpoint")) flags.from_checkpoint = absl::GetFlag(FLAGS_from_checkpoint);
  return ps::psctl::ApplyCheckpointFlags(flags, spec);
}

// ---- the commands -----------------------------------------------------------------------

int UsageError(absl::string_view message) {
  std::cerr << "psctl: " << message << "\n(psctl --help lists the commands and flags)\n";
  return kUsage;
}

// submit's job: the file named (if any), a relative program.working_dir made absolute (from
// where psctl runs), then the flags given. A usage error's message otherwise.
absl::StatusOr<JobSpec> SubmitSpec(const CommandLine& cl, const std::vector<std::string>& args) {
  JobSpec spec;
  if (!args.empty()) {
    auto file = ReadJobFile(args[0]);
    if (!file.ok())
      return absl::InvalidArgumentError(absl::StrCat("submit: ", file.status().message()));
    spec = *std::move(file);
  } else if (std::none_of(cl.given.begin(), cl.given.end(), IsSubmitFlag)) {
    return absl::InvalidArgumentError(
        "submit needs a job file or flags (e.g. --model=fashion_mlp --num_workers=2)");
  }
  if (spec.has_program() && !spec.program().working_dir().empty() &&
      spec.program().working_dir()[0] != '/') {
    // Relative to where psctl runs (e.g. the repository root on a one-machine cluster).
    std::error_code ec;
    const std::filesystem::path dir =
        std::filesystem::absolute(spec.program().working_dir(), ec).lexically_normal();
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("submit: program.working_dir: ", ec.message()));
    }
    std::string normal = dir.string();
    while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
    spec.mutable_program()->set_working_dir(normal);
  }
  absl::Status st = ApplySubmitFlags(cl.given, spec);
  if (st.ok()) st = ApplyCheckpointFlags(cl.given, spec);
  if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat("submit: ", st.message()));
  return spec;
}

// Checks the command's arguments and flags, then runs it.
int Run(const CommandLine& cl, ps::psctl::Options options) {
  const std::string& command = cl.args[0];
  const std::vector<std::string> args(cl.args.begin() + 1, cl.args.end());
  struct Arity {
    const char* name;
    size_t min, max;
    const char* usage;
  };
  static const Arity kCommands[] = {{"nodes", 0, 0, "nodes"},
                                    {"submit", 0, 1, "submit [FILE] [FLAGS]"},
                                    {"status", 1, 1, "status JOB [--watch]"},
                                    {"list", 0, 0, "list"},
                                    {"cancel", 1, 1, "cancel JOB"},
                                    {"events", 1, 1, "events JOB"},
                                    {"logs", 1, 1, "logs JOB [--worker=N] [--lines=N]"},
                                    {"checkpoint", 1, 1, "checkpoint JOB [--nowait]"},
                                    {"checkpoints", 1, 1, "checkpoints JOB"},
                                    {"restore", 1, 1, "restore JOB [--checkpoint=ID]"},
                                    {"drain", 1, 1, "drain NODE [--nowait]"},
                                    {"tables", 1, 1, "tables JOB"}};
  const Arity* arity = nullptr;
  for (const auto& c : kCommands) {
    if (command == c.name) arity = &c;
  }
  if (arity == nullptr) return UsageError(absl::StrCat("unknown command '", command, "'"));
  if (args.size() < arity->min || args.size() > arity->max) {
    return UsageError(absl::StrCat("usage: psctl ", arity->usage));
  }
  for (const std::string& flag : cl.given) {
    if (!FlagAppliesTo(flag, command)) {
      return UsageError(absl::StrCat("--", flag, " does not apply to '", command, "'"));
    }
  }
  JobSpec spec;
  if (command == "submit") {
    auto made = SubmitSpec(cl, args);
    if (!made.ok()) return UsageError(made.status().message());
    spec = *std::move(made);
  }
  Commands psctl(std::move(options));
  if (command == "nodes") return psctl.Nodes();
  if (command == "submit") return psctl.Submit(spec);
  if (command == "status") {
    return absl::GetFlag(FLAGS_watch) ? psctl.Watch(args[0]) : psctl.Status(args[0]);
  }
  if (command == "list") return psctl.List();
  if (command == "cancel") return psctl.Cancel(args[0]);
  if (command == "checkpoint") return psctl.Checkpoint(args[0]);
  if (command == "checkpoints") return psctl.Checkpoints(args[0]);
  if (command == "restore") return psctl.Restore(args[0]);
  if (command == "tables") return psctl.Tables(args[0]);
  if (command == "drain") {
    uint64_t node = 0;
    if (!absl::SimpleAtoi(args[0], &node) || node == 0) {
      return UsageError(absl::StrCat("drain: '", args[0], "' is not a node id (psctl nodes)"));
    }
    return psctl.Drain(node);
  }
  if (command == "logs") {
    const int lines = absl::GetFlag(FLAGS_lines);
    if (lines < 1 || lines > 100) return UsageError("--lines must be in 1..100");
    return psctl.Logs(args[0], absl::GetFlag(FLAGS_worker), lines);
  }
  return psctl.Events(args[0]);
}

}  // namespace

int main(int argc, char** argv) {
  auto cl = ParseCommandLine(argc, argv);
  if (!cl.ok()) return UsageError(cl.status().message());
  if (cl->help || (!cl->args.empty() && cl->args[0] == "help")) {
    PrintHelp(std::cout);
    return kOk;
  }
  if (cl->version) {
    std::cout << "psctl " << ps::VersionString() << "\n";
    return kOk;
  }
  if (cl->args.empty()) {
    PrintHelp(std::cerr);
    return kUsage;
  }
  ps::SecurityOptions security = ps::TlsOptionsFromFlags();
  auto token = ps::TokenFromFileOrEnv(absl::GetFlag(FLAGS_token_file), "PS_TOKEN");
  if (!token.ok()) return UsageError(absl::StrCat("--token_file: ", token.status().message()));
  security.token = *std::move(token);
  auto loaded = ps::Security::Load(security);
  if (!loaded.ok()) return UsageError(loaded.status().message());
  ps::SetProcessSecurity(*std::move(loaded));
  ps::psctl::Options options;
  options.address = absl::GetFlag(FLAGS_scheduler);
  if (options.address.empty()) {
    const char* env = std::getenv("PS_SCHEDULER");
    options.address = env != nullptr && *env != '\0' ? env : "localhost:7000";
  }
  const std::string output = absl::GetFlag(FLAGS_output);
  if (output != "text" && output != "json") {
    return UsageError(absl::StrCat("--output must be text or json, not '", output, "'"));
  }
  options.json = output == "json";
  options.timeout = absl::GetFlag(FLAGS_timeout);
  if (options.timeout <= absl::ZeroDuration()) return UsageError("--timeout must be positive");
  if (absl::GetFlag(FLAGS_wait_timeout) <= absl::ZeroDuration()) {
    return UsageError("--wait_timeout must be positive");
  }
  options.wait = absl::GetFlag(FLAGS_wait);
  options.wait_timeout = absl::GetFlag(FLAGS_wait_timeout);
  options.checkpoint_id = absl::GetFlag(FLAGS_checkpoint);
  return Run(*cl, std::move(options));
}
