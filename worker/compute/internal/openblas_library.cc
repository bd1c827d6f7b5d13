#include "worker/compute/internal/openblas_library.h"

#include <memory>

#include "worker/compute/internal/shared_library.h"

namespace ps {
namespace internal {
namespace {

#ifndef PS_OPENBLAS_FALLBACK_DIR
#define PS_OPENBLAS_FALLBACK_DIR ""
#endif

constexpr char kSoname[] = "libopenblas.so.0";

absl::StatusOr<const OpenBlasApi*> Load() {
  absl::StatusOr<SharedLibrary> library =
      SharedLibrary::Open(kSoname, PS_OPENBLAS_FALLBACK_DIR, "OpenBLAS",
                          "install libopenblas0 (deploy/install-deps.sh installs libopenblas-dev)");
  if (!library.ok()) return library.status();
  auto api = std::make_unique<OpenBlasApi>();
  library->Bind("cblas_sgemm", &api->sgemm);
  library->Bind("openblas_set_num_threads", &api->set_num_threads);
  library->Bind("openblas_get_num_threads", &api->get_num_threads);
  library->Bind("openblas_get_config", &api->get_config);
  if (absl::Status s = library->AllBound(kSoname); !s.ok()) return s;
  return api.release();  // lives as long as the process, as the library does
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
