#include "worker/compute/cuda/cublas_library.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/compute/internal/shared_library.h"

namespace ps {
namespace cuda {
namespace {

#ifndef PS_CUBLAS_FALLBACK_DIR
#define PS_CUBLAS_FALLBACK_DIR ""
#endif

absl::StatusOr<const CublasApi*> Load() {
  absl::StatusOr<internal::SharedLibrary> library = internal::SharedLibrary::Open(
      absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR), PS_CUBLAS_FALLBACK_DIR, "cuBLAS",
      "install the CUDA toolkit's cuBLAS or add its directory to LD_LIBRARY_PATH");
  if (!library.ok()) return library.status();
  auto api = std::make_unique<CublasApi>();
  library->Bind("cublasCreate_v2", &api->create);
  library->Bind("cublasDestroy_v2", &api->destroy);
  library->Bind("cublasSetStream_v2", &api->set_stream);
  library->Bind("cublasSetMathMode", &api->set_math_mode);
  library->Bind("cublasSetWorkspace_v2", &api->set_workspace);
  library->Bind("cublasGemmEx", &api->gemm_ex);
  if (absl::Status s = library->AllBound(
          "cuBLAS", absl::StrCat(" (a version older than ", CUBLAS_VER_MAJOR, "?)"));
      !s.ok()) {
    return s;
  }
  return api.release();  // lives as long as the process, as the library does
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
