// The CUDA compute backend: cuBLAS for the GEMMs, own kernels for everything else. This header
// needs no CUDA headers: it is compiled in every build, and where the toolkit was absent at
// build time (PS_HAVE_CUDA off) its functions report that instead (cuda_unavailable.cc).
#ifndef PS_WORKER_COMPUTE_CUDA_CUDA_BACKEND_H_
#define PS_WORKER_COMPUTE_CUDA_CUDA_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/compute/compute_backend.h"

namespace ps {

// How cuBLAS may compute a GEMM of FP32 matrices (inputs, outputs and accumulation stay FP32 in
// memory; the tensor-core modes round the inputs inside the multiply):
//   kFp32  plain FP32 (CUDA cores): the CPU reference's precision.
//   kTf32  TF32 tensor cores (10-bit mantissa inputs, FP32 accumulation): ~2^-11 relative error
//          per product; several times the FP32 rate on Ampere/Hopper. The worker's default.
//   kBf16  BF16 tensor cores (8-bit mantissa, FP32 range).
//   kFp16  FP16 tensor cores (11-bit mantissa, but values beyond 65504 overflow and gradients
//          below ~6e-8 flush to zero: no loss scaling is done).
enum class GemmPrecision { kFp32, kTf32, kBf16, kFp16 };

// "fp32", "tf32", "bf16", "fp16".
absl::string_view GemmPrecisionName(GemmPrecision precision);
// Parses a name of GemmPrecisionName(); INVALID_ARGUMENT otherwise.
absl::StatusOr<GemmPrecision> ParseGemmPrecision(absl::string_view name);

// What this process can use.
struct CudaAvailability {
  bool compiled = false;  // built with the CUDA toolkit
  int devices = 0;        // CUDA devices the driver reports (0 without a driver)
  // Why `devices` is 0, for error messages, e.g. "no CUDA-capable device is detected".
  std::string reason;
};

// Asks the CUDA runtime how many devices there are. Never fails: a missing driver or device is
// `devices == 0` with the runtime's reason.
CudaAvailability ProbeCuda();

// A backend on CUDA device `device` (0-based). It creates its streams (one for compute, one for
// copies), a cuBLAS handle and its workspace once; compute memory is device memory and staging
// memory is page-locked host memory. Errors: FAILED_PRECONDITION when built without CUDA or the
// device does not exist; the CUDA/cuBLAS error, naming the call, when set-up fails.
// The backend is used by one thread at a time; it makes its device current on the calling
// thread before it queues work.
absl::StatusOr<std::unique_ptr<ComputeBackend>> MakeCudaBackend(int device,
                                                                GemmPrecision precision);

// Benchmark support: TFLOP/s of cuBLAS's own m x n x k GEMM of FP32 matrices on `device` with
// `precision`, median of `iterations` timed runs (CUDA events) after a warm-up. Allocates and
// frees its matrices. Same errors as MakeCudaBackend.
absl::StatusOr<double> MeasureCublasGemmTflops(int device, GemmPrecision precision, int m, int n,
                                               int k, int iterations);

// Loads cuBLAS (with dlopen: see cublas_library.h) if not done yet, and checks that it has the
// functions the backend calls. MakeCudaBackend does this itself; exposed for tests and
// diagnostics. FAILED_PRECONDITION with the loader's error, or when built without CUDA.
absl::Status LoadCublas();

// A one-line description of `device`, e.g. "NVIDIA H100 80GB HBM3 (sm_90, 79 GiB)".
absl::StatusOr<std::string> CudaDeviceName(int device);

}  // namespace ps

#endif  // PS_WORKER_COMPUTE_CUDA_CUDA_BACKEND_H_
