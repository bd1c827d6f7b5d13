#include "worker/daemon/program_folder.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ps {
namespace {

// sockaddr_un's path holds 108 bytes.
constexpr size_t kMaxSocketPath = 100;

// Makes sure `path` is a directory owned by `uid`:`gid` with `mode`. A previous run's (of
// another user) is removed first: a program never finds another's files. Not following
// symlinks: a program's leftovers cannot send the daemon elsewhere.
absl::Status MakeOwnedDir(const std::string& path, uid_t uid, gid_t gid, mode_t mode,
                          bool fresh_for_new_owner) {
  struct stat st;
  std::error_code ec;
  if (lstat(path.c_str(), &st) == 0 &&
      (!S_ISDIR(st.st_mode) || (fresh_for_new_owner && st.st_uid != uid))) {
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::create_directories(path, ec);
  if (ec || lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
      lchown(path.c_str(), uid, gid) != 0 || chmod(path.c_str(), mode) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot make the program's folder ", path, ": ", ec ? ec.message() : std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ProgramFolder> MakeProgramFolder(const std::string& dir,
                                                const std::optional<ProgramUser>& user) {
  ProgramFolder f;
  f.socket = dir + "/agent.sock";
  if (f.socket.size() > kMaxSocketPath) {
    return absl::FailedPreconditionError(
        absl::StrCat("the worker's --work_dir is too long for a Unix socket path (", f.socket, ": ",
                     f.socket.size(), " bytes; at most ", kMaxSocketPath, ")"));
  }
  if (!user.has_value()) {
    PS_RETURN_IF_ERROR(MakeOwnedDir(dir, geteuid(), getegid(), 0700, false));
    f.home = dir;
    return f;
  }
  PS_RETURN_IF_ERROR(MakeOwnedDir(dir, geteuid(), user->gid, 0710, false));
  // <work_dir>/<job>, made with the daemon's umask (0027 under systemd): passable by all.
  chmod(std::filesystem::path(dir).parent_path().c_str(), 0711);
  f.home = dir + "/home";
  PS_RETURN_IF_ERROR(MakeOwnedDir(f.home, user->uid, user->gid, 0700, true));
  return f;
}

}  // namespace ps
