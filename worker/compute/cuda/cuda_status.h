// The one adapter from CUDA runtime and cuBLAS error codes to absl::Status (see STYLE.md:
// foreign errors are converted in one place each). Only for worker/cuda/ sources compiled with
// the toolkit.
#ifndef PS_WORKER_COMPUTE_CUDA_CUDA_STATUS_H_
#define PS_WORKER_COMPUTE_CUDA_CUDA_STATUS_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "common/status_macros.h"

namespace ps {
namespace cuda {

// OK for cudaSuccess; otherwise a status naming `call` and the runtime's error name and text.
// Out-of-memory is RESOURCE_EXHAUSTED, a missing device or driver FAILED_PRECONDITION, a bad
// argument INVALID_ARGUMENT, anything else (launch failures, illegal addresses, ...) INTERNAL.
absl::Status CudaStatus(cudaError_t error, const char* call);

// OK for CUBLAS_STATUS_SUCCESS; otherwise a status naming `call` and the cuBLAS status. (cuBLAS
// is called through cublas_library.h, so callers pass the function's name.)
absl::Status CublasStatus(cublasStatus_t status, const char* call);

}  // namespace cuda
}  // namespace ps

// Evaluates a CUDA runtime call; returns its error as a status naming the call's text.
#define PS_CUDA_RETURN_IF_ERROR(call) PS_RETURN_IF_ERROR(::ps::cuda::CudaStatus((call), #call))

#endif  // PS_WORKER_COMPUTE_CUDA_CUDA_STATUS_H_
