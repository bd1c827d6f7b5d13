#include "worker/daemon/job_checkpointer.h"

#include <glog/logging.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "client/job_admin.h"

namespace ps {
namespace {

// A write of a large table takes a while; this bounds how long a dead server can hold it up.
constexpr absl::Duration kAwaitTimeout = absl::Minutes(30);
// AwaitCheckpoint is asked in tries of this long, so that the end of the run (the destructor)
// is noticed between two.
constexpr absl::Duration kAwaitTry = absl::Seconds(2);
constexpr absl::Duration kSchedulerTimeout = absl::Seconds(10);
// BeginCheckpoint runs in a training step: a scheduler that is away (restarting, partitioned
// from this worker) holds the step up this long at most, then training goes on without it.
constexpr absl::Duration kBeginTimeout = absl::Seconds(2);
constexpr absl::Duration kReportPatience = absl::Seconds(60);
constexpr absl::Duration kRetryBeginAfter = absl::Seconds(5);

}  // namespace

JobCheckpointer::JobCheckpointer(v1::Scheduler::StubInterface* scheduler, RpcClient* client,
                                 std::string job_id, v1::CheckpointPolicy policy,
                                 uint64_t shard_epoch, std::function<uint64_t()> requests,
                                 uint64_t requests_done, std::function<NodeIdentity()> identity)
    : scheduler_(scheduler),
      client_(client),
      job_id_(std::move(job_id)),
      policy_(std::move(policy)),
      shard_epoch_(shard_epoch),
      requests_(std::move(requests)),
      identity_(std::move(identity)),
      last_begin_(absl::Now()),
      requests_done_(requests_done) {}

JobCheckpointer::~JobCheckpointer() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  if (writer_.joinable()) writer_.join();
}

uint64_t JobCheckpointer::requests_done() const {
  absl::MutexLock l(&mu_);
  return requests_done_;
}

void JobCheckpointer::MaybeCheckpoint(int64_t clock, int64_t previous) {
  if (previous < 0) previous = clock - 1;
  const uint64_t requested = requests_();
  uint64_t request_seq = 0;
  {
    absl::MutexLock l(&mu_);
    if (writing_) return;  // the next step tries again
    if (requested > requests_done_) request_seq = requested;
  }
  const bool by_steps = policy_.every_steps() > 0 && clock > previous &&
                        clock / policy_.every_steps() > previous / policy_.every_steps();
  const bool by_time = policy_.every_seconds() > 0 &&
                       absl::Now() - last_begin_ >= absl::Seconds(policy_.every_seconds());
  if (request_seq == 0 && !by_steps && !by_time) return;
  if (absl::Now() < retry_after_) return;
  if (writer_.joinable()) writer_.join();  // the previous one has reported

  v1::BeginCheckpointRequest begin;
  begin.set_job_id(job_id_);
  begin.set_clock(clock);
  begin.set_shard_epoch(shard_epoch_);
  begin.set_request_seq(request_seq);
  if (identity_) {
    const NodeIdentity node = identity_();
    begin.set_node_id(node.node_id);
    begin.set_node_secret(node.secret);
  }
  v1::CheckpointInfo info;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kBeginTimeout));
  absl::Status s = FromGrpcStatus(scheduler_->BeginCheckpoint(&ctx, begin, &info));
  last_begin_ = absl::Now();
  if (!s.ok()) {
    retry_after_ = last_begin_ + kRetryBeginAfter;
    LOG(WARNING) << job_id_ << ": no checkpoint at clock " << clock << ": " << s
                 << " (next attempt in " << absl::FormatDuration(kRetryBeginAfter) << " or later)";
    return;
  }
  std::vector<std::string> paths;
  for (const v1::CheckpointShard& shard : info.shards()) paths.push_back(shard.path());
  const absl::Time begun = absl::Now();
  auto snapshot = JobAdmin(*client_).SnapshotCheckpoint(info.checkpoint_id(), clock, paths);
  {
    absl::MutexLock l(&mu_);
    if (request_seq > requests_done_) requests_done_ = request_seq;
    writing_ = true;
  }
  if (!snapshot.ok()) {
    v1::FinishCheckpointRequest finish;
    finish.set_job_id(job_id_);
    finish.set_checkpoint_id(info.checkpoint_id());
    finish.set_error(std::string(snapshot.status().message()));
    Report(finish);
    return;
  }
  LOG(INFO) << job_id_ << ": checkpoint " << info.checkpoint_id() << " at clock " << clock
            << ": servers copied their rows in " << absl::FormatDuration(absl::Now() - begun)
            << "; writing to " << info.dir();
  writer_ = std::thread([this, id = info.checkpoint_id(), begun] { Finish(id, begun); });
}

void JobCheckpointer::Finish(uint64_t id, absl::Time begun) {
  const absl::Time give_up = begun + kAwaitTimeout;
  absl::StatusOr<std::vector<v1::CheckpointResponse>> written;
  while (true) {
    // DEADLINE_EXCEEDED: a server still writes, or did not answer within the try.
    written = JobAdmin(*client_).AwaitCheckpoint(id, std::min(kAwaitTry, give_up - absl::Now()));
    if (written.ok() || written.status().code() != absl::StatusCode::kDeadlineExceeded ||
        absl::Now() >= give_up) {
      break;
    }
    absl::MutexLock l(&mu_);
    if (stopping_) {
      written = absl::CancelledError(
          absl::StrCat("the run ended (a new shard map, or the job stopped) before every server "
                       "confirmed its write; last: ",
                       written.status().message()));
      break;
    }
  }
  v1::FinishCheckpointRequest finish;
  finish.set_job_id(job_id_);
  finish.set_checkpoint_id(id);
  finish.set_write_seconds(absl::ToDoubleSeconds(absl::Now() - begun));
  if (written.ok()) {
    for (const v1::CheckpointResponse& r : *written) {
      if (!r.done()) {
        finish.clear_shards();
        finish.set_error("a server answered before its write was done");
        break;
      }
      v1::CheckpointShard* shard = finish.add_shards();
      shard->set_rows(r.rows());
      shard->set_bytes(r.bytes());
      shard->set_receipt(r.receipt());  // the server's word for them
    }
  } else {
    finish.set_error(std::string(written.status().message()));
  }
  Report(finish);
}

void JobCheckpointer::Report(v1::FinishCheckpointRequest finish) {
  if (identity_) {
    const NodeIdentity node = identity_();
    finish.set_node_id(node.node_id);
    finish.set_node_secret(node.secret);
  }
  v1::CheckpointInfo info;
  absl::Status s;
  // A scheduler that restarts is back within seconds: keep the report until then.
  const absl::Time give_up = absl::Now() + kReportPatience;
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + kSchedulerTimeout));
    s = FromGrpcStatus(scheduler_->FinishCheckpoint(&ctx, finish, &info));
    if (s.code() != absl::StatusCode::kUnavailable || absl::Now() > give_up) break;
    absl::SleepFor(absl::Seconds(1));
  }
  const uint64_t id = finish.checkpoint_id();
  if (!s.ok()) {
    LOG(WARNING) << job_id_ << ": checkpoint " << id << ": " << s;
  } else if (info.state() == v1::CHECKPOINT_COMPLETE) {
    LOG(INFO) << job_id_ << ": checkpoint " << id << " complete (clock " << info.clock() << ", "
              << info.dir() << ")";
  } else {
    LOG(WARNING) << job_id_ << ": checkpoint " << id << " failed: " << info.error();
  }
  absl::MutexLock l(&mu_);
  writing_ = false;
}

}  // namespace ps
