// Single-threaded CPU implementation of ComputeBackend.
#ifndef PS_WORKER_COMPUTE_CPU_BACKEND_H_
#define PS_WORKER_COMPUTE_CPU_BACKEND_H_

#include <memory>

#include "worker/compute/compute_backend.h"

namespace ps {

// Returns a backend that computes on the calling thread with host pointers. Its GEMM packs panels
// of A and B into cache-sized blocks around a register-tiled kernel that the compiler vectorizes
// for the baseline target (no -march flags needed). Not thread-safe: one per thread.
std::unique_ptr<ComputeBackend> MakeCpuBackend();

}  // namespace ps

#endif  // PS_WORKER_COMPUTE_CPU_BACKEND_H_
