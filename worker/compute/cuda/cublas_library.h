// cuBLAS, loaded with dlopen when a CUDA backend is first made instead of linked. Two reasons:
//  - libcublasLt has ~94 KiB of static TLS. Linked, it is in every thread's TLS block, and glibc
//    then refuses threads created with a small stack (EINVAL): civetweb's, which serve /metrics,
//    could not start ("Cannot create first worker thread"). dlopen gives it dynamic TLS instead.
//  - A CUDA build of ps_worker then runs where cuBLAS is not installed, as long as it computes
//    on the CPU.
// Only for worker/cuda/ sources compiled with the toolkit (it needs cublas_v2.h for the types).
#ifndef PS_WORKER_COMPUTE_CUDA_CUBLAS_LIBRARY_H_
#define PS_WORKER_COMPUTE_CUDA_CUBLAS_LIBRARY_H_

#include <cublas_v2.h>

#include "absl/status/statusor.h"

namespace ps {
namespace cuda {

// The cuBLAS functions the backend calls.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  // Spelled out: C++ sees an overloaded cublasGemmEx (the header adds one for old callers); this
  // is the C function's signature, the symbol dlsym finds.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
};

// The process's cuBLAS: libcublas.so.<major of the toolkit built with> from the loader's search
// path (LD_LIBRARY_PATH, ld.so.cache), else from the toolkit's library directory at build time.
// Loaded on the first call, never unloaded; thread-safe. FAILED_PRECONDITION with the loader's
// error when the library or a function is missing.
absl::StatusOr<const CublasApi*> Cublas();

}  // namespace cuda
}  // namespace ps

#endif  // PS_WORKER_COMPUTE_CUDA_CUBLAS_LIBRARY_H_
