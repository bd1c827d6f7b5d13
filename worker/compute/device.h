// Which compute backend a worker uses: ps_worker --device=cpu|auto|cuda:N, resolved against what
// the machine and the binary offer, and the options that go with it.
#ifndef PS_WORKER_COMPUTE_DEVICE_H_
#define PS_WORKER_COMPUTE_DEVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/compute/compute_backend.h"
#include "worker/compute/cpu_backend.h"
#include "worker/compute/cuda/cuda_backend.h"

namespace ps {

// A device as asked for (kAuto allowed) or as resolved (kCpu or kCuda).
struct DeviceSpec {
  enum class Kind { kCpu, kCuda, kAuto };
  Kind kind = Kind::kCpu;
  int index = 0;  // kCuda: the CUDA device ordinal

  // "cpu", "auto", "cuda:N".
  std::string ToString() const;
};

// Parses "cpu", "auto", "cuda" (cuda:0) or "cuda:N" (N >= 0). INVALID_ARGUMENT otherwise.
absl::StatusOr<DeviceSpec> ParseDevice(absl::string_view text);

// Turns a request into a device this process can use: auto is cuda:0 when the binary has CUDA
// support and the driver reports a device, else cpu. An explicit cuda:N without CUDA support, or
// without device N, is FAILED_PRECONDITION saying which (never a fallback to the CPU: a job asked
// to run on a GPU should not silently run 50x slower).
absl::StatusOr<DeviceSpec> ResolveDevice(const DeviceSpec& requested, const CudaAvailability& cuda);

// When a model may overlap communication with compute (see fashion_model.h): kAuto does on the
// CUDA backend where the consistency mode allows it, and not on the CPU (whose steps then stay
// exactly as before); kOn also on the CPU; kOff never.
enum class OverlapMode { kAuto, kOn, kOff };

// "auto", "on", "off".
absl::StatusOr<OverlapMode> ParseOverlap(absl::string_view text);
absl::string_view OverlapName(OverlapMode mode);

// How a worker computes. The defaults are the CPU on OpenBLAS.
struct ComputeOptions {
  DeviceSpec device;                                    // resolved: kCpu or kCuda
  GemmPrecision gemm_precision = GemmPrecision::kTf32;  // CUDA GEMMs (the CPU computes FP32)
  CpuKernels cpu_kernels = CpuKernels::kOpenBlas;       // the CPU backend's kernels
  OverlapMode overlap = OverlapMode::kAuto;
};

// The backend of `options.device` (which must be resolved): the CPU backend with
// `options.cpu_kernels`, or a CUDA backend with `options.gemm_precision`. Errors as
// MakeCudaBackend.
absl::StatusOr<std::unique_ptr<ComputeBackend>> MakeBackend(const ComputeOptions& options);

}  // namespace ps

#endif  // PS_WORKER_COMPUTE_DEVICE_H_
