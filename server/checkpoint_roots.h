// Where a server may write checkpoints and read them back: the checkpoint roots an operator
// configured (ps_server --checkpoint_roots). Paths that clients send (Checkpoint's path, a
// restore order's shard paths) are checked against them before any file is touched.
#ifndef PS_SERVER_CHECKPOINT_ROOTS_H_
#define PS_SERVER_CHECKPOINT_ROOTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ps {

// Immutable after Create(): thread-safe. No roots (the default) refuses every path.
class CheckpointRoots {
 public:
  CheckpointRoots() = default;
  // Each root must be an absolute path; it is lexically normalized and, as far as it exists,
  // resolved with realpath (so /tmp/x and a symlink to it name the same root).
  static absl::StatusOr<CheckpointRoots> Create(const std::vector<std::string>& roots);

  // OK if `path` is absolute, holds no control character, and lies strictly under one of the
  // roots once lexically normalized (no "..") and with the symlinks of its existing part
  // resolved (a symlink under a root cannot lead out of it). Else INVALID_ARGUMENT naming
  // `what` ("checkpoint path", ...), the path and the roots. Checked when asked: a symlink
  // planted later by someone who can write under a root is outside this check.
  absl::Status Check(const std::string& path, const char* what) const;

  bool empty() const { return roots_.empty(); }
  const std::vector<std::string>& roots() const { return roots_; }

 private:
  std::vector<std::string> roots_;  // normalized and resolved
};

}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_ROOTS_H_
