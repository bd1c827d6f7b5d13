#include "worker/compute/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/compute/compute_backend.h"

namespace ps {
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

class CpuBackend : public ComputeBackend {
 public:
  std::string name() const override { return "cpu"; }
  bool host_memory() const override { return true; }

  // Everything runs at once in call order: the copies are memcpy (none when a model passes its
  // host tensors straight through) and the queue-ordering calls have nothing to do.
  void CopyToDevice(void* device_dst, const void* host_src, size_t bytes) override {
    if (bytes > 0 && device_dst != host_src) std::memcpy(device_dst, host_src, bytes);
  }
  void CopyToHost(void* host_dst, const void* device_src, size_t bytes) override {
    if (bytes > 0 && host_dst != device_src) std::memcpy(host_dst, device_src, bytes);
  }
  absl::Status Synchronize() override { return std::exchange(status_, absl::OkStatus()); }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
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

  void AddBias(int rows, int cols, const float* bias, float* y) override {
    for (int r = 0; r < rows; ++r) {
      float* row = y + static_cast<ptrdiff_t>(r) * cols;
      for (int j = 0; j < cols; ++j) row[j] += bias[j];
    }
  }

  void AddBiasRelu(int rows, int cols, const float* bias, float* y) override {
    for (int r = 0; r < rows; ++r) {
      float* row = y + static_cast<ptrdiff_t>(r) * cols;
      for (int j = 0; j < cols; ++j) row[j] = std::max(row[j] + bias[j], 0.0f);
    }
  }

  void ReluBackward(int64_t n, const float* activation, float* grad) override {
    for (int64_t i = 0; i < n; ++i) grad[i] = activation[i] > 0.0f ? grad[i] : 0.0f;
  }

  void BiasGradient(int rows, int cols, const float* grad, float* bias_grad) override {
    std::fill(bias_grad, bias_grad + std::max(cols, 0), 0.0f);
    for (int r = 0; r < rows; ++r) {
      const float* row = grad + static_cast<ptrdiff_t>(r) * cols;
      for (int j = 0; j < cols; ++j) bias_grad[j] += row[j];
    }
  }

  LossStats SoftmaxCrossEntropy(int batch, int classes, const float* logits, const int32_t* labels,
                                float grad_scale, float* grad) override {
    LossStats stats;
    for (int r = 0; r < batch; ++r) {
      const float* z = logits + static_cast<ptrdiff_t>(r) * classes;
      const int label = labels[r];
      if (label < 0 || label >= classes) {
        // Reading z[label] would be out of bounds: record the error, score the row 0, and keep
        // its gradient defined (the softmax alone), as the CUDA kernel does.
        RecordError(absl::InvalidArgumentError(absl::StrCat(
            "SoftmaxCrossEntropy: label ", label, " of row ", r, " is not in [0, ", classes, ")")));
      }
      int arg_max = 0;
      for (int j = 1; j < classes; ++j) {
        if (z[j] > z[arg_max]) arg_max = j;
      }
      const float max_logit = z[arg_max];
      double denom = 0;
      for (int j = 0; j < classes; ++j) denom += std::exp(static_cast<double>(z[j] - max_logit));
      const bool label_ok = label >= 0 && label < classes;
      const double log_denom = std::log(denom);
      if (label_ok) {
        stats.loss_sum += log_denom - static_cast<double>(z[label] - max_logit);
        if (arg_max == label) ++stats.correct;
      }
      if (grad == nullptr) continue;
      float* g = grad + static_cast<ptrdiff_t>(r) * classes;
      const double scale = grad_scale / denom;
      for (int j = 0; j < classes; ++j) {
        g[j] = static_cast<float>(scale * std::exp(static_cast<double>(z[j] - max_logit)));
      }
      if (label_ok) g[label] -= grad_scale;
    }
    return stats;
  }

  void Gather(int n, int dim, int table_rows, const float* table, const int32_t* rows,
              float* out) override {
    for (int i = 0; i < n; ++i) {
      float* dst = out + static_cast<ptrdiff_t>(i) * dim;
      if (!CheckRow("Gather", i, rows[i], table_rows)) {
        std::fill(dst, dst + dim, 0.0f);
        continue;
      }
      std::copy_n(table + static_cast<ptrdiff_t>(rows[i]) * dim, dim, dst);
    }
  }

  void ScatterAdd(int n, int dim, int table_rows, const float* grad, const int32_t* rows,
                  float* table) override {
    for (int i = 0; i < n; ++i) {
      if (!CheckRow("ScatterAdd", i, rows[i], table_rows)) continue;
      float* dst = table + static_cast<ptrdiff_t>(rows[i]) * dim;
      const float* src = grad + static_cast<ptrdiff_t>(i) * dim;
      for (int j = 0; j < dim; ++j) dst[j] += src[j];
    }
  }

 protected:
  absl::StatusOr<void*> AllocateMemory(MemoryKind, size_t bytes) override {
    // 64-byte alignment: whole cache lines, and any vector width the compiler picks.
    void* data = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (data == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("cpu: cannot allocate ", bytes, " bytes"));
    }
    return data;
  }
  void FreeMemory(MemoryKind, void* data) override { std::free(data); }

 private:
  void RecordError(absl::Status s) {
    if (status_.ok()) status_ = std::move(s);
  }

  bool CheckRow(const char* op, int i, int32_t row, int table_rows) {
    if (row >= 0 && row < table_rows) return true;
    RecordError(absl::InvalidArgumentError(
        absl::StrCat(op, ": row index ", row, " at ", i, " is not in [0, ", table_rows, ")")));
    return false;
  }

  static void ScaleC(size_t size, float beta, float* c) {
    if (beta == 0.0f) {
      std::fill(c, c + size, 0.0f);
    } else if (beta != 1.0f) {
      for (size_t i = 0; i < size; ++i) c[i] *= beta;
    }
  }

  // C block (mc x nc, leading dimension ldc) += packed A block * packed B block.
  void MultiplyBlock(int mc, int nc, int kc, float* c, int ldc) const {
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

  std::vector<float> packed_a_;
  std::vector<float> packed_b_;
  absl::Status status_;  // the first error since the last Synchronize()
};

}  // namespace

std::unique_ptr<ComputeBackend> MakeCpuBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace ps
