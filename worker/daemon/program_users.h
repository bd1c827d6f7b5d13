// The Unix users program jobs' programs run as: a range of uids the operator gives the worker
// daemon (ps_worker --program_uids=60000-60999), one uid per program run, so that a program
// cannot read the daemon's token files, another job's program's /proc/PID/environ (its
// credential), another job's folder or agent socket, or the servers' checkpoint files.
#ifndef PS_WORKER_DAEMON_PROGRAM_USERS_H_
#define PS_WORKER_DAEMON_PROGRAM_USERS_H_

#include <sys/types.h>

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace ps {

// The identity one program run gets: its uid, and a group of the same number.
struct ProgramUser {
  uid_t uid = 0;
  gid_t gid = 0;
};

// Inclusive; never holds uid 0.
struct UidRange {
  uid_t first = 0;
  uid_t last = 0;
};

// "60000-60999" (or one uid, "60000"). INVALID_ARGUMENT for anything else, a range holding 0 or
// the daemon's own uid, or a range of more than 2^20 uids.
absl::StatusOr<UidRange> ParseUidRange(const std::string& text);

// Hands out the range's uids in turn, one per program run. Thread-safe.
class ProgramUsers {
 public:
  explicit ProgramUsers(UidRange range) : range_(range), next_(range.first) {}
  ProgramUser Next() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const UidRange range_;
  absl::Mutex mu_;
  uid_t next_ ABSL_GUARDED_BY(mu_);
};

// OK if this process may run programs under other uids (it is root), else FAILED_PRECONDITION
// saying why.
absl::Status CanSwitchUsers();

// In a forked child, before exec: drops every supplementary group, takes `user`'s gid and uid
// (real, effective and saved) and forbids gaining privileges again (PR_SET_NO_NEW_PRIVS: setuid
// binaries do not raise them). Async-signal-safe; the errno of the first failing call, else 0.
int BecomeProgramUser(const ProgramUser& user);

// SIGKILLs every process of `user` (what a program left behind: children that left its process
// group or session), from a child that takes the uid. Waits for that child. Root only.
void KillAllProcessesOf(const ProgramUser& user);

}  // namespace ps

#endif  // PS_WORKER_DAEMON_PROGRAM_USERS_H_
