#include "worker/compute/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "worker/compute/compute_backend.h"
#include "worker/compute/internal/blocked_gemm.h"
#include "worker/compute/internal/openblas_library.h"

namespace ps {
namespace {

// C[i] = beta * C[i] for `size` floats; with beta == 0, C is not read (it may hold NaN).
void ScaleC(size_t size, float beta, float* c) {
  if (beta == 0.0f) {
    std::fill(c, c + size, 0.0f);
  } else if (beta != 1.0f) {
    for (size_t i = 0; i < size; ++i) c[i] *= beta;
  }
}

class CpuBackend : public ComputeBackend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options) : kernels_(options.kernels) {
    if (kernels_ == CpuKernels::kOpenBlas) {
      absl::StatusOr<const internal::OpenBlasApi*> api = internal::OpenBlas();
      if (api.ok()) blas_ = *api;  // else every Gemm records the error
    }
  }

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
    if (kernels_ == CpuKernels::kReference) {
      reference_gemm_.Run(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
      return;
    }
    if (m <= 0 || n <= 0) return;
    if (blas_ == nullptr) {
      RecordError(internal::OpenBlas().status());
      return;
    }
    if (k <= 0 || alpha == 0.0f) {
      // BLAS reads C when beta != 0 and skips nothing; keep the contract (C unread when beta is
      // 0) explicit for the degenerate shapes too.
      ScaleC(static_cast<size_t>(m) * n, beta, c);
      return;
    }
    // Row-major, as ComputeBackend: the leading dimension is the stored row length.
    blas_->sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                 trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, trans_a ? m : k, b,
                 trans_b ? k : n, beta, c, n);
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

  const CpuKernels kernels_;
  const internal::OpenBlasApi* blas_ = nullptr;  // kOpenBlas: the loaded library (process-wide)
  internal::BlockedGemm reference_gemm_;         // kReference's GEMM and its packing buffers
  absl::Status status_;                          // the first error since the last Synchronize()
};

}  // namespace

absl::StatusOr<CpuKernels> ParseCpuKernels(absl::string_view text) {
  for (CpuKernels k : {CpuKernels::kOpenBlas, CpuKernels::kReference}) {
    if (text == CpuKernelsName(k)) return k;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("CPU kernels '", text, "' are unknown; want openblas or reference"));
}

absl::string_view CpuKernelsName(CpuKernels kernels) {
  return kernels == CpuKernels::kOpenBlas ? "openblas" : "reference";
}

std::unique_ptr<ComputeBackend> MakeCpuBackend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

absl::Status CpuKernelsAvailable(CpuKernels kernels) {
  if (kernels == CpuKernels::kReference) return absl::OkStatus();
  return internal::OpenBlas().status();
}

absl::Status SetCpuThreads(int threads) {
  if (threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("CPU threads must be >= 1, not ", threads));
  }
  PS_ASSIGN_OR_RETURN(const internal::OpenBlasApi* blas, internal::OpenBlas());
  blas->set_num_threads(threads);
  return absl::OkStatus();
}

int CpuThreads() {
  absl::StatusOr<const internal::OpenBlasApi*> blas = internal::OpenBlas();
  return blas.ok() ? (*blas)->get_num_threads() : 0;
}

int DefaultCpuThreads(int hardware_threads, int workers_on_host) {
  return std::max(1, std::max(1, hardware_threads) / std::max(1, workers_on_host));
}

std::string CpuBlasDescription() {
  absl::StatusOr<const internal::OpenBlasApi*> blas = internal::OpenBlas();
  if (!blas.ok()) return std::string(blas.status().message());
  const char* config = (*blas)->get_config();
  return config == nullptr ? "OpenBLAS" : config;
}

absl::StatusOr<double> MeasureCpuSgemmTflops(int n, double seconds) {
  if (n < 1) return absl::InvalidArgumentError(absl::StrCat("SGEMM size must be >= 1, not ", n));
  PS_ASSIGN_OR_RETURN(const internal::OpenBlasApi* blas, internal::OpenBlas());
  const size_t size = static_cast<size_t>(n) * n;
  std::vector<float> a(size), b(size), c(size);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (size_t i = 0; i < size; ++i) {
    a[i] = dist(rng);
    b[i] = dist(rng);
  }
  const auto sgemm = [&] {
    blas->sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  };
  sgemm();  // warm-up: OpenBLAS starts its threads, the pages of C are touched
  int runs = 0;
  const absl::Time start = absl::Now();
  double elapsed = 0;
  while (runs < 3 || elapsed < seconds) {
    sgemm();
    ++runs;
    elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  }
  return 2.0 * n * static_cast<double>(size) * runs / std::max(1e-9, elapsed) / 1e12;
}

}  // namespace ps
