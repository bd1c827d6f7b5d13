#include "worker/compute/internal/openblas_library.h"

#include <dlfcn.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ps {
namespace internal {
namespace {

#ifndef PS_OPENBLAS_FALLBACK_DIR
#define PS_OPENBLAS_FALLBACK_DIR ""
#endif

constexpr char kSoname[] = "libopenblas.so.0";

template <typename F>
void Bind(void* library, const char* name, F* out, std::vector<std::string>* missing) {
  *out = reinterpret_cast<F>(dlsym(library, name));
  if (*out == nullptr) missing->push_back(name);
}

absl::StatusOr<const OpenBlasApi*> Load() {
  std::vector<std::string> candidates = {kSoname};
  if (std::string(PS_OPENBLAS_FALLBACK_DIR).size() > 0) {
    candidates.push_back(absl::StrCat(PS_OPENBLAS_FALLBACK_DIR, "/", kSoname));
  }
  void* library = nullptr;
  std::vector<std::string> errors;
  for (const std::string& path : candidates) {
    // RTLD_LOCAL: its symbols stay out of the global namespace (nothing else binds to them).
    library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) break;
    const char* error = dlerror();
    errors.push_back(error != nullptr ? error : path);
  }
  if (library == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load OpenBLAS (", absl::StrJoin(errors, "; "),
                     "): install libopenblas0 (deploy/install-deps.sh installs libopenblas-dev)"));
  }
  auto* api = new OpenBlasApi;  // lives as long as the process, as the library does
  std::vector<std::string> missing;
  Bind(library, "cblas_sgemm", &api->sgemm, &missing);
  Bind(library, "openblas_set_num_threads", &api->set_num_threads, &missing);
  Bind(library, "openblas_get_num_threads", &api->get_num_threads, &missing);
  Bind(library, "openblas_get_config", &api->get_config, &missing);
  if (!missing.empty()) {
    delete api;
    return absl::FailedPreconditionError(
        absl::StrCat("the loaded ", kSoname, " lacks ", absl::StrJoin(missing, ", ")));
  }
  return api;
}

}  // namespace

absl::StatusOr<const OpenBlasApi*> OpenBlas() {
  // Loaded once per process: the library handle is process-wide state by nature (dlopen's), and
  // the table never changes after this initialization (thread-safe, as a function-local static).
  static const absl::StatusOr<const OpenBlasApi*>* const loaded =
      new absl::StatusOr<const OpenBlasApi*>(Load());
  return *loaded;
}

}  // namespace internal
}  // namespace ps
