#include "server/job_grants.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/job_tables.h"
#include "common/printable.h"

namespace ps {
namespace fs = std::filesystem;
namespace {

// `text` is `prefix` followed by one or more decimal digits.
bool IsNumbered(const std::string& text, absl::string_view prefix) {
  if (!absl::StartsWith(text, prefix) || text.size() == prefix.size()) return false;
  for (size_t i = prefix.size(); i < text.size(); ++i) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(text[i]))) return false;
  }
  return true;
}

// The parts of `path` below `root` (both normalized), or false if it is not strictly below.
bool PartsBelow(const fs::path& path, const fs::path& root, std::vector<std::string>* parts) {
  auto p = path.begin();
  for (auto r = root.begin(); r != root.end(); ++r, ++p) {
    if (r->empty()) continue;  // a trailing separator of the root
    if (p == path.end() || *p != *r) return false;
  }
  parts->clear();
  for (; p != path.end(); ++p) {
    if (!p->empty()) parts->push_back(p->string());
  }
  return !parts->empty();
}

// `text` ends in ".<digits>", as the scheduler's job folders do.
bool IsJobFolderLike(const std::string& text) {
  const size_t dot = text.rfind('.');
  return dot != std::string::npos && IsNumbered(text.substr(dot), ".");
}

// `parts` (below a root) end in <job_id>.<digits>/ckpt-<digits>/shard-<digits>, and no part
// before those three is a ckpt-N, a shard-N or a job's folder (X.<digits>): the path creates
// nothing in another job's folder.
bool IsJobShardFolder(const std::string& job_id, const std::vector<std::string>& parts) {
  const size_t n = parts.size();
  if (n < 3 || !IsNumbered(parts[n - 3], job_id + ".") || !IsNumbered(parts[n - 2], "ckpt-") ||
      !IsNumbered(parts[n - 1], "shard-")) {
    return false;
  }
  for (size_t i = 0; i + 3 < n; ++i) {
    if (IsNumbered(parts[i], "ckpt-") || IsNumbered(parts[i], "shard-") ||
        IsJobFolderLike(parts[i])) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::Status CheckJobTableId(const std::string& job_id, uint32_t table_id) {
  const uint32_t first = FirstTableIdOf(job_id);
  if (table_id >= first && table_id - first < kTableIdsPerJob) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "table id ", table_id, " is not one of job '", Printable(job_id, 64),
      "''s (the scheduler numbers its tables ", first, "..", first + kTableIdsPerJob - 1,
      "): a job's credential creates only the tables the scheduler assigned to its job; nothing "
      "was created"));
}

absl::Status CheckJobCheckpointPath(const std::string& job_id, const std::string& path,
                                    const std::vector<std::string>& roots) {
  auto refuse = [&] {
    return absl::PermissionDeniedError(absl::StrCat(
        "checkpoint path '", Printable(path, 256), "' is not job '", Printable(job_id, 64),
        "''s own: a job's credential writes checkpoints only as the scheduler names them, <a "
        "checkpoint root>/",
        Printable(job_id, 64), ".<submit time>/ckpt-<id>/shard-<k>; nothing was written"));
  };
  if (path.empty() || !fs::path(path).is_absolute() || job_id.empty()) return refuse();
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(fs::path(path).lexically_normal(), ec);
  if (ec) return refuse();
  std::vector<std::string> parts;
  for (const std::string& root : roots) {
    if (PartsBelow(resolved, fs::path(root), &parts) && IsJobShardFolder(job_id, parts)) {
      return absl::OkStatus();
    }
  }
  return refuse();
}

grpc::Status JobGrants::CheckCreateTable(const Authorizer* authorizer,
                                         const grpc::ServerContextBase& context,
                                         const v1::TableSpec& spec) const {
  if (authorizer == nullptr || authorizer->JobScope(context).empty()) return grpc::Status::OK;
  const absl::Status s = CheckJobTableId(spec.job_id(), spec.table_id());
  if (!s.ok()) authorizer->CountRefusal("table_id");
  return ToGrpcStatus(s);
}

grpc::Status JobGrants::CheckCheckpoint(const Authorizer* authorizer,
                                        const grpc::ServerContextBase& context,
                                        const v1::CheckpointRequest& req) const {
  if (authorizer == nullptr || authorizer->JobScope(context).empty()) return grpc::Status::OK;
  const absl::Status s = CheckJobCheckpointPath(req.job_id(), req.path(), roots_);
  if (!s.ok()) authorizer->CountRefusal("checkpoint_path");
  return ToGrpcStatus(s);
}

}  // namespace ps
