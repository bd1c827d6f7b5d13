// The folders of one program run on a worker host (program_job.cc): <work_dir>/<job>/
// worker-<id>/ with the program's log and its agent's socket, and the program's own folder.
#ifndef PS_WORKER_DAEMON_PROGRAM_FOLDER_H_
#define PS_WORKER_DAEMON_PROGRAM_FOLDER_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/daemon/program_users.h"

namespace ps {

// Where a program run lives: `dir` (<work_dir>/<job>/worker-<id>/) holds its log and its
// agent's socket; `home` is the program's own folder (its PS_WORK_DIR and default working
// directory).
struct ProgramFolder {
  std::string socket;
  std::string home;
};

// Makes the run's folders and names the agent socket's path. Without a user of its own: `dir`
// is the daemon user's only (0700) and is the program's folder too. With one: `dir` is the
// daemon's, entered by the program's group only (0710; its parent made passable, 0711), and
// `home` = dir/home (0700) the program user's; a `home` of another owner (an earlier run under
// another uid) or that is not a directory (a link) is removed first, without following links.
// FAILED_PRECONDITION naming the path where they cannot be made, or where the socket's path
// would be too long.
absl::StatusOr<ProgramFolder> MakeProgramFolder(const std::string& dir,
                                                const std::optional<ProgramUser>& user);

}  // namespace ps

#endif  // PS_WORKER_DAEMON_PROGRAM_FOLDER_H_
