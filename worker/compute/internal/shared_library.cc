#include "worker/compute/internal/shared_library.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ps {
namespace internal {

absl::StatusOr<SharedLibrary> SharedLibrary::Open(const std::string& soname,
                                                  const std::string& fallback_dir,
                                                  absl::string_view what,
                                                  absl::string_view remedy) {
  std::vector<std::string> candidates = {soname};
  if (!fallback_dir.empty()) candidates.push_back(absl::StrCat(fallback_dir, "/", soname));
  std::vector<std::string> errors;
  for (const std::string& path : candidates) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) return SharedLibrary(handle);
    const char* error = dlerror();
    errors.push_back(error != nullptr ? error : path);
  }
  return absl::FailedPreconditionError(
      absl::StrCat("cannot load ", what, " (", absl::StrJoin(errors, "; "), "): ", remedy));
}

void* SharedLibrary::Symbol(const char* name) {
  void* symbol = dlsym(handle_, name);
  if (symbol == nullptr) missing_.push_back(name);
  return symbol;
}

absl::Status SharedLibrary::AllBound(absl::string_view library, absl::string_view hint) const {
  if (missing_.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("the loaded ", library, " lacks ", absl::StrJoin(missing_, ", "), hint));
}

}  // namespace internal
}  // namespace ps
