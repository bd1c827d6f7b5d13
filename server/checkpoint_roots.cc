#include "server/checkpoint_roots.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ps {
namespace fs = std::filesystem;
namespace {

constexpr size_t kMaxPathBytes = 4096;

bool HasControlChar(const std::string& s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

// `path` (absolute, lexically normal) with the symlinks of its longest existing prefix resolved.
absl::StatusOr<fs::path> Resolve(const fs::path& path) {
  fs::path existing = path;
  fs::path rest;
  std::error_code ec;
  // symlink_status: a dangling symlink counts as existing, so canonical() below refuses it.
  while (!fs::exists(fs::symlink_status(existing, ec)) && existing != existing.root_path()) {
    rest = rest.empty() ? existing.filename() : existing.filename() / rest;
    existing = existing.parent_path();
  }
  fs::path resolved = fs::canonical(existing, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve ", existing.string(), ": ", ec.message()));
  }
  return rest.empty() ? resolved : resolved / rest;
}

// True if `path` is strictly below `root` (component-wise; both normalized).
bool IsUnder(const fs::path& path, const fs::path& root) {
  auto p = path.begin();
  for (auto r = root.begin(); r != root.end(); ++r, ++p) {
    if (r->empty()) continue;  // a trailing separator of the root
    if (p == path.end() || *p != *r) return false;
  }
  for (; p != path.end(); ++p) {
    if (!p->empty()) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<CheckpointRoots> CheckpointRoots::Create(const std::vector<std::string>& roots) {
  CheckpointRoots out;
  for (const std::string& root : roots) {
    if (root.empty() || root.size() > kMaxPathBytes || HasControlChar(root) ||
        !fs::path(root).is_absolute()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint root '", root, "' is not an absolute path"));
    }
    const fs::path normal = fs::path(root).lexically_normal();
    if (normal == normal.root_path()) {
      return absl::InvalidArgumentError("checkpoint root '/' would let checkpoints go anywhere");
    }
    auto resolved = Resolve(normal);
    if (!resolved.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint root '", root, "': ", resolved.status().message()));
    }
    std::string r = resolved->string();
    while (r.size() > 1 && r.back() == '/') r.pop_back();
    out.roots_.push_back(std::move(r));
  }
  return out;
}

absl::Status CheckpointRoots::Check(const std::string& path, const char* what) const {
  const std::string roots = roots_.empty() ? std::string("none: set ps_server --checkpoint_roots")
                                           : absl::StrJoin(roots_, ", ");
  auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", path.substr(0, 256), "' ", why,
                                                   " (checkpoint roots: ", roots, ")"));
  };
  if (roots_.empty()) return refuse("is refused: this server has no checkpoint roots");
  if (path.empty() || path.size() > kMaxPathBytes || HasControlChar(path)) {
    return refuse("is empty, too long or holds a control character");
  }
  if (!fs::path(path).is_absolute()) return refuse("is not an absolute path");
  auto resolved = Resolve(fs::path(path).lexically_normal());
  if (!resolved.ok()) return refuse(resolved.status().message());
  for (const std::string& root : roots_) {
    if (IsUnder(*resolved, fs::path(root))) return absl::OkStatus();
  }
  return refuse(
      absl::StrCat("is not under a checkpoint root (it resolves to ", resolved->string(), ")"));
}

}  // namespace ps
