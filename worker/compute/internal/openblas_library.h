// OpenBLAS, loaded with dlopen on first use instead of linked, as cuBLAS is
// (worker/compute/cuda/cublas_library.h): libopenblas has ~60 KiB of static TLS. Linked, it is in
// every thread's TLS block, and glibc then refuses the small-stack threads of civetweb, which
// serve /metrics ("null context when constructing CivetServer"). dlopen gives it dynamic TLS.
#ifndef PS_WORKER_COMPUTE_INTERNAL_OPENBLAS_LIBRARY_H_
#define PS_WORKER_COMPUTE_INTERNAL_OPENBLAS_LIBRARY_H_

#include <cblas.h>

#include "absl/status/statusor.h"

namespace ps {
namespace internal {

// The OpenBLAS functions the CPU backend calls.
struct OpenBlasApi {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&openblas_set_num_threads) set_num_threads = nullptr;
  decltype(&openblas_get_num_threads) get_num_threads = nullptr;
  decltype(&openblas_get_config) get_config = nullptr;
};

// The process's OpenBLAS: libopenblas.so.0 from the loader's search path, else from the
// directory pkg-config named at build time. Loaded on the first call (OpenBLAS then starts its
// threads), never unloaded; thread-safe. FAILED_PRECONDITION with the loader's error when the
// library or a function is missing.
absl::StatusOr<const OpenBlasApi*> OpenBlas();

}  // namespace internal
}  // namespace ps

#endif  // PS_WORKER_COMPUTE_INTERNAL_OPENBLAS_LIBRARY_H_
