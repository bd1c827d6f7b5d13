// cuda_backend.h for builds without the CUDA toolkit (PS_HAVE_CUDA off): no device, and every
// request for one is a clear FAILED_PRECONDITION instead of a link error or a crash.
#include "absl/strings/str_cat.h"
#include "worker/compute/cuda/cuda_backend.h"

namespace ps {
namespace {

absl::Status NotBuilt(int device) {
  return absl::FailedPreconditionError(
      absl::StrCat("cuda:", device,
                   " is not available: this binary was built without CUDA support (configure "
                   "with a CUDA toolkit and -DPS_WITH_CUDA=ON to build the CUDA backend)"));
}

}  // namespace

CudaAvailability ProbeCuda() {
  CudaAvailability a;
  a.reason = "built without CUDA support";
  return a;
}

absl::StatusOr<std::unique_ptr<ComputeBackend>> MakeCudaBackend(int device, GemmPrecision) {
  return NotBuilt(device);
}

absl::StatusOr<double> MeasureCublasGemmTflops(int device, GemmPrecision, int, int, int, int) {
  return NotBuilt(device);
}

absl::StatusOr<std::string> CudaDeviceName(int device) { return NotBuilt(device); }

absl::Status LoadCublas() {
  return absl::FailedPreconditionError("cuBLAS: this binary was built without CUDA support");
}

}  // namespace ps
