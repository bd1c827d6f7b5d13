#include "worker/compute/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace ps {
namespace cuda {
namespace {

absl::StatusCode CodeOf(cudaError_t error) {
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return absl::StatusCode::kFailedPrecondition;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidMemcpyDirection:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

const char* CublasName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
    default:
      return "CUBLAS_STATUS_UNKNOWN";
  }
}

}  // namespace

absl::Status CudaStatus(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::Status(CodeOf(error), absl::StrCat(call, ": ", cudaGetErrorName(error), " (",
                                                  cudaGetErrorString(error), ")"));
}

absl::Status CublasStatus(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  absl::StatusCode code = absl::StatusCode::kInternal;
  if (status == CUBLAS_STATUS_ALLOC_FAILED) code = absl::StatusCode::kResourceExhausted;
  if (status == CUBLAS_STATUS_INVALID_VALUE) code = absl::StatusCode::kInvalidArgument;
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_ARCH_MISMATCH) {
    code = absl::StatusCode::kFailedPrecondition;
  }
  return absl::Status(code, absl::StrCat(call, ": ", CublasName(status), " (status ",
                                         static_cast<int>(status), ")"));
}

}  // namespace cuda
}  // namespace ps
