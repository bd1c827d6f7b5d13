// The CPU implementation of ComputeBackend: GEMMs on OpenBLAS, or on the project's own
// reference kernel; and the CPU's thread count.
#ifndef PS_WORKER_COMPUTE_CPU_BACKEND_H_
#define PS_WORKER_COMPUTE_CPU_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/compute/compute_backend.h"

namespace ps {

// Which kernels the CPU backend runs.
//   kOpenBlas   GEMMs through OpenBLAS's cblas_sgemm, on SetCpuThreads() threads; the
//               element-wise kernels on the calling thread. The default.
//   kReference  everything on the calling thread, GEMMs on the project's own blocked kernel
//               (worker/compute/internal/blocked_gemm.h): small and exact to FP32 rounding, the
//               reference of the parity tests and worker_bench's baseline.
enum class CpuKernels { kOpenBlas, kReference };

// "openblas", "reference".
absl::StatusOr<CpuKernels> ParseCpuKernels(absl::string_view text);
absl::string_view CpuKernelsName(CpuKernels kernels);

struct CpuBackendOptions {
  CpuKernels kernels = CpuKernels::kOpenBlas;
};

// Returns a backend that computes with host pointers, everything done before a method returns.
// Not thread-safe (it keeps scratch buffers): one per thread. kOpenBlas loads OpenBLAS (dlopen)
// on first use; where it cannot be loaded, each Gemm records that error (Synchronize returns
// it): check CpuKernelsAvailable first.
std::unique_ptr<ComputeBackend> MakeCpuBackend(const CpuBackendOptions& options = {});

// OK if `kernels` can run here; for kOpenBlas, FAILED_PRECONDITION when OpenBLAS cannot be
// loaded (saying why).
absl::Status CpuKernelsAvailable(CpuKernels kernels);

// The threads OpenBLAS's GEMMs use, for every CPU backend of the process: OpenBLAS keeps one
// thread pool per process, so this is a process-wide setting that a main() makes once, at
// start-up (it loads OpenBLAS, which then starts its threads). INVALID_ARGUMENT unless
// threads >= 1; FAILED_PRECONDITION when OpenBLAS cannot be loaded. CpuThreads() is 0 then.
absl::Status SetCpuThreads(int threads);
int CpuThreads();

// The default thread count of a worker: the host's hardware threads shared evenly among the
// workers on the host (at least 1 each), so that workers that share a host do not fight over its
// cores. Arguments below 1 count as 1.
int DefaultCpuThreads(int hardware_threads, int workers_on_host);

// OpenBLAS's own description of its build and the kernels it chose for this CPU, e.g.
// "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64" (the load error where it cannot
// be loaded).
std::string CpuBlasDescription();

// TFLOP/s of OpenBLAS's own SGEMM on an n x n x n product (FP32), on CpuThreads() threads, timed
// over at least `seconds` (and 3 runs) after one warm-up: the CPU's reference peak for
// worker_bench. INVALID_ARGUMENT unless n >= 1; FAILED_PRECONDITION without OpenBLAS.
absl::StatusOr<double> MeasureCpuSgemmTflops(int n, double seconds);

}  // namespace ps

#endif  // PS_WORKER_COMPUTE_CPU_BACKEND_H_
