// ps::Session: a program run by a worker daemon as a program job (docs/jobs.md).
//
//   auto session = ps::Session::FromEnv();           // absl::StatusOr<unique_ptr<Session>>
//   ps::Client& client = (*session)->client();       // the job's servers, managed by the session
//   auto emb = (*session)->table("emb");             // a table the job file declares
//   auto step = (*session)->Begin(total_steps);      // where to start (a restart resumes)
//   while (*step < total_steps) {
//     absl::Status s = client.Pull(emb, keys, absl::MakeSpan(values));
//     if (ps::IsStepInterrupted(s)) { step = (*session)->Next(); continue; }  // see below
//     if (!s.ok()) return 1;
//     (*session)->Prefetch(emb, next_keys);          // optional: a disk tier's next rows
//     ... compute, push (client.PushPull advances the clock; else Next() does) ...
//     (*session)->Report({.loss = loss, .samples = batch});
//     step = (*session)->Next();                     // the next step to run
//   }
//
// The worker daemon starts the program with PS_AGENT (its local endpoint), PS_JOB_ID,
// PS_WORKER_ID, PS_RANK and PS_NUM_WORKERS in the environment. The session gets the job's
// tables, servers and shard map from the daemon, reports progress through it (psctl status,
// the worker's /metrics) and recovers on its own when a server dies: a request that could not
// complete because of it, and every later request of the step, returns ABORTED "step
// interrupted: ..." (ps::IsStepInterrupted(status) is true; a pull's buffer is then incomplete
// and must not be used; step_interrupted() says the same). The program skips the rest of the
// step and calls Next() (or NextBatch()), which waits for the new shard map, carries out the
// scheduler's restore order and returns the step to run next: the same one again, or an
// earlier one when a sync job rolls back to its last checkpoint. Report() of an interrupted
// step is ignored (it never fails the job).
//
// A job of dynamic data assignment (data_assignment: DYNAMIC in its job file, ssp or async)
// loops on NextBatch() instead: the scheduler hands out the ranges of each epoch as workers
// ask, so that a fast worker reads more than a slow one and every example is read once per
// epoch:
//
//   while (true) {
//     auto batch = (*session)->NextBatch(num_examples, batch_size);  // ends the previous step
//     if (!batch.ok()) return 1;
//     if (!batch->has_value()) break;                // every range of every epoch is read
//     ... pull, compute on (*batch)->examples, push ...
//     (*session)->Report({.loss = loss, .samples = batch_size});
//   }
#ifndef PS_SESSION_H_
#define PS_SESSION_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ps/client.h"
#include "ps/export.h"

namespace ps {

struct SessionOptions {
  // The daemon's endpoint ("unix:/path"); empty: $PS_AGENT.
  std::string agent;
  // How long Next() waits for a new shard map after a server failed before it gives up.
  absl::Duration recovery_wait = absl::Seconds(90);
  // Deadline of one data-plane request.
  absl::Duration rpc_timeout = kDefaultRpcTimeout;
  // Lines about recoveries go to standard error; false: silent.
  bool log_to_stderr = true;
};

// What a step (or an evaluation) reports; unset fields keep their last value.
struct StepReport {
  std::optional<double> loss;             // this step's training loss (a running mean is reported)
  std::optional<double> accuracy;         // this step's training accuracy
  int64_t samples = 0;                    // examples in this step (for samples/s)
  std::map<std::string, double> metrics;  // any other figures (at most 16 names are kept)
};

// A range of examples handed to this worker (NextBatch).
struct DataBatch {
  int32_t epoch = 1;              // 1-based, of the job's `epochs`
  uint64_t index = 0;             // the range's number in the job (epoch-major)
  int64_t step = 0;               // the clock its pushes and pulls are at
  std::vector<int64_t> examples;  // indices into the data set, in [0, num_examples)
  int32_t epochs_done = 0;        // epochs of the whole job whose every range has been read
};

class PS_EXPORT Session {
 public:
  // FAILED_PRECONDITION if the program was not started by a worker daemon (no PS_AGENT).
  static absl::StatusOr<std::unique_ptr<Session>> FromEnv(SessionOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::string& job_id() const;
  uint32_t worker_id() const;
  // This worker's index among the job's live workers, and their number (change when workers
  // die or join: read them at every step to pick the step's data).
  uint32_t rank() const;
  uint32_t num_workers() const;
  Consistency consistency() const;
  int staleness() const;

  // The client of the job's servers, owned by the session and valid as long as it (to share
  // it, share the session: std::shared_ptr<Client>(session_ptr, &session_ptr->client())). Its
  // CreateTable returns a declared table (an undeclared name is INVALID_ARGUMENT; the job
  // file's initializer and optimizer apply), OpenTable finds declared tables only.
  Client& client();
  // A table the job file declares; NOT_FOUND naming the declared ones otherwise.
  absl::StatusOr<Table> table(const std::string& name) const;
  std::vector<Table> tables() const;
  // Announces the keys of the next batch, so that the servers read their rows from their disk
  // tier into RAM while this step computes (client().PrefetchAsync; docs/embedding-tables.md,
  // "Prefetch"). Returns at once; the keys are copied. Waiting for the Pending is optional (a
  // failed prefetch changes nothing: the pull reads the rows from disk itself). In an
  // interrupted step it is not sent.
  Pending Prefetch(const Table& table, absl::Span<const uint64_t> keys);

  // The loop helper. Begin() says how many steps the program runs (steps_per_epoch: for the
  // epoch shown in psctl status; 0: one epoch) and returns the step to start at (0, or where a
  // restarted program or a job started from a checkpoint resumes). Next() ends the current
  // step: advances the clock if the step did not (Client::PushPull does), recovers from a
  // server failure, reports progress (a checkpoint may be taken then, on the worker of rank
  // 0) and returns the step to run next (total_steps: done).
  absl::StatusOr<int64_t> Begin(int64_t total_steps, int64_t steps_per_epoch = 0);
  absl::StatusOr<int64_t> Next();
  // Adds the step's figures to the progress reported at Next(). A non-finite loss is
  // INVALID_ARGUMENT, and the daemon fails the job with it. In an interrupted step it does
  // nothing and returns OK (the step runs again).
  absl::Status Report(const StepReport& report);
  // True from the moment a request of the current step could not complete because the job's
  // shard map changed (a server died) until Next() or NextBatch() has recovered: the step's
  // requests return IsStepInterrupted errors and its results must not be used.
  bool step_interrupted() const;
  // An evaluation's result (held-out loss and accuracy, and metrics such as "auc"), reported
  // at once; the job's final result when made after the last step.
  absl::Status ReportEvaluation(std::optional<double> test_loss,
                                std::optional<double> test_accuracy,
                                const std::map<std::string, double>& metrics = {});
  // Asks for a checkpoint of the job's tables (taken by the worker of rank 0 at its next step).
  absl::Status RequestCheckpoint();
  // Whether the job's data is handed out by the scheduler (data_assignment DYNAMIC).
  bool dynamic_data() const;
  // Dynamic data assignment: ends the current step (the range it read is reported done, its
  // pushes having returned; after a server failure it recovers instead, and the range is read
  // again), reports progress (a checkpoint may be taken then), and returns the next range of
  // the data set of `num_examples` examples cut into ranges of `batch_size` in an order
  // shuffled by the job's seed; nullopt once every range of every epoch has been read (by any
  // worker). A range's examples are computed here, so any size costs the scheduler nothing;
  // num_examples and batch_size must be the same at every call and on every worker
  // (INVALID_ARGUMENT otherwise). FAILED_PRECONDITION for a job of STATIC assignment.
  absl::StatusOr<std::optional<DataBatch>> NextBatch(int64_t num_examples, int batch_size);

  // Server losses recovered from so far.
  int recoveries() const;

 private:
  class Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ps

#endif  // PS_SESSION_H_
