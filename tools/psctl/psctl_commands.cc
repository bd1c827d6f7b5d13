#include "tools/psctl/psctl_commands.h"

#include <unistd.h>

#include <algorithm>
#include <deque>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/security.h"
#include "tools/psctl/job_format.h"

namespace ps {
namespace psctl {
namespace {

// Reconnects within a second of a restarted scheduler coming back (status --watch), instead of
// gRPC's default backoff of up to two minutes.
std::shared_ptr<grpc::Channel> NewChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return DialChannel(address, args);
}

}  // namespace

Commands::Commands(Options options)
    : options_(std::move(options)), stub_(v1::Scheduler::NewStub(NewChannel(options_.address))) {}

int Commands::Nodes() {
  grpc::ClientContext context;
  Prepare(context);
  v1::ListNodesResponse response;
  grpc::Status s = stub_->ListNodes(&context, v1::ListNodesRequest(), &response);
  if (!s.ok()) return Fail("nodes", s);
  Sanitize(&response);
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
  table.AddRow(
      {"NODE", "ROLE", "STATE", "ADDRESS", "METRICS", "HOST/PID", "HEARTBEAT", "JOB", "VERSION"});
  for (const auto& n : response.nodes()) {
    table.AddRow({absl::StrCat(n.node_id()), Lower(v1::NodeRole_Name(n.role())),
                  absl::StrCat(v1::NodeState_Name(n.state()), n.draining() ? ",draining" : ""),
                  n.address().empty() ? "-" : n.address(),
                  n.metrics_address().empty() ? "-" : n.metrics_address(),
                  absl::StrCat(n.hostname(), "/", n.pid()),
                  n.last_heartbeat_unix_ms() > 0
                      ? absl::StrCat(Age(n.last_heartbeat_unix_ms(), now), " ago")
                      : "never",
                  n.job_id().empty() ? "-" : n.job_id(), n.version().empty() ? "-" : n.version()});
  }
  table.Print(std::cout);
  if (!response.metrics_address().empty()) {
    std::cout << "scheduler metrics: " << response.metrics_address() << "\n";
  }
  return kOk;
}

int Commands::Submit(const JobSpec& spec) {
  grpc::ClientContext context;
  Prepare(context);
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  v1::SubmitJobResponse response;
  grpc::Status s = stub_->SubmitJob(&context, request, &response);
  if (!s.ok()) return Fail("submit", s);
  Sanitize(&response);
  if (options_.json) {
    PrintJson(response);
  } else {
    std::cout << response.job_id() << "\n";
  }
  return kOk;
}

void Commands::PrintJob(const JobInfo& job) const {
  const absl::Time now = absl::Now();
  Table t;
  t.AddRow({"job:", job.spec().name().empty()
                        ? job.job_id()
                        : absl::StrCat(job.job_id(), " \"", job.spec().name(), "\"")});
  t.AddRow({"state:", v1::JobState_Name(job.state())});
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
    if (job.state() == v1::RUNNING) {
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
  if (!job.spec().has_program() || job.data().total_ranges() > 0) {
    t.AddRow({"data:", DataLine(job)});
  }
  for (auto& [label, value] : CheckpointStatusRows(job)) t.AddRow({label, value});
  t.AddRow({"time:", times});
  t.Print(std::cout);
}

int Commands::Status(const std::string& job_id) {
  JobInfo job;
  grpc::Status s = GetJob(job_id, job);
  if (!s.ok()) return Fail("status", s);
  if (options_.json) {
    PrintJson(job);
  } else {
    PrintJob(job);
    PrintCompression(job);
  }
  return kOk;
}

// Follows a job until it ends. A scheduler that goes away (e.g. restarts) is retried for a
// minute before psctl gives up with kUnreachable.
int Commands::Watch(const std::string& job_id) {
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
    if (done) return job.state() == v1::SUCCEEDED ? kOk : kRefused;
  }
}

int Commands::List() {
  grpc::ClientContext context;
  Prepare(context);
  v1::ListJobsResponse response;
  grpc::Status s = stub_->ListJobs(&context, v1::ListJobsRequest(), &response);
  if (!s.ok()) return Fail("list", s);
  Sanitize(&response);
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
    if (job.state() == v1::SUCCEEDED && p.test_accuracy() > 0) {
      progress = absl::StrCat("test ", Percent(p.test_accuracy()));
    } else if (p.total_clocks() > 0) {
      progress = absl::StrFormat("%.0f%% e%d/%d", 100.0 * p.clock() / p.total_clocks(), p.epoch(),
                                 TotalEpochs(job.spec()));
    }
    table.AddRow({job.job_id(), job.spec().name().empty() ? "-" : job.spec().name(),
                  v1::JobState_Name(job.state()),
                  job.spec().has_program()
                      ? "program"
                      : (job.spec().model().empty() ? "-" : job.spec().model()),
                  absl::StrCat(job.worker_nodes_size(), "/", job.spec().num_workers()), progress,
                  Age(job.submit_time_unix_ms(), now), job.reason()});
  }
  table.Print(std::cout);
  return kOk;
}

int Commands::Cancel(const std::string& job_id) {
  grpc::ClientContext context;
  Prepare(context);
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  JobInfo job;
  grpc::Status s = stub_->CancelJob(&context, request, &job);
  if (!s.ok()) return Fail("cancel", s);
  Sanitize(&job);
  if (options_.json) {
    PrintJson(job);
  } else {
    std::cout << job.job_id() << " " << v1::JobState_Name(job.state())
              << (job.reason().empty() ? "" : absl::StrCat(": ", job.reason())) << "\n";
  }
  return kOk;
}

int Commands::Events(const std::string& job_id) {
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

int Commands::Logs(const std::string& job_id, int worker, int lines) {
  grpc::ClientContext context;
  Prepare(context);
  v1::GetJobLogsRequest request;
  request.set_job_id(job_id);
  if (worker >= 0) request.set_worker_id(static_cast<uint32_t>(worker));
  v1::GetJobLogsResponse response;
  grpc::Status s = stub_->GetJobLogs(&context, request, &response);
  if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION && worker < 0) {
    return Events(job_id);  // a zoo job: its events are its log
  }
  if (!s.ok()) return Fail("logs", s);
  Sanitize(&response);
  if (options_.json) {
    PrintJson(response);
    return kOk;
  }
  if (response.logs().empty()) std::cout << "no program output yet\n";
  for (const v1::WorkerLog& w : response.logs()) {
    const v1::ProgramLog& log = w.log();
    std::cout << "== worker " << w.worker_id() << " (node " << w.node_id() << ", " << log.hostname()
              << ":" << log.path() << ", start " << log.starts() << ", sent "
              << FormatTimestamp(w.time_unix_ms()) << ") ==\n";
    const int first = std::max(0, log.lines_size() - lines);
    for (int i = first; i < log.lines_size(); ++i) std::cout << log.lines(i) << "\n";
  }
  return kOk;
}

int Commands::Checkpoint(const std::string& job_id) {
  grpc::ClientContext context;
  Prepare(context);
  v1::RequestCheckpointRequest request;
  request.set_job_id(job_id);
  v1::RequestCheckpointResponse response;
  grpc::Status s = stub_->RequestCheckpoint(&context, request, &response);
  if (!s.ok()) return Fail("checkpoint", s);
  Sanitize(&response);
  const bool wait = options_.wait;
  if (options_.json) {
    if (!wait) PrintJson(response);
  } else {
    std::cout << "checkpoint of " << job_id << " requested (request " << response.request_seq()
              << ")\n"
              << std::flush;
  }
  return wait ? WaitForCheckpoint(job_id, response.request_seq()) : kOk;
}

int Commands::Drain(uint64_t node_id) {
  v1::NodeInfo node;
  {
    grpc::ClientContext context;
    Prepare(context);
    v1::DrainNodeRequest request;
    request.set_node_id(node_id);
    grpc::Status s = stub_->DrainNode(&context, request, &node);
    if (!s.ok()) return Fail("drain", s);
  }
  Sanitize(&node);
  if (options_.json && !options_.wait) {
    PrintJson(node);
    return kOk;
  }
  std::cerr << "node " << node_id << " (" << node.address()
            << ") draining: it gets no new job; running jobs checkpoint, then move off it\n";
  if (!options_.wait) return kOk;
  const absl::Time deadline = absl::Now() + options_.wait_timeout;
  absl::Time next_progress = absl::Now();
  while (true) {
    grpc::ClientContext context;
    Prepare(context);
    v1::ListJobsResponse jobs;
    grpc::Status s = stub_->ListJobs(&context, v1::ListJobsRequest(), &jobs);
    if (s.ok()) {
      std::vector<std::string> users;
      for (const auto& job : jobs.jobs()) {
        if (job.state() != v1::RUNNING) continue;
        for (uint64_t id : job.server_nodes()) {
          if (id == node_id) users.push_back(job.job_id());
        }
      }
      if (users.empty()) break;
      if (absl::Now() >= next_progress) {
        std::cerr << "waiting for " << absl::StrJoin(users, ", ") << " to move off node " << node_id
                  << "\n";
        next_progress = absl::Now() + absl::Seconds(5);
      }
    } else if (s.error_code() != grpc::StatusCode::UNAVAILABLE) {
      return Fail("drain", s);
    }
    if (absl::Now() >= deadline) {
      std::cerr << "psctl: drain: node " << node_id << " is still used after "
                << absl::FormatDuration(options_.wait_timeout) << " (psctl events JOB says why)\n";
      return kRefused;
    }
    absl::SleepFor(absl::Milliseconds(500));
  }
  if (options_.json) {
    PrintJson(node);
  } else {
    std::cout << "node " << node_id << " (" << node.address()
              << ") drained: no running job uses it; it can be stopped\n";
  }
  return kOk;
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
int Commands::CheckpointOutcome(const v1::CheckpointInfo& c) const {
  if (options_.json) PrintJson(c);
  if (c.state() == v1::CHECKPOINT_COMPLETE || c.state() == v1::CHECKPOINT_PRUNED) {
    if (!options_.json) std::cout << CheckpointCompleteLine(c) << "\n";
    return kOk;
  }
  std::cerr << "psctl: checkpoint: " << CheckpointFailedLine(c) << "\n";
  return kRefused;
}

// Polls the catalog until the checkpoint answering `request_seq` is no longer WRITING, the job
// ends without it, or --wait_timeout passes. Progress goes to stderr every few seconds. A
// scheduler that goes away is retried for a minute, as by status --watch.
int Commands::WaitForCheckpoint(const std::string& job_id, uint64_t request_seq) {
  constexpr absl::Duration kPoll = absl::Seconds(1);
  constexpr absl::Duration kProgressEvery = absl::Seconds(5);
  constexpr absl::Duration kGiveUp = absl::Seconds(60);
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options_.wait_timeout;
  absl::Time next_progress = start + kProgressEvery;
  absl::Time last_answer = start;
  ProgressLine progress;
  std::optional<v1::CheckpointInfo> answer;  // the last seen, while WRITING
  for (bool first = true;; first = false) {
    if (!first) absl::SleepFor(kPoll);
    // The job first, the catalog second: a job seen ended has written all it ever will.
    JobInfo job;
    const bool have_job = (first || absl::Now() >= next_progress) && GetJob(job_id, job).ok();
    v1::ListCheckpointsResponse list;
    grpc::Status s = ListCheckpoints(job_id, list);
    const absl::Time now = absl::Now();
    if (s.ok()) {
      last_answer = now;
      const v1::CheckpointInfo* c = AnsweringCheckpoint(list, request_seq);
      if (c != nullptr && c->state() != v1::CHECKPOINT_WRITING &&
          c->state() != v1::CHECKPOINT_STATE_UNSPECIFIED) {
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
      std::cerr << "psctl: checkpoint: " << job_id << " ended (" << v1::JobState_Name(job.state())
                << ") before its checkpoint was complete (" << where << ")\n";
      return kRefused;
    }
    if (now >= deadline) {
      progress.Clear();
      std::cerr << "psctl: checkpoint: not complete after " << options_.wait_timeout << " ("
                << where << "); it may still complete: psctl checkpoints " << job_id << "\n";
      return kRefused;
    }
    if (now >= next_progress) {
      next_progress = now + kProgressEvery;
      std::string line = CheckpointWaitLine(job_id, request_seq, answer ? &*answer : nullptr,
                                            have_job ? &job : nullptr, now - start);
      if (!s.ok()) absl::StrAppend(&line, "; scheduler unreachable, retrying");
      progress.Show(line);
    }
  }
}

int Commands::Checkpoints(const std::string& job_id) {
  v1::ListCheckpointsResponse list;
  grpc::Status s = ListCheckpoints(job_id, list);
  if (!s.ok()) return Fail("checkpoints", s);
  if (options_.json) {
    PrintJson(list);
  } else {
    PrintCheckpoints(list, absl::Now(), std::cout);
  }
  return kOk;
}

// A running job rolls back (same job id in the answer); an ended one is submitted again from
// the checkpoint as a new job, whose id goes alone to stdout like `submit`'s.
int Commands::Restore(const std::string& job_id) {
  grpc::ClientContext context;
  Prepare(context);
  v1::RestoreJobRequest request;
  request.set_job_id(job_id);
  request.set_checkpoint_id(options_.checkpoint_id);
  JobInfo job;
  grpc::Status s = stub_->RestoreJob(&context, request, &job);
  if (!s.ok()) return Fail("restore", s);
  Sanitize(&job);
  const bool resubmitted = job.job_id() != job_id;
  if (options_.json) {
    PrintJson(job);
  } else if (resubmitted) {
    std::cout << job.job_id() << "\n" << std::flush;
  } else {
    std::cout << RollbackLine(job, request.checkpoint_id()) << "\n";
  }
  if (resubmitted) {
    std::cerr << "psctl: restore: " << ResubmitNote(job, job_id, request.checkpoint_id()) << "\n";
  }
  return kOk;
}

}  // namespace psctl
}  // namespace ps
