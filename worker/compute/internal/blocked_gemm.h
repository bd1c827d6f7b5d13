// The CPU backend's own GEMM (CpuKernels::kReference): small, single-threaded and exact to FP32
// rounding, kept as the reference that the parity tests and worker_bench compare the OpenBLAS
// kernels against.
#ifndef PS_WORKER_COMPUTE_INTERNAL_BLOCKED_GEMM_H_
#define PS_WORKER_COMPUTE_INTERNAL_BLOCKED_GEMM_H_

#include <vector>

namespace ps {
namespace internal {

// C[m, n] = alpha * op(A) * op(B) + beta * C, row-major, as ComputeBackend::Gemm. Packs panels of
// A and B into cache-sized blocks around a register-tiled kernel that the compiler vectorizes
// for the baseline target (no -march flags needed). Keeps its packing buffers between calls:
// not thread-safe, one per thread.
class BlockedGemm {
 public:
  void Run(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
           const float* b, float beta, float* c);

 private:
  // C block (mc x nc, leading dimension ldc) += packed A block * packed B block.
  void MultiplyBlock(int mc, int nc, int kc, float* c, int ldc) const;

  std::vector<float> packed_a_;
  std::vector<float> packed_b_;
};

}  // namespace internal
}  // namespace ps

#endif  // PS_WORKER_COMPUTE_INTERNAL_BLOCKED_GEMM_H_
