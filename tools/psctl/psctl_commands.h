// psctl's commands: the calls to the scheduler and what they print. The command line (flags,
// help, job files) stays in tools/psctl/psctl.cc.
#ifndef PS_TOOLS_PSCTL_PSCTL_COMMANDS_H_
#define PS_TOOLS_PSCTL_PSCTL_COMMANDS_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/printable.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/json_util.h"
#include "ps/v1/parameter_server.pb.h"  // DescribeTableResponse
#include "ps/v1/scheduler.grpc.pb.h"
#include "tools/psctl/job_format.h"

namespace ps {
namespace psctl {

using v1::JobInfo;
using v1::JobSpec;

// Exit codes; scripts rely on them (documented in --help and docs/operations.md).
enum ExitCode {
  kOk = 0,           // done; `status --watch`: the job SUCCEEDED
  kRefused = 1,      // the scheduler refused the request, or the watched job FAILED/CANCELLED,
                     // or the awaited checkpoint failed or did not complete in --wait_timeout
  kUsage = 2,        // bad command line or job file
  kUnreachable = 3,  // no answer from the scheduler (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED)
};

struct Options {
  std::string address;                              // the scheduler's host:port
  bool json = false;                                // --output=json
  absl::Duration timeout;                           // of one request
  bool wait = true;                                 // checkpoint: wait for the outcome
  absl::Duration wait_timeout = absl::Minutes(10);  // checkpoint: how long
  uint64_t checkpoint_id = 0;                       // restore: 0: the latest complete one
};

// psctl's commands against the scheduler: each prints its answer (text or JSON) and returns
// the process's exit code. Not thread-safe; one instance per process.
class Commands {
 public:
  explicit Commands(Options options);

  int Nodes();
  int Submit(const JobSpec& spec);
  int Status(const std::string& job_id);
  int Watch(const std::string& job_id);
  int List();
  int Cancel(const std::string& job_id);
  int Events(const std::string& job_id);
  // A program job's output: the last `lines` lines of each worker's (or `worker`'s) program.
  // A zoo job: its events (what `logs` always showed).
  int Logs(const std::string& job_id, int worker, int lines);
  int Checkpoint(const std::string& job_id);
  // DrainNode, then (options.wait) polls ListJobs until no running job uses the node.
  int Drain(uint64_t node_id);
  int Checkpoints(const std::string& job_id);
  int Restore(const std::string& job_id);
  // Each of the job's tables (its spec's) on each of its servers: storage, rows, bytes, bytes
  // per row, admitted, rejected, evicted, expired, each direction's codec and achieved
  // compression, and (tables with a disk tier) rows and bytes on disk, RAM hit rate and disk
  // reads, from the servers' DescribeTable.
  int Tables(const std::string& job_id);

 private:
  // `status`: for each table of the job with a codec, the compression its servers achieved so
  // far (raw / wire bytes summed over the servers), one line each. Nothing for a job without
  // codecs or servers; a server that does not answer is said, and the rest still counted.
  void PrintCompression(const JobInfo& job) const;
  // DescribeTable of each of the job's spec tables on each of its servers, in that order;
  // `answer` is called with each (an error status where the server refused or did not answer).
  void DescribeTables(
      const JobInfo& job,
      const std::function<void(const v1::TableSpec& table, const std::string& server,
                               const grpc::Status& s, const v1::DescribeTableResponse& answer)>&
          answer) const;
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
    // The message came from the scheduler: escaped before it reaches a terminal.
    return s.error_message().empty()
               ? code
               : absl::StrCat(code, ": ", Printable(s.error_message(), kMaxPrintedBytes));
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
    v1::GetJobRequest request;
    request.set_job_id(job_id);
    grpc::Status s = stub_->GetJob(&context, request, &job);
    if (!options_.json) MakePrintable(&job);
    return s;
  }
  grpc::Status ListCheckpoints(const std::string& job_id, v1::ListCheckpointsResponse& list) const {
    grpc::ClientContext context;
    Prepare(context);
    v1::ListCheckpointsRequest request;
    request.set_job_id(job_id);
    grpc::Status s = stub_->ListCheckpoints(&context, request, &list);
    if (!options_.json) MakePrintable(&list);
    return s;
  }
  // Text output: every string the scheduler sent is escaped before printing (JSON output is
  // escaped by JSON itself).
  void Sanitize(google::protobuf::Message* response) const {
    if (!options_.json) MakePrintable(response);
  }
  void PrintJob(const JobInfo& job) const;
  int WaitForCheckpoint(const std::string& job_id, uint64_t request_seq);
  int CheckpointOutcome(const v1::CheckpointInfo& c) const;

  Options options_;
  std::unique_ptr<v1::Scheduler::Stub> stub_;
};

}  // namespace psctl
}  // namespace ps

#endif  // PS_TOOLS_PSCTL_PSCTL_COMMANDS_H_
