#include "worker/compute/internal/blocked_gemm.h"

#include <algorithm>
#include <cstddef>

namespace ps {
namespace internal {
namespace {

// GEMM blocking, in the style of GotoBLAS/BLIS: C is computed in kMr x kNr register tiles from
// packed panels of A (kMc x kKc, sized for L2) and B (kKc x kNc). The tile loops have
// compile-time trip counts so that GCC vectorizes them even at -O2 (its "very cheap" cost model
// refuses loops that need a scalar epilogue) and keeps the accumulators in SSE registers.
constexpr int kMr = 4;    // rows of a register tile
constexpr int kNr = 8;    // columns of a register tile: 4 x 8 accumulators = 8 SSE registers
constexpr int kKc = 256;  // depth of a packed block
constexpr int kMc = 128;  // rows of a packed A block; a multiple of kMr
constexpr int kNc = 512;  // columns of a packed B block; a multiple of kNr

static_assert(kMc % kMr == 0 && kNc % kNr == 0, "blocks must hold whole tiles");

// A strided view of a matrix: element (i, j) is data[i * row_stride + j * col_stride]. Lets one
// packing routine serve both a matrix and its transpose.
struct MatrixView {
  const float* data;
  ptrdiff_t row_stride;
  ptrdiff_t col_stride;
  float at(ptrdiff_t i, ptrdiff_t j) const { return data[i * row_stride + j * col_stride]; }
};

// Packs alpha * A[i0 : i0 + mc, p0 : p0 + kc] as consecutive panels of kMr rows; a panel stores,
// for each p, its kMr values of column p. Rows past mc are zero-filled.
void PackA(const MatrixView& a, int i0, int p0, int mc, int kc, float alpha, float* packed) {
  for (int ip = 0; ip < mc; ip += kMr) {
    const int rows = std::min(kMr, mc - ip);
    for (int p = 0; p < kc; ++p) {
      for (int r = 0; r < rows; ++r) packed[r] = alpha * a.at(i0 + ip + r, p0 + p);
      for (int r = rows; r < kMr; ++r) packed[r] = 0.0f;
      packed += kMr;
    }
  }
}

// Packs B[p0 : p0 + kc, j0 : j0 + nc] as consecutive panels of kNr columns; a panel stores, for
// each p, its kNr values of row p. Columns past nc are zero-filled.
void PackB(const MatrixView& b, int p0, int j0, int kc, int nc, float* packed) {
  for (int jp = 0; jp < nc; jp += kNr) {
    const int cols = std::min(kNr, nc - jp);
    if (cols == kNr && b.col_stride == 1) {
      for (int p = 0; p < kc; ++p) {
        const float* row = &b.data[(p0 + p) * b.row_stride + j0 + jp];
        for (int j = 0; j < kNr; ++j) packed[j] = row[j];
        packed += kNr;
      }
      continue;
    }
    for (int p = 0; p < kc; ++p) {
      for (int j = 0; j < cols; ++j) packed[j] = b.at(p0 + p, j0 + jp + j);
      for (int j = cols; j < kNr; ++j) packed[j] = 0.0f;
      packed += kNr;
    }
  }
}

// C[0 : rows, 0 : cols] += (packed A panel) * (packed B panel), over kc steps.
void MicroKernel(int kc, const float* __restrict a, const float* __restrict b, float* __restrict c,
                 int ldc, int rows, int cols) {
  float acc[kMr][kNr] = {};
  for (int p = 0; p < kc; ++p) {
#pragma GCC unroll 4
    for (int r = 0; r < kMr; ++r) {
      const float av = a[r];
      for (int j = 0; j < kNr; ++j) acc[r][j] += av * b[j];
    }
    a += kMr;
    b += kNr;
  }
  if (rows == kMr && cols == kNr) {
    for (int r = 0; r < kMr; ++r) {
      for (int j = 0; j < kNr; ++j) c[r * ldc + j] += acc[r][j];
    }
    return;
  }
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < cols; ++j) c[r * ldc + j] += acc[r][j];
  }
}

void ScaleC(size_t size, float beta, float* c) {
  if (beta == 0.0f) {
    std::fill(c, c + size, 0.0f);
  } else if (beta != 1.0f) {
    for (size_t i = 0; i < size; ++i) c[i] *= beta;
  }
}

}  // namespace

void BlockedGemm::Run(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                      const float* b, float beta, float* c) {
  if (m <= 0 || n <= 0) return;
  ScaleC(static_cast<size_t>(m) * n, beta, c);
  if (k <= 0 || alpha == 0.0f) return;
  const MatrixView av = trans_a ? MatrixView{a, 1, m} : MatrixView{a, k, 1};
  const MatrixView bv = trans_b ? MatrixView{b, 1, k} : MatrixView{b, n, 1};
  packed_a_.resize(static_cast<size_t>(kMc) * kKc);
  packed_b_.resize(static_cast<size_t>(kKc) * kNc);
  for (int j0 = 0; j0 < n; j0 += kNc) {
    const int nc = std::min(kNc, n - j0);
    for (int p0 = 0; p0 < k; p0 += kKc) {
      const int kc = std::min(kKc, k - p0);
      PackB(bv, p0, j0, kc, nc, packed_b_.data());
      for (int i0 = 0; i0 < m; i0 += kMc) {
        const int mc = std::min(kMc, m - i0);
        PackA(av, i0, p0, mc, kc, alpha, packed_a_.data());
        MultiplyBlock(mc, nc, kc, c + static_cast<ptrdiff_t>(i0) * n + j0, n);
      }
    }
  }
}

// C block (mc x nc, leading dimension ldc) += packed A block * packed B block.
void BlockedGemm::MultiplyBlock(int mc, int nc, int kc, float* c, int ldc) const {
  for (int jp = 0; jp < nc; jp += kNr) {
    const float* b_panel = packed_b_.data() + static_cast<ptrdiff_t>(jp) * kc;
    const int cols = std::min(kNr, nc - jp);
    for (int ip = 0; ip < mc; ip += kMr) {
      const float* a_panel = packed_a_.data() + static_cast<ptrdiff_t>(ip) * kc;
      MicroKernel(kc, a_panel, b_panel, c + static_cast<ptrdiff_t>(ip) * ldc + jp, ldc,
                  std::min(kMr, mc - ip), cols);
    }
  }
}

}  // namespace internal
}  // namespace ps
