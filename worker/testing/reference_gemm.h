// Test support: GEMM straight from its definition, in double, for the backends' parity tests.
#ifndef PS_WORKER_TESTING_REFERENCE_GEMM_H_
#define PS_WORKER_TESTING_REFERENCE_GEMM_H_

#include <cmath>
#include <cstddef>
#include <ostream>
#include <vector>

namespace ps {
namespace reference {

// C = alpha * op(A) * op(B) + beta * C (row-major, as ComputeBackend::Gemm) in double; sets
// `magnitude`, per element, to a bound on the magnitudes summed (to scale a float tolerance).
inline void NaiveGemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha,
                      const std::vector<float>& a, const std::vector<float>& b, double beta,
                      std::vector<double>& c, std::vector<double>& magnitude) {
  magnitude.assign(static_cast<size_t>(m) * n, 0.0);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0, abs_sum = 0;
      for (int p = 0; p < k; ++p) {
        const double av =
            trans_a ? a[static_cast<size_t>(p) * m + i] : a[static_cast<size_t>(i) * k + p];
        const double bv =
            trans_b ? b[static_cast<size_t>(j) * k + p] : b[static_cast<size_t>(p) * n + j];
        sum += av * bv;
        abs_sum += std::fabs(av * bv);
      }
      double& cij = c[static_cast<size_t>(i) * n + j];
      const double old = beta == 0.0 ? 0.0 : beta * cij;
      cij = alpha * sum + old;
      magnitude[static_cast<size_t>(i) * n + j] = std::fabs(alpha) * abs_sum + std::fabs(old);
    }
  }
}

// A GEMM's m x n x k, printed so by gtest.
struct GemmShape {
  int m, n, k;
};

inline void PrintTo(const GemmShape& s, std::ostream* os) {
  *os << s.m << "x" << s.n << "x" << s.k;
}

}  // namespace reference
}  // namespace ps

#endif  // PS_WORKER_TESTING_REFERENCE_GEMM_H_
