#include "worker/compute/cuda/cublas_library.h"

#include <dlfcn.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ps {
namespace cuda {
namespace {

#ifndef PS_CUBLAS_FALLBACK_DIR
#define PS_CUBLAS_FALLBACK_DIR ""
#endif

template <typename F>
bool Bind(void* library, const char* name, F* out, std::vector<std::string>* missing) {
  *out = reinterpret_cast<F>(dlsym(library, name));
  if (*out == nullptr) missing->push_back(name);
  return *out != nullptr;
}

absl::StatusOr<const CublasApi*> Load() {
  const std::string soname = absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR);
  std::vector<std::string> candidates = {soname};
  if (std::string(PS_CUBLAS_FALLBACK_DIR).size() > 0) {
    candidates.push_back(absl::StrCat(PS_CUBLAS_FALLBACK_DIR, "/", soname));
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
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot load cuBLAS (", absl::StrJoin(errors, "; "),
        "): install the CUDA toolkit's cuBLAS or add its directory to LD_LIBRARY_PATH"));
  }
  auto* api = new CublasApi;  // lives as long as the process, as the library does
  std::vector<std::string> missing;
  Bind(library, "cublasCreate_v2", &api->create, &missing);
  Bind(library, "cublasDestroy_v2", &api->destroy, &missing);
  Bind(library, "cublasSetStream_v2", &api->set_stream, &missing);
  Bind(library, "cublasSetMathMode", &api->set_math_mode, &missing);
  Bind(library, "cublasSetWorkspace_v2", &api->set_workspace, &missing);
  Bind(library, "cublasGemmEx", &api->gemm_ex, &missing);
  if (!missing.empty()) {
    delete api;
    return absl::FailedPreconditionError(
        absl::StrCat("the loaded cuBLAS lacks ", absl::StrJoin(missing, ", "),
                     " (a version older than ", CUBLAS_VER_MAJOR, "?)"));
  }
  return api;
}

}  // namespace

absl::StatusOr<const CublasApi*> Cublas() {
  // Loaded once per process: the library handle is process-wide state by nature (dlopen's), and
  // the table never changes after this initialization (thread-safe, as a function-local static).
  static const absl::StatusOr<const CublasApi*>* const loaded =
      new absl::StatusOr<const CublasApi*>(Load());
  return *loaded;
}

}  // namespace cuda
}  // namespace ps
