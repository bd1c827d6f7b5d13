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
#include <deque>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
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
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "ps/v1/scheduler.grpc.pb.h"
#include "scheduler/internal/job_format.h"

ABSL_FLAG(std::string, scheduler, "",
          "scheduler host:port (default: $PS_SCHEDULER, else localhost:7000)");
ABSL_FLAG(std::string, output, "text", "text | json (protobuf's JSON of the scheduler's answer)");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(5),
          "deadline of one request to the scheduler, connecting included");
ABSL_FLAG(bool, watch, false, "status: follow the job until it ends");

// checkpoint and restore.
ABSL_FLAG(bool, wait, true, "checkpoint: wait until it is complete or failed (--nowait: do not)");
ABSL_FLAG(absl::Duration, wait_timeout, absl::Minutes(10),
          "checkpoint: give up waiting after this long (exit 1)");
ABSL_FLAG(uint64_t, checkpoint, 0, "restore: the checkpoint id (0: the latest complete)");

// submit: each overrides the job file's field when given.
ABSL_FLAG(std::string, name, "", "job name");
ABSL_FLAG(std::string, model, "", "fashion_mlp | spam_logreg");
ABSL_FLAG(std::string, layers, "", "fashion_mlp layer sizes, inputs first, e.g. 784,128,10");
ABSL_FLAG(std::string, data_dir, "", "data set directory on every worker host");
ABSL_FLAG(int, num_workers, 0, "workers training the job");
ABSL_FLAG(int, num_servers, 0, "servers holding the job's slots (0: every live server)");
ABSL_FLAG(int, epochs, 0, "passes over the data set");
ABSL_FLAG(int, batch_size, 0, "examples per step and worker");
ABSL_FLAG(std::string, consistency, "", "sync | ssp | async");
ABSL_FLAG(int, staleness, 0, "ssp: clocks a worker may run ahead of the slowest");
ABSL_FLAG(std::string, optimizer, "", "sgd | momentum | adagrad | adam | ftrl");
ABSL_FLAG(double, learning_rate, 0, "the optimizer's learning rate (ftrl: alpha)");
ABSL_FLAG(int, hash_bits, 0, "spam_logreg: 2^hash_bits hashed features");
ABSL_FLAG(uint64_t, seed, 0, "seed of the initial weights and of the data order");
ABSL_FLAG(bool, evaluate, true, "evaluate on the held-out set every epoch");
ABSL_FLAG(int64_t, checkpoint_every_steps, 0,
          "checkpoint at every clock that is a multiple of this (0: off)");
ABSL_FLAG(int64_t, checkpoint_every_seconds, 0,
          "checkpoint at the first clock this many seconds after the last (0: off)");
ABSL_FLAG(int32_t, checkpoint_keep, 0, "complete checkpoints kept, older ones pruned (0: 3)");
ABSL_FLAG(std::string, checkpoint_root, "",
          "where servers write checkpoints, an absolute path (default: the scheduler's)");
ABSL_FLAG(std::string, recovery, "", "when a server dies: rollback | restore_lost_slots | default");
ABSL_FLAG(std::string, from_checkpoint, "",
          "start from a checkpoint: JOB (its latest complete one) or JOB:ID");

namespace {

using ps::v1::JobInfo;
using ps::v1::JobSpec;

// Exit codes; scripts rely on them (documented in --help and docs/operations.md).
enum ExitCode {
  kOk = 0,           // done; `status --watch`: the job SUCCEEDED
  kRefused = 1,      // the scheduler refused the request, or the watched job FAILED/CANCELLED,
                     // or the awaited checkpoint failed or did not complete in --wait_timeout
  kUsage = 2,        // bad command line or job file
  kUnreachable = 3,  // no answer from the scheduler (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED)
};

constexpr char kUsageText[] = R"(psctl: the command-line client of the parameter-server scheduler.

Usage: psctl [--scheduler=host:port] [--output=text|json] COMMAND [ARGS] [FLAGS]

Commands:
  nodes                  the cluster's nodes: id, role, state, address, metrics address,
                         host/pid, heartbeat, job (and the scheduler's metrics address)
  submit [FILE] [FLAGS]  submit a job (FILE: a ps.v1.JobSpec textproto; the submit flags
                         below override its fields); prints the job id alone on stdout:
                           JOB=$(psctl submit deploy/jobs/fashion_mlp.textproto)
  status JOB [--watch]   state, reason, placement, progress and ETA of a job; --watch follows
                         it with a live progress line until it ends, then prints the final line
  list                   one line per job
  cancel JOB             cancel a job
  events JOB             the job's event history (alias: logs)
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
  help                   this text

The scheduler is --scheduler, else $PS_SCHEDULER, else localhost:7000.
--output=json prints the scheduler's answer as protobuf JSON, one document (status --watch:
one compact document per line and change).

Exit codes:
  0  ok (status --watch: the job SUCCEEDED)
  1  the scheduler refused the request (the message, with its gRPC code, goes to stderr;
     UNIMPLEMENTED: the scheduler is too old for the command), or the watched job ended
     FAILED or CANCELLED, or the checkpoint waited for failed or was not complete within
     --wait_timeout
  2  usage error: unknown command or flag, bad flag value, unreadable or unparsable job file
  3  the scheduler is unreachable (UNAVAILABLE or DEADLINE_EXCEEDED); status --watch retries
     for a minute first, so a scheduler restart does not end the watch
)";

// The flags that only `submit` takes.
const char* const kSubmitFlags[] = {"name",        "model",       "layers",    "data_dir",
                                    "num_workers", "num_servers", "epochs",    "batch_size",
                                    "consistency", "staleness",   "optimizer", "learning_rate",
                                    "hash_bits",   "seed",        "evaluate"};
// The submit flags of checkpoints and recovery.
const char* const kCheckpointSubmitFlags[] = {"checkpoint_every_steps",
                                              "checkpoint_every_seconds",
                                              "checkpoint_keep",
                                              "checkpoint_root",
                                              "recovery",
                                              "from_checkpoint"};

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
  for (const char* name : {"scheduler", "output", "timeout", "watch"}) {
    PrintFlag(out, *flags.at(name), true);
  }
  out << "\nsubmit flags (each overrides the job file's field when given):\n";
  for (const char* name : kSubmitFlags) PrintFlag(out, *flags.at(name), false);
  for (const char* name : kCheckpointSubmitFlags) PrintFlag(out, *flags.at(name), false);
  out << "\ncheckpoint and restore flags:\n";
  for (const char* name : {"wait", "wait_timeout", "checkpoint"}) {
    PrintFlag(out, *flags.at(name), true);
  }
}

// Whether `flag` may be given with `command`: the flags of one command only are refused by the
// others.
bool FlagAppliesTo(const std::string& flag, const std::string& command) {
  if (IsSubmitFlag(flag)) return command == "submit";
  if (flag == "watch") return command == "status";
  if (flag == "wait" || flag == "wait_timeout") return command == "checkpoint";
  if (flag == "checkpoint") return command == "restore";
  return true;
}

// Whether `flag` is one of psctl's (not one of a library's). Abseil strips the leading '/' of
// the file name it reports.
bool IsOwnFlag(const absl::CommandLineFlag& flag) {
  return absl::EndsWith(__FILE__, flag.Filename());
}

// The command line: positional arguments and the names of the flags given.
struct CommandLine {
  std::vector<std::string> args;
  std::set<std::string> given;
  bool help = false;
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

using ps::psctl::Age;
using ps::psctl::Eta;
using ps::psctl::FinalLine;
using ps::psctl::FormatSeconds;
using ps::psctl::FormatTimestamp;
using ps::psctl::FromMillis;
using ps::psctl::IsFinal;
using ps::psctl::Lower;
using ps::psctl::Percent;
using ps::psctl::ProgressBar;
using ps::psctl::ProgressSummary;
using ps::psctl::SpecSummary;
using ps::psctl::StepRate;
using ps::psctl::Table;
using ps::psctl::TotalEpochs;
using ps::psctl::WatchLine;

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

struct Options {
  std::string address;          // the scheduler's host:port
  bool json = false;            // --output=json
  absl::Duration timeout;       // of one request
  std::set<std::string> given;  // flags given on the command line
};

// Reconnects within a second of a restarted scheduler coming back (status --watch), instead of
// gRPC's default backoff of up to two minutes.
std::shared_ptr<grpc::Channel> NewChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

// One command against the scheduler. Not thread-safe; one instance per process.
class Psctl {
 public:
  explicit Psctl(Options options)
      : options_(std::move(options)),
        stub_(ps::v1::Scheduler::NewStub(NewChannel(options_.address))) {}

  int Nodes();
  int Submit(const std::vector<std::string>& args);
  int Status(const std::string& job_id);
  int Watch(const std::string& job_id);
  int List();
  int Cancel(const std::string& job_id);
  int Events(const std::string& job_id);
  int Checkpoint(const std::string& job_id);
  int Checkpoints(const std::string& job_id);
  int Restore(const std::string& job_id);

 private:
  void Prepare(grpc::ClientContext& context) const {
    context.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  }
  // No answer: not reachable, too slow, or the call was cut off by the scheduler's shutdown.
  static bool Unreachable(const grpc::Status& s) {
    return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
           s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
           s.error_code() == grpc::StatusCode::CANCELLED;
  }
  std::string Describe(const grpc::Status& s) const {
    const std::string code =
        absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code()));
    return s.error_message().empty() ? code : absl::StrCat(code, ": ", s.error_message());
  }
  // Prints the failure of `command` and returns its exit code.
  int Fail(absl::string_view command, const grpc::Status& s) const {
    if (Unreachable(s)) {
      std::cerr << "psctl: " << command << ": cannot reach the scheduler at " << options_.address
                << " (" << Describe(s) << "); set --scheduler or PS_SCHEDULER\n";
      return kUnreachable;
    }
    std::cerr << "psctl: " << command << ": " << Describe(s);
    if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED && s.error_message().empty()) {
      std::cerr << " (the scheduler at " << options_.address << " does not implement '" << command
                << "'; is it an older ps_scheduler?)";
    }
    std::cerr << "\n";
    return kRefused;
  }
  void PrintJson(const google::protobuf::Message& m, bool one_line = false) const {
    google::protobuf::util::JsonPrintOptions opts;
    opts.add_whitespace = !one_line;
    opts.always_print_primitive_fields = true;
    std::string out;
    (void)google::protobuf::util::MessageToJsonString(m, &out, opts);
    if (!out.empty() && out.back() != '\n') out += "\n";
    std::cout << out << std::flush;
  }
  grpc::Status GetJob(const std::string& job_id, JobInfo& job) const {
    grpc::ClientContext context;
    Prepare(context);
    ps::v1::GetJobRequest request;
    request.set_job_id(job_id);
    return stub_->GetJob(&context, request, &job);
  }
  grpc::Status ListCheckpoints(const std::string& job_id,
                               ps::v1::ListCheckpointsResponse& list) const {
    grpc::ClientContext context;
    Prepare(context);
    ps::v1::ListCheckpointsRequest request;
    request.set_job_id(job_id);
    return stub_->ListCheckpoints(&context, request, &list);
  }
  void PrintJob(const JobInfo& job) const;
  int WaitForCheckpoint(const std::string& job_id, uint64_t request_seq);
  int CheckpointOutcome(const ps::v1::CheckpointInfo& c) const;

  Options options_;
  std::unique_ptr<ps::v1::Scheduler::Stub> stub_;
};

int Psctl::Nodes() {
  grpc::ClientContext context;
  Prepare(context);
  ps::v1::ListNodesResponse response;
  grpc::Status s = stub_->ListNodes(&context, ps::v1::ListNodesRequest(), &response);
  if (!s.ok()) return Fail("nodes", s);
  if (options_.json) {
    PrintJson(response);
    return kOk;
  }
  if (response.nodes_size() == 0) {
    std::cout << "no nodes registered\n";
    return kOk;
  }
  const absl::Time now = absl::Now();
  Table table;
  table.AddRow({"NODE", "ROLE", "STATE", "ADDRESS", "METRICS", "HOST/PID", "HEARTBEAT", "JOB"});
  for (const auto& n : response.nodes()) {
    table.AddRow({absl::StrCat(n.node_id()), Lower(ps::v1::NodeRole_Name(n.role())),
                  ps::v1::NodeState_Name(n.state()), n.address().empty() ? "-" : n.address(),
                  n.metrics_address().empty() ? "-" : n.metrics_address(),
                  absl::StrCat(n.hostname(), "/", n.pid()),
                  n.last_heartbeat_unix_ms() > 0
                      ? absl::StrCat(Age(n.last_heartbeat_unix_ms(), now), " ago")
                      : "never",
                  n.job_id().empty() ? "-" : n.job_id()});
  }
  table.Print(std::cout);
  if (!response.metrics_address().empty()) {
    std::cout << "scheduler metrics: " << response.metrics_address() << "\n";
  }
  return kOk;
}

int Psctl::Submit(const std::vector<std::string>& args) {
  JobSpec spec;
  if (!args.empty()) {
    auto file = ReadJobFile(args[0]);
    if (!file.ok()) {
      std::cerr << "psctl: submit: " << file.status().message() << "\n";
      return kUsage;
    }
    spec = *std::move(file);
  } else if (std::none_of(options_.given.begin(), options_.given.end(), IsSubmitFlag)) {
    std::cerr << "psctl: submit needs a job file or flags (e.g. --model=fashion_mlp "
                 "--num_workers=2); see psctl --help\n";
    return kUsage;
  }
  absl::Status st = ApplySubmitFlags(options_.given, spec);
  if (st.ok()) st = ApplyCheckpointFlags(options_.given, spec);
  if (!st.ok()) {
    std::cerr << "psctl: submit: " << st.message() << "\n";
    return kUsage;
  }
  grpc::ClientContext context;
  Prepare(context);
  ps::v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  ps::v1::SubmitJobResponse response;
  grpc::Status s = stub_->SubmitJob(&context, request, &response);
  if (!s.ok()) return Fail("submit", s);
  if (options_.json) {
    PrintJson(response);
  } else {
    std::cout << response.job_id() << "\n";
  }
  return kOk;
}

void Psctl::PrintJob(const JobInfo& job) const {
  const absl::Time now = absl::Now();
  Table t;
  t.AddRow({"job:", job.spec().name().empty()
                        ? job.job_id()
                        : absl::StrCat(job.job_id(), " \"", job.spec().name(), "\"")});
  t.AddRow({"state:", ps::v1::JobState_Name(job.state())});
  if (!job.reason().empty()) t.AddRow({"reason:", job.reason()});
  t.AddRow({"spec:", SpecSummary(job.spec())});
  std::vector<std::string> servers, workers;
  for (int i = 0; i < job.server_nodes_size(); ++i) {
    servers.push_back(absl::StrCat("node ", job.server_nodes(i), " ",
                                   i < job.server_addresses_size() ? job.server_addresses(i) : ""));
  }
  for (int i = 0; i < job.worker_nodes_size(); ++i) {
    workers.push_back(absl::StrCat(
        "node ", job.worker_nodes(i),
        i < job.worker_ids_size() ? absl::StrCat(" as worker ", job.worker_ids(i)) : ""));
  }
  if (!servers.empty()) {
    t.AddRow({"servers:", absl::StrCat(absl::StrJoin(servers, ", "), " (shard epoch ",
                                       job.shard_epoch(), ")")});
  }
  if (!workers.empty()) {
    t.AddRow({"workers:", absl::StrCat(absl::StrJoin(workers, ", "), " (membership epoch ",
                                       job.membership_epoch(), ")")});
  }
  const auto& p = job.progress();
  if (p.total_clocks() > 0) {
    t.AddRow({"progress:", ProgressSummary(job)});
    std::string more;
    if (p.test_accuracy() > 0) {
      more = absl::StrFormat("test accuracy %s (loss %.4f), ", Percent(p.test_accuracy()),
                             p.test_loss());
    }
    absl::StrAppendFormat(&more, "%.0f samples/s", p.samples_per_second());
    if (job.state() == ps::v1::RUNNING) {
      absl::StrAppend(&more, ", ETA ", Eta(job, StepRate().Get(job, now)));
    }
    t.AddRow({"", more});
    if (!p.error().empty()) t.AddRow({"error:", p.error()});
  }
  std::string times = absl::StrCat("submitted ", FormatTimestamp(job.submit_time_unix_ms()), " (",
                                   Age(job.submit_time_unix_ms(), now), " ago)");
  if (job.start_time_unix_ms() > 0) {
    absl::StrAppend(&times, ", started ", FormatTimestamp(job.start_time_unix_ms()));
  }
  if (job.end_time_unix_ms() > 0) {
    absl::StrAppend(&times, ", ended ", FormatTimestamp(job.end_time_unix_ms()));
  }
  for (auto& [label, value] : ps::psctl::CheckpointStatusRows(job)) t.AddRow({label, value});
  t.AddRow({"time:", times});
  t.Print(std::cout);
}

int Psctl::Status(const std::string& job_id) {
  JobInfo job;
  grpc::Status s = GetJob(job_id, job);
  if (!s.ok()) return Fail("status", s);
  if (options_.json) {
    PrintJson(job);
  } else {
    PrintJob(job);
  }
  return kOk;
}

// Follows a job until it ends. A scheduler that goes away (e.g. restarts) is retried for a
// minute before psctl gives up with kUnreachable.
int Psctl::Watch(const std::string& job_id) {
  const bool tty = isatty(STDOUT_FILENO) && !options_.json;
  constexpr absl::Duration kPoll = absl::Seconds(1);
  constexpr absl::Duration kGiveUp = absl::Seconds(60);
  StepRate rate;
  std::string last_key;
  absl::Time unreachable_since = absl::InfiniteFuture();
  size_t drawn = 0;  // characters on the tty's current line
  for (bool first = true;; first = false) {
    if (!first) absl::SleepFor(kPoll);
    JobInfo job;
    grpc::Status s = GetJob(job_id, job);
    const absl::Time now = absl::Now();
    if (!s.ok()) {
      if (first || !Unreachable(s) || now - unreachable_since > kGiveUp) {
        if (drawn > 0) std::cout << "\n";
        return Fail("status", s);
      }
      if (unreachable_since == absl::InfiniteFuture()) {
        unreachable_since = now;
        std::cerr << (drawn > 0 ? "\n" : "") << "psctl: status: scheduler unreachable ("
                  << Describe(s) << "); retrying for " << kGiveUp << "\n";
        drawn = 0;
      }
      continue;
    }
    unreachable_since = absl::InfiniteFuture();
    rate.Observe(now, job.progress().clock());
    const bool done = IsFinal(job.state());
    if (options_.json) {
      const std::string key = job.SerializeAsString();
      if (key != last_key) PrintJson(job, /*one_line=*/true);
      last_key = key;
    } else if (done) {
      std::cout << (drawn > 0 ? "\r\033[K" : "") << FinalLine(job) << "\n" << std::flush;
    } else {
      const std::string line = WatchLine(job, rate.Get(job, now));
      if (tty) {
        std::cout << "\r" << line << "\033[K" << std::flush;
        drawn = line.size();
      } else {
        // One line per change; the ETA and rate alone do not count as a change.
        const auto& p = job.progress();
        const std::string key = absl::StrCat(job.state(), "|", job.reason(), "|", p.clock(), "|",
                                             p.epoch(), "|", p.test_accuracy());
        if (key != last_key) std::cout << line << "\n" << std::flush;
        last_key = key;
      }
    }
    if (done) return job.state() == ps::v1::SUCCEEDED ? kOk : kRefused;
  }
}

int Psctl::List() {
  grpc::ClientContext context;
  Prepare(context);
  ps::v1::ListJobsResponse response;
  grpc::Status s = stub_->ListJobs(&context, ps::v1::ListJobsRequest(), &response);
  if (!s.ok()) return Fail("list", s);
  if (options_.json) {
    PrintJson(response);
    return kOk;
  }
  if (response.jobs_size() == 0) {
    std::cout << "no jobs\n";
    return kOk;
  }
  const absl::Time now = absl::Now();
  Table table;
  table.AddRow({"JOB", "NAME", "STATE", "MODEL", "WORKERS", "PROGRESS", "AGE", "REASON"});
  for (const auto& job : response.jobs()) {
    const auto& p = job.progress();
    std::string progress = "-";
    if (job.state() == ps::v1::SUCCEEDED && p.test_accuracy() > 0) {
      progress = absl::StrCat("test ", Percent(p.test_accuracy()));
    } else if (p.total_clocks() > 0) {
      progress = absl::StrFormat("%.0f%% e%d/%d", 100.0 * p.clock() / p.total_clocks(), p.epoch(),
                                 TotalEpochs(job.spec()));
    }
    table.AddRow({job.job_id(), job.spec().name().empty() ? "-" : job.spec().name(),
                  ps::v1::JobState_Name(job.state()),
                  job.spec().model().empty() ? "-" : job.spec().model(),
                  absl::StrCat(job.worker_nodes_size(), "/", job.spec().num_workers()), progress,
                  Age(job.submit_time_unix_ms(), now), job.reason()});
  }
  table.Print(std::cout);
  return kOk;
}

int Psctl::Cancel(const std::string& job_id) {
  grpc::ClientContext context;
  Prepare(context);
  ps::v1::CancelJobRequest request;
  request.set_job_id(job_id);
  JobInfo job;
  grpc::Status s = stub_->CancelJob(&context, request, &job);
  if (!s.ok()) return Fail("cancel", s);
  if (options_.json) {
    PrintJson(job);
  } else {
    std::cout << job.job_id() << " " << ps::v1::JobState_Name(job.state())
              << (job.reason().empty() ? "" : absl::StrCat(": ", job.reason())) << "\n";
  }
  return kOk;
}

int Psctl::Events(const std::string& job_id) {
  JobInfo job;
  grpc::Status s = GetJob(job_id, job);
  if (!s.ok()) return Fail("events", s);
  if (options_.json) {
    PrintJson(job);
    return kOk;
  }
  if (job.events_size() == 0) std::cout << "no events\n";
  for (const auto& e : job.events()) {
    std::cout << FormatTimestamp(e.time_unix_ms()) << "  " << e.message() << "\n";
  }
  return kOk;
}

int Psctl::Checkpoint(const std::string& job_id) {
  grpc::ClientContext context;
  Prepare(context);
  ps::v1::RequestCheckpointRequest request;
  request.set_job_id(job_id);
  ps::v1::RequestCheckpointResponse response;
  grpc::Status s = stub_->RequestCheckpoint(&context, request, &response);
  if (!s.ok()) return Fail("checkpoint", s);
  const bool wait = absl::GetFlag(FLAGS_wait);
  if (options_.json) {
    if (!wait) PrintJson(response);
  } else {
    std::cout << "checkpoint of " << job_id << " requested (request " << response.request_seq()
              << ")\n"
              << std::flush;
  }
  return wait ? WaitForCheckpoint(job_id, response.request_seq()) : kOk;
}

// A line on stderr that is redrawn in place on a terminal, else printed once per Show().
class ProgressLine {
 public:
  ProgressLine() : tty_(isatty(STDERR_FILENO)) {}
  void Show(const std::string& line) {
    std::cerr << (tty_ ? "\r" : "") << line << (tty_ ? "\033[K" : "\n") << std::flush;
    drawn_ = tty_;
  }
  // Before anything else is printed.
  void Clear() {
    if (drawn_) std::cerr << "\r\033[K" << std::flush;
    drawn_ = false;
  }

 private:
  const bool tty_;
  bool drawn_ = false;
};

// Prints how the checkpoint answering a request ended; its exit code.
int Psctl::CheckpointOutcome(const ps::v1::CheckpointInfo& c) const {
  if (options_.json) PrintJson(c);
  if (c.state() == ps::v1::CHECKPOINT_COMPLETE || c.state() == ps::v1::CHECKPOINT_PRUNED) {
    if (!options_.json) std::cout << ps::psctl::CheckpointCompleteLine(c) << "\n";
    return kOk;
  }
  std::cerr << "psctl: checkpoint: " << ps::psctl::CheckpointFailedLine(c) << "\n";
  return kRefused;
}

// Polls the catalog until the checkpoint answering `request_seq` is no longer WRITING, the job
// ends without it, or --wait_timeout passes. Progress goes to stderr every few seconds. A
// scheduler that goes away is retried for a minute, as by status --watch.
int Psctl::WaitForCheckpoint(const std::string& job_id, uint64_t request_seq) {
  constexpr absl::Duration kPoll = absl::Seconds(1);
  constexpr absl::Duration kProgressEvery = absl::Seconds(5);
  constexpr absl::Duration kGiveUp = absl::Seconds(60);
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + absl::GetFlag(FLAGS_wait_timeout);
  absl::Time next_progress = start + kProgressEvery;
  absl::Time last_answer = start;
  ProgressLine progress;
  std::optional<ps::v1::CheckpointInfo> answer;  // the last seen, while WRITING
  for (bool first = true;; first = false) {
    if (!first) absl::SleepFor(kPoll);
    // The job first, the catalog second: a job seen ended has written all it ever will.
    JobInfo job;
    const bool have_job = (first || absl::Now() >= next_progress) && GetJob(job_id, job).ok();
    ps::v1::ListCheckpointsResponse list;
    grpc::Status s = ListCheckpoints(job_id, list);
    const absl::Time now = absl::Now();
    if (s.ok()) {
      last_answer = now;
      const ps::v1::CheckpointInfo* c = ps::psctl::AnsweringCheckpoint(list, request_seq);
      if (c != nullptr && c->state() != ps::v1::CHECKPOINT_WRITING &&
          c->state() != ps::v1::CHECKPOINT_STATE_UNSPECIFIED) {
        progress.Clear();
        return CheckpointOutcome(*c);
      }
      if (c != nullptr) answer = *c;
    } else if (!Unreachable(s) || now - last_answer > kGiveUp) {
      progress.Clear();
      return Fail("checkpoint", s);
    }
    const std::string where = answer ? absl::StrCat("checkpoint ", answer->checkpoint_id(),
                                                    " was writing at clock ", answer->clock())
                                     : absl::StrCat("request ", request_seq, " had not begun");
    if (s.ok() && have_job && IsFinal(job.state())) {
      progress.Clear();
      std::cerr << "psctl: checkpoint: " << job_id << " ended ("
                << ps::v1::JobState_Name(job.state()) << ") before its checkpoint was complete ("
                << where << ")\n";
      return kRefused;
    }
    if (now >= deadline) {
      progress.Clear();
      std::cerr << "psctl: checkpoint: not complete after " << absl::GetFlag(FLAGS_wait_timeout)
                << " (" << where << "); it may still complete: psctl checkpoints " << job_id
                << "\n";
      return kRefused;
    }
    if (now >= next_progress) {
      next_progress = now + kProgressEvery;
      std::string line = ps::psctl::CheckpointWaitLine(
          job_id, request_seq, answer ? &*answer : nullptr, have_job ? &job : nullptr, now - start);
      if (!s.ok()) absl::StrAppend(&line, "; scheduler unreachable, retrying");
      progress.Show(line);
    }
  }
}

int Psctl::Checkpoints(const std::string& job_id) {
  ps::v1::ListCheckpointsResponse list;
  grpc::Status s = ListCheckpoints(job_id, list);
  if (!s.ok()) return Fail("checkpoints", s);
  if (options_.json) {
    PrintJson(list);
  } else {
    ps::psctl::PrintCheckpoints(list, absl::Now(), std::cout);
  }
  return kOk;
}

// A running job rolls back (same job id in the answer); an ended one is submitted again from
// the checkpoint as a new job, whose id goes alone to stdout like `submit`'s.
int Psctl::Restore(const std::string& job_id) {
  grpc::ClientContext context;
  Prepare(context);
  ps::v1::RestoreJobRequest request;
  request.set_job_id(job_id);
  request.set_checkpoint_id(absl::GetFlag(FLAGS_checkpoint));
  JobInfo job;
  grpc::Status s = stub_->RestoreJob(&context, request, &job);
  if (!s.ok()) return Fail("restore", s);
  const bool resubmitted = job.job_id() != job_id;
  if (options_.json) {
    PrintJson(job);
  } else if (resubmitted) {
    std::cout << job.job_id() << "\n" << std::flush;
  } else {
    std::cout << ps::psctl::RollbackLine(job, request.checkpoint_id()) << "\n";
  }
  if (resubmitted) {
    std::cerr << "psctl: restore: " << ps::psctl::ResubmitNote(job, job_id, request.checkpoint_id())
              << "\n";
  }
  return kOk;
}

int UsageError(absl::string_view message) {
  std::cerr << "psctl: " << message << "\n(psctl --help lists the commands and flags)\n";
  return kUsage;
}

// Checks the command's arguments and flags, then runs it.
int Run(const CommandLine& cl, Options options) {
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
                                    {"logs", 1, 1, "logs JOB"},
                                    {"checkpoint", 1, 1, "checkpoint JOB [--nowait]"},
                                    {"checkpoints", 1, 1, "checkpoints JOB"},
                                    {"restore", 1, 1, "restore JOB [--checkpoint=ID]"}};
  const Arity* arity = nullptr;
  for (const auto& c : kCommands) {
    if (command == c.name) arity = &c;
  }
  if (arity == nullptr) return UsageError(absl::StrCat("unknown command '", command, "'"));
  if (args.size() < arity->min || args.size() > arity->max) {
    return UsageError(absl::StrCat("usage: psctl ", arity->usage));
  }
  for (const std::string& flag : options.given) {
    if (!FlagAppliesTo(flag, command)) {
      return UsageError(absl::StrCat("--", flag, " does not apply to '", command, "'"));
    }
  }
  Psctl psctl(std::move(options));
  if (command == "nodes") return psctl.Nodes();
  if (command == "submit") return psctl.Submit(args);
  if (command == "status") {
    return absl::GetFlag(FLAGS_watch) ? psctl.Watch(args[0]) : psctl.Status(args[0]);
  }
  if (command == "list") return psctl.List();
  if (command == "cancel") return psctl.Cancel(args[0]);
  if (command == "checkpoint") return psctl.Checkpoint(args[0]);
  if (command == "checkpoints") return psctl.Checkpoints(args[0]);
  if (command == "restore") return psctl.Restore(args[0]);
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
  if (cl->args.empty()) {
    PrintHelp(std::cerr);
    return kUsage;
  }
  Options options;
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
  options.given = cl->given;
  return Run(*cl, std::move(options));
}
