#include "worker/daemon/program_users.h"

#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ps {

absl::StatusOr<UidRange> ParseUidRange(const std::string& text) {
  const std::vector<std::string> parts = absl::StrSplit(text, absl::MaxSplits('-', 1));
  uint32_t first = 0, last = 0;
  if (!absl::SimpleAtoi(parts[0], &first) ||
      !absl::SimpleAtoi(parts.size() == 2 ? parts[1] : parts[0], &last) || first > last) {
    return absl::InvalidArgumentError(
        absl::StrCat("--program_uids '", text, "' is not a range of uids like 60000-60999"));
  }
  if (first == 0) {
    return absl::InvalidArgumentError("--program_uids must not hold uid 0 (root)");
  }
  const uid_t own = getuid();
  if (own >= first && own <= last) {
    return absl::InvalidArgumentError(
        absl::StrCat("--program_uids ", text, " holds this daemon's own uid ", own));
  }
  if (last - first >= (1u << 20) || last == static_cast<uint32_t>(-1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--program_uids ", text, " is too large a range (at most 2^20 uids)"));
  }
  return UidRange{first, last};
}

ProgramUser ProgramUsers::Next() {
  absl::MutexLock l(&mu_);
  const uid_t uid = next_;
  next_ = next_ == range_.last ? range_.first : next_ + 1;
  return ProgramUser{uid, static_cast<gid_t>(uid)};
}

absl::Status CanSwitchUsers() {
  if (geteuid() == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("this daemon runs as uid ", geteuid(),
                                                    ", not root: it cannot run programs "
                                                    "under the uids of --program_uids"));
}

int BecomeProgramUser(const ProgramUser& user) {
  if (setgroups(0, nullptr) != 0) return errno;
  if (setresgid(user.gid, user.gid, user.gid) != 0) return errno;
  if (setresuid(user.uid, user.uid, user.uid) != 0) return errno;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
  return 0;
}

void KillAllProcessesOf(const ProgramUser& user) {
  const pid_t pid = fork();
  if (pid < 0) return;
  if (pid == 0) {
    // kill(-1) as the user reaches exactly the processes whose real or saved uid is the user's
    // (and not this one).
    if (setresgid(user.gid, user.gid, user.gid) != 0 ||
        setresuid(user.uid, user.uid, user.uid) != 0) {
      _exit(1);
    }
    kill(-1, SIGKILL);
    _exit(0);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace ps
