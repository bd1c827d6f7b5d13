#include "client/job_run.h"

#include <algorithm>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/job_admin.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace ps {
namespace {

constexpr char kNewShardMapPayload[] = "ps.new_shard_map";

absl::Status NewShardMap(const std::string& message) {
  absl::Status s = absl::AbortedError(message);
  s.SetPayload(kNewShardMapPayload, absl::Cord("1"));
  return s;
}

}  // namespace

bool IsNewShardMap(const absl::Status& s) {
  return !s.ok() && s.GetPayload(kNewShardMapPayload).has_value();
}

bool IsRecoverableRpcError(const absl::Status& s) {
  const absl::StatusCode code = s.code();
  return IsRpcError(s) &&
         (code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded ||
          code == absl::StatusCode::kFailedPrecondition || code == absl::StatusCode::kAborted ||
          code == absl::StatusCode::kDataLoss || code == absl::StatusCode::kNotFound);
}

namespace {

// Carries out `a`'s restore order if it is for `a`'s shard map: the clock to start at (`clock`
// unless the restore sets it). A restore that failed because of the checkpoint itself (corrupt,
// missing, incompatible) is reported to the scheduler, which then picks another.
absl::StatusOr<int64_t> RestoreOrdered(RpcClient& client, const v1::WorkerAssignment& a,
                                       const RunStartOptions& options, int64_t clock) {
  if (!a.has_restore() || a.restore().shard_epoch() != a.shard_epoch()) return clock;
  auto log = [&options](const std::string& line) {
    if (options.log) options.log(line);
  };
  const absl::Time start = absl::Now();
  auto restored = JobAdmin(client).Restore(a.restore(), absl::Minutes(10));
  if (!restored.ok()) {
    const absl::StatusCode code = restored.status().code();
    log(absl::StrCat(a.job_id(), ": restore from checkpoint ", a.restore().checkpoint_id(),
                     " failed: ", restored.status().ToString()));
    if ((code == absl::StatusCode::kDataLoss || code == absl::StatusCode::kNotFound ||
         code == absl::StatusCode::kInvalidArgument) &&
        options.report_restore_failure) {
      options.report_restore_failure(a, restored.status());
    }
    return restored.status();
  }
  log(absl::StrCat(a.job_id(), ": restored (", a.restore().reason(), ") from checkpoint ",
                   a.restore().checkpoint_id(), " in ", absl::FormatDuration(absl::Now() - start),
                   a.restore().rollback() ? absl::StrCat("; back to clock ", *restored) : ""));
  return a.restore().rollback() || *restored > clock ? *restored : clock;
}

}  // namespace

absl::StatusOr<RunStart> StartRun(const v1::WorkerAssignment& assignment,
                                  const RunStartOptions& options) {
  v1::WorkerAssignment a = assignment;
  auto log = [&options](const std::string& line) {
    if (options.log) options.log(line);
  };
  RpcClientOptions co;
  co.servers.assign(a.servers().begin(), a.servers().end());
  co.slot_owners.assign(a.slot_owners().begin(), a.slot_owners().end());
  co.shard_epoch = std::max<uint64_t>(1, a.shard_epoch());
  co.job_id = a.job_id();
  co.worker_id = a.worker_id();
  co.rpc_timeout = options.rpc_timeout;
  co.reject_nonfinite = false;  // the servers' --nonfinite policy decides
  PS_ASSIGN_OR_RETURN(std::unique_ptr<RpcClient> client, RpcClient::Connect(co));
  // Tell the servers the job and its workers; a worker joining a running job learns its clock.
  // FAILED_PRECONDITION: the servers have a newer membership already (it changed while this
  // worker started); the newer order comes with the next heartbeat.
  int64_t clock = -1;
  // Servers that took over slots learn this worker's clock from it, unless the job rolls back
  // (the restore then sets every clock; an old clock arriving after it would undo that).
  const bool rollback =
      a.has_restore() && a.restore().shard_epoch() == a.shard_epoch() && a.restore().rollback();
  // Each attempt waits at most kConfigureAttempt for a server: one that does not answer (it
  // died, maybe after this map was made) is asked again, but a newer shard map (which moves
  // its slots away) is taken as soon as it comes instead of after a long deadline.
  constexpr absl::Duration kConfigureAttempt = absl::Seconds(2);
  const absl::Time configure_deadline = absl::Now() + absl::Seconds(60);
  for (int attempt = 0;; ++attempt) {
    std::vector<uint32_t> workers(a.worker_ids().begin(), a.worker_ids().end());
    absl::Status s = JobAdmin(*client, kConfigureAttempt)
                         .WithSlotBackups({a.slot_backups().begin(), a.slot_backups().end()})
                         .ConfigureJob(a.spec().consistency(), workers, a.membership_epoch(),
                                       &clock, rollback ? -1 : options.last_clock,
                                       /*even_out_clock=*/!rollback);
    if (s.ok()) break;
    const bool newer_membership = s.code() == absl::StatusCode::kFailedPrecondition;
    const bool unanswered = s.code() == absl::StatusCode::kDeadlineExceeded ||
                            s.code() == absl::StatusCode::kUnavailable;
    if ((!newer_membership && !unanswered) || attempt == 20 || absl::Now() > configure_deadline) {
      return s;
    }
    log(absl::StrCat(a.job_id(), ": ", s.message(),
                     newer_membership ? "; waiting for the newer order"
                                      : "; asking again unless a newer shard map comes"));
    absl::SleepFor(absl::Milliseconds(500));
    if (!options.latest) continue;
    PS_ASSIGN_OR_RETURN(v1::WorkerAssignment latest, options.latest());
    if (latest.job_id() != a.job_id() || latest.worker_id() != a.worker_id()) {
      return absl::CancelledError("the assignment was withdrawn while starting");
    }
    if (latest.shard_epoch() != a.shard_epoch()) {
      return NewShardMap("a new shard map came while starting");
    }
    a = std::move(latest);
  }
  for (v1::TableSpec t : options.tables) {
    t.set_job_id(a.job_id());
    PS_RETURN_IF_ERROR(client->CreateTable(t));
  }
  PS_ASSIGN_OR_RETURN(clock, RestoreOrdered(*client, a, options, clock));
  if (options.resend != nullptr && !rollback &&
      a.spec().consistency().mode() == v1::ConsistencySpec::SYNC) {
    const absl::Time start = absl::Now();
    absl::Status resent = ResendMovedSlots(*client, *options.resend);
    if (!resent.ok()) {
      return WithPrefix(resent, absl::StrCat("re-sending the push of clock ", options.resend->clock,
                                             " for the slots that moved"));
    }
    log(absl::StrCat(a.job_id(), ": re-sent the push of clock ", options.resend->clock,
                     " for the slots that moved (shard epoch ", a.shard_epoch(), ") in ",
                     absl::FormatDuration(absl::Now() - start)));
  }
  client->SetClock(std::max<int64_t>(clock, 0));  // -1 cannot happen: this worker is in the set
  RunStart start;
  start.clock = client->clock();
  start.client = std::move(client);
  start.assignment = std::move(a);
  return start;
}

}  // namespace ps
