#include "worker/compute/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "worker/compute/cuda/cublas_library.h"
#include "worker/compute/cuda/cuda_status.h"
#include "worker/compute/cuda/kernels.h"

namespace ps {
namespace {

using cuda::CublasStatus;
using cuda::CudaStatus;

// NVIDIA's recommended cuBLAS workspace on Hopper; given once so that cuBLAS never allocates
// during a step.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
// SoftmaxCrossEntropyAsync results that can wait for one Synchronize() (a training step has 1).
constexpr int kStatsSlots = 16;

cublasComputeType_t ComputeTypeOf(GemmPrecision precision) {
  switch (precision) {
    case GemmPrecision::kTf32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case GemmPrecision::kBf16:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
    case GemmPrecision::kFp16:
      return CUBLAS_COMPUTE_32F_FAST_16F;
    case GemmPrecision::kFp32:
      break;
  }
  return CUBLAS_COMPUTE_32F;
}

absl::Status CheckDevice(int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky; keep it out of later calls
    return absl::FailedPreconditionError(absl::StrCat("cuda:", device,
                                                      " is not usable: ", cudaGetErrorName(e), " (",
                                                      cudaGetErrorString(e), ")"));
  }
  if (device < 0 || device >= count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda:", device, " does not exist: the driver reports ", count, " CUDA device(s)"));
  }
  return absl::OkStatus();
}

// See ComputeBackend for the contract. Two non-blocking streams: compute (kernels and cuBLAS)
// and copy (host <-> device), ordered against each other by two events. Errors of the queued
// calls go into status_ (the first one wins); while it is set, further work is skipped, as CUDA
// itself would fail it.
class CudaBackend final : public ComputeBackend {
 public:
  static absl::StatusOr<std::unique_ptr<ComputeBackend>> Create(int device,
                                                                GemmPrecision precision) {
    PS_RETURN_IF_ERROR(CheckDevice(device));
    PS_ASSIGN_OR_RETURN(const cuda::CublasApi* cublas, cuda::Cublas());
    std::unique_ptr<CudaBackend> backend(new CudaBackend(device, precision, cublas));
    // On failure the destructor frees whatever Init() made.
    PS_RETURN_IF_ERROR(backend->Init());
    return std::unique_ptr<ComputeBackend>(std::move(backend));
  }

  ~CudaBackend() override {
    cudaSetDevice(device_);
    if (compute_stream_ != nullptr) cudaStreamSynchronize(compute_stream_);
    if (copy_stream_ != nullptr) cudaStreamSynchronize(copy_stream_);
    if (cublas_ != nullptr) api_->destroy(cublas_);
    for (void* p :
         {workspace_, static_cast<void*>(stats_device_), static_cast<void*>(errors_device_),
          static_cast<void*>(row_loss_), static_cast<void*>(row_correct_)}) {
      if (p != nullptr) cudaFree(p);
    }
    if (stats_host_ != nullptr) cudaFreeHost(stats_host_);
    if (errors_host_ != nullptr) cudaFreeHost(errors_host_);
    if (copies_done_ != nullptr) cudaEventDestroy(copies_done_);
    if (compute_done_ != nullptr) cudaEventDestroy(compute_done_);
    if (compute_stream_ != nullptr) cudaStreamDestroy(compute_stream_);
    if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
  }

  std::string name() const override { return absl::StrCat("cuda:", device_); }
  bool host_memory() const override { return false; }

  void CopyToDevice(void* device_dst, const void* host_src, size_t bytes) override {
    if (bytes == 0 || !Ready()) return;
    Record(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, copy_stream_),
           "cudaMemcpyAsync(host to device)");
  }

  void CopyToHost(void* host_dst, const void* device_src, size_t bytes) override {
    if (bytes == 0 || !Ready()) return;
    Record(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, copy_stream_),
           "cudaMemcpyAsync(device to host)");
  }

  // cudaStreamWaitEvent waits for the event's most recent record at the time of the call, so
  // one event per direction serves any number of orderings.
  void ComputeAfterCopies() override {
    if (!Ready()) return;
    Record(cudaEventRecord(copies_done_, copy_stream_), "cudaEventRecord(copy stream)");
    Record(cudaStreamWaitEvent(compute_stream_, copies_done_, 0),
           "cudaStreamWaitEvent(compute stream)");
  }

  void CopiesAfterCompute() override {
    if (!Ready()) return;
    Record(cudaEventRecord(compute_done_, compute_stream_), "cudaEventRecord(compute stream)");
    Record(cudaStreamWaitEvent(copy_stream_, compute_done_, 0), "cudaStreamWaitEvent(copy stream)");
  }

  absl::Status Synchronize() override {
    Wait();
    return std::exchange(status_, absl::OkStatus());
  }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    if (m <= 0 || n <= 0 || !Ready()) return;
    if (k <= 0 || alpha == 0.0f) {
      // Only C = beta * C is left; done here so as not to depend on cuBLAS's handling of k = 0
      // (and its leading-dimension checks for empty matrices).
      Record(cuda::LaunchScale(compute_stream_, static_cast<int64_t>(m) * n, beta, c),
             "LaunchScale");
      return;
    }
    // cuBLAS is column-major; a row-major matrix is its column-major transpose. So compute
    // C^T (n x m, column-major = C row-major) = op(B)^T * op(A)^T, with B and A as stored.
    // Row-major A (m x k) read column-major is A^T (k x m, ld k): no transpose for op(A)^T.
    // Row-major A stored k x m (trans_a) read column-major is m x k (ld m): transpose it.
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int lda = trans_a ? m : k;
    const int ldb = trans_b ? k : n;
    RecordCublas(
        api_->gemm_ex(cublas_, op_b, op_a, n, m, k, &alpha, b, CUDA_R_32F, ldb, a, CUDA_R_32F, lda,
                      &beta, c, CUDA_R_32F, n, compute_type_, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  }

  void AddBias(int rows, int cols, const float* bias, float* y) override {
    if (!Ready()) return;
    Record(cuda::LaunchAddBias(compute_stream_, rows, cols, bias, y, /*relu=*/false),
           "LaunchAddBias");
  }

  void AddBiasRelu(int rows, int cols, const float* bias, float* y) override {
    if (!Ready()) return;
    Record(cuda::LaunchAddBias(compute_stream_, rows, cols, bias, y, /*relu=*/true),
           "LaunchAddBias(relu)");
  }

  void ReluBackward(int64_t n, const float* activation, float* grad) override {
    if (!Ready()) return;
    Record(cuda::LaunchReluBackward(compute_stream_, n, activation, grad), "LaunchReluBackward");
  }

  void BiasGradient(int rows, int cols, const float* grad, float* bias_grad) override {
    if (!Ready()) return;
    Record(cuda::LaunchBiasGradient(compute_stream_, rows, cols, grad, bias_grad),
           "LaunchBiasGradient");
  }

  LossStats SoftmaxCrossEntropy(int batch, int classes, const float* logits, const int32_t* labels,
                                float grad_scale, float* grad) override {
    LossStats stats;
    SoftmaxCrossEntropyAsync(batch, classes, logits, labels, grad_scale, grad, &stats);
    Wait();  // fills `stats`; an error stays recorded for the next Synchronize()
    return stats;
  }

  void SoftmaxCrossEntropyAsync(int batch, int classes, const float* logits, const int32_t* labels,
                                float grad_scale, float* grad, LossStats* stats) override {
    *stats = LossStats();
    if (!Ready()) return;
    if (static_cast<int>(pending_stats_.size()) == kStatsSlots) Wait();
    if (!EnsureRowScratch(batch)) return;
    const int slot = static_cast<int>(pending_stats_.size());
    check_errors_ = true;
    // No classes: no row is written, so none may be summed either (the scratch holds garbage).
    const int rows = classes > 0 ? batch : 0;
    Record(
        cuda::LaunchSoftmaxCrossEntropy(compute_stream_, rows, classes, logits, labels, grad_scale,
                                        grad, row_loss_, row_correct_, errors_device_),
        "LaunchSoftmaxCrossEntropy");
    Record(cuda::LaunchReduceLossStats(compute_stream_, rows, row_loss_, row_correct_,
                                       stats_device_ + slot),
           "LaunchReduceLossStats");
    // On the compute stream: the result follows its kernel without an event.
    Record(cudaMemcpyAsync(stats_host_ + slot, stats_device_ + slot, sizeof(cuda::DeviceLossStats),
                           cudaMemcpyDeviceToHost, compute_stream_),
           "cudaMemcpyAsync(loss stats)");
    if (status_.ok()) pending_stats_.push_back({slot, stats});
  }

  void Gather(int n, int dim, int table_rows, const float* table, const int32_t* rows,
              float* out) override {
    if (!Ready()) return;
    check_errors_ = true;
    Record(
        cuda::LaunchGather(compute_stream_, n, dim, table_rows, table, rows, out, errors_device_),
        "LaunchGather");
  }

  void ScatterAdd(int n, int dim, int table_rows, const float* grad, const int32_t* rows,
                  float* table) override {
    if (!Ready()) return;
    check_errors_ = true;
    Record(cuda::LaunchScatterAdd(compute_stream_, n, dim, table_rows, grad, rows, table,
                                  errors_device_),
           "LaunchScatterAdd");
  }

 protected:
  absl::StatusOr<void*> AllocateMemory(MemoryKind kind, size_t bytes) override {
    UseDevice();
    void* data = nullptr;
    if (kind == MemoryKind::kDevice) {
      PS_CUDA_RETURN_IF_ERROR(cudaMalloc(&data, bytes));
    } else {
      PS_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&data, bytes, cudaHostAllocDefault));
    }
    return data;
  }

  void FreeMemory(MemoryKind kind, void* data) override {
    UseDevice();
    // Queued work may still read or write the buffer: let it finish first.
    cudaStreamSynchronize(compute_stream_);
    cudaStreamSynchronize(copy_stream_);
    if (kind == MemoryKind::kDevice) {
      cudaFree(data);
    } else {
      cudaFreeHost(data);
    }
  }

 private:
  struct PendingStats {
    int slot;
    LossStats* out;
  };

  CudaBackend(int device, GemmPrecision precision, const cuda::CublasApi* api)
      : device_(device), compute_type_(ComputeTypeOf(precision)), api_(api) {}

  absl::Status Init() {
    PS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    PS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&compute_stream_, cudaStreamNonBlocking));
    PS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    PS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&copies_done_, cudaEventDisableTiming));
    PS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming));
    PS_RETURN_IF_ERROR(CublasStatus(api_->create(&cublas_), "cublasCreate"));
    PS_RETURN_IF_ERROR(CublasStatus(api_->set_stream(cublas_, compute_stream_), "cublasSetStream"));
    // The precision is chosen per call by the compute type; the default math mode keeps
    // CUBLAS_COMPUTE_32F in true FP32 (no implicit TF32).
    PS_RETURN_IF_ERROR(
        CublasStatus(api_->set_math_mode(cublas_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
    PS_CUDA_RETURN_IF_ERROR(cudaMalloc(&workspace_, kCublasWorkspaceBytes));
    PS_RETURN_IF_ERROR(CublasStatus(api_->set_workspace(cublas_, workspace_, kCublasWorkspaceBytes),
                                    "cublasSetWorkspace"));
    PS_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&stats_device_),
                                       kStatsSlots * sizeof(cuda::DeviceLossStats)));
    PS_CUDA_RETURN_IF_ERROR(cudaMallocHost(reinterpret_cast<void**>(&stats_host_),
                                           kStatsSlots * sizeof(cuda::DeviceLossStats)));
    PS_CUDA_RETURN_IF_ERROR(
        cudaMalloc(reinterpret_cast<void**>(&errors_device_), sizeof(cuda::DeviceErrors)));
    PS_CUDA_RETURN_IF_ERROR(
        cudaMallocHost(reinterpret_cast<void**>(&errors_host_), sizeof(cuda::DeviceErrors)));
    PS_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(errors_device_, 0, sizeof(cuda::DeviceErrors), compute_stream_));
    PS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_stream_));
    return absl::OkStatus();
  }

  // CUDA's current device is per thread, and other code (another backend, a benchmark) may
  // change it: make ours current before queueing work (our streams and cuBLAS handle belong to
  // it). cudaGetDevice is a thread-local read.
  void UseDevice() {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != device_) cudaSetDevice(device_);
  }

  // False once an error is recorded: the caller skips its work.
  bool Ready() {
    if (!status_.ok()) return false;
    UseDevice();
    return true;
  }

  void Record(cudaError_t error, const char* call) {
    if (error != cudaSuccess && status_.ok()) {
      status_ = CudaStatus(error, absl::StrCat(name(), ": ", call).c_str());
    }
  }

  void RecordCublas(cublasStatus_t s, const char* call) {
    if (s != CUBLAS_STATUS_SUCCESS && status_.ok()) {
      status_ = CublasStatus(s, absl::StrCat(name(), ": ", call).c_str());
    }
  }

  // Per-row scratch of SoftmaxCrossEntropyAsync, grown to the largest batch seen (so allocated
  // once per job in practice).
  bool EnsureRowScratch(int batch) {
    if (batch <= row_capacity_) return true;
    Wait();  // earlier launches may still use the old scratch
    if (!status_.ok()) return false;
    if (row_loss_ != nullptr) cudaFree(row_loss_);
    if (row_correct_ != nullptr) cudaFree(row_correct_);
    row_loss_ = nullptr;
    row_correct_ = nullptr;
    row_capacity_ = 0;
    Record(cudaMalloc(reinterpret_cast<void**>(&row_loss_), sizeof(double) * batch),
           "cudaMalloc(softmax row losses)");
    Record(cudaMalloc(reinterpret_cast<void**>(&row_correct_), sizeof(int) * batch),
           "cudaMalloc(softmax row hits)");
    if (!status_.ok()) return false;
    row_capacity_ = batch;
    return true;
  }

  // Waits for both streams, then hands out the deferred loss stats and turns the kernels' bad
  // input counters into an error.
  void Wait() {
    UseDevice();
    Record(cudaStreamSynchronize(copy_stream_), "cudaStreamSynchronize(copy stream)");
    Record(cudaStreamSynchronize(compute_stream_), "cudaStreamSynchronize(compute stream)");
    if (check_errors_) {
      // Read and reset the counters even after an error, so that they start from zero for the
      // next step (while an error is recorded, Record() keeps the first one).
      check_errors_ = false;
      const bool was_ok = status_.ok();
      Record(cudaMemcpyAsync(errors_host_, errors_device_, sizeof(cuda::DeviceErrors),
                             cudaMemcpyDeviceToHost, compute_stream_),
             "cudaMemcpyAsync(error counters)");
      Record(cudaMemsetAsync(errors_device_, 0, sizeof(cuda::DeviceErrors), compute_stream_),
             "cudaMemsetAsync(error counters)");
      Record(cudaStreamSynchronize(compute_stream_), "cudaStreamSynchronize(error counters)");
      if (was_ok && status_.ok() && errors_host_->bad_labels > 0) {
        status_ = absl::InvalidArgumentError(
            absl::StrCat(name(), ": SoftmaxCrossEntropy: ", errors_host_->bad_labels,
                         " label(s) outside [0, classes)"));
      }
      if (was_ok && status_.ok() && errors_host_->bad_rows > 0) {
        status_ = absl::InvalidArgumentError(
            absl::StrCat(name(), ": Gather/ScatterAdd: ", errors_host_->bad_rows,
                         " row index(es) out of range"));
      }
    }
    for (const PendingStats& p : pending_stats_) {
      if (!status_.ok()) break;
      p.out->loss_sum = stats_host_[p.slot].loss_sum;
      p.out->correct = stats_host_[p.slot].correct;
    }
    pending_stats_.clear();
  }

  const int device_;
  const cublasComputeType_t compute_type_;
  const cuda::CublasApi* const api_;  // process-wide, loaded once
  cudaStream_t compute_stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t copies_done_ = nullptr;
  cudaEvent_t compute_done_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* workspace_ = nullptr;
  cuda::DeviceLossStats* stats_device_ = nullptr;
  cuda::DeviceLossStats* stats_host_ = nullptr;  // page-locked
  cuda::DeviceErrors* errors_device_ = nullptr;
  cuda::DeviceErrors* errors_host_ = nullptr;  // page-locked
  double* row_loss_ = nullptr;
  int* row_correct_ = nullptr;
  int row_capacity_ = 0;
  bool check_errors_ = false;  // a kernel that counts bad input ran since the last Wait()
  std::vector<PendingStats> pending_stats_;
  absl::Status status_;  // the first error since the last Synchronize()
};

}  // namespace

CudaAvailability ProbeCuda() {
  CudaAvailability a;
  a.compiled = true;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    a.reason = absl::StrCat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
    return a;
  }
  if (count == 0) {
    a.reason = "the CUDA driver reports no device";
    return a;
  }
  // A device without cuBLAS is no device for us: --device=auto then stays on the CPU, and an
  // explicit cuda:N says what is missing.
  absl::StatusOr<const cuda::CublasApi*> cublas = cuda::Cublas();
  if (!cublas.ok()) {
    a.reason = std::string(cublas.status().message());
    return a;
  }
  a.devices = count;
  return a;
}

absl::Status LoadCublas() { return cuda::Cublas().status(); }

absl::StatusOr<std::unique_ptr<ComputeBackend>> MakeCudaBackend(int device,
                                                                GemmPrecision precision) {
  return CudaBackend::Create(device, precision);
}

absl::StatusOr<std::string> CudaDeviceName(int device) {
  PS_RETURN_IF_ERROR(CheckDevice(device));
  cudaDeviceProp prop;
  PS_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  return absl::StrFormat("%s (sm_%d%d, %d SMs, %.0f GiB)", prop.name, prop.major, prop.minor,
                         prop.multiProcessorCount,
                         static_cast<double>(prop.totalGlobalMem) / (1 << 30));
}

namespace {

// Device memory, streams, events and a handle of a measurement, released on every path.
struct PeakRun {
  const cuda::CublasApi* api = nullptr;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  float* a = nullptr;
  float* b = nullptr;
  float* c = nullptr;
  void* workspace = nullptr;
  ~PeakRun() {
    if (stream != nullptr) cudaStreamSynchronize(stream);
    if (cublas != nullptr) api->destroy(cublas);
    for (void* p :
         {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(c), workspace}) {
      if (p != nullptr) cudaFree(p);
    }
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

}  // namespace

absl::StatusOr<double> MeasureCublasGemmTflops(int device, GemmPrecision precision, int m, int n,
                                               int k, int iterations) {
  if (m <= 0 || n <= 0 || k <= 0 || iterations <= 0) {
    return absl::InvalidArgumentError("MeasureCublasGemmTflops: sizes and iterations must be > 0");
  }
  PS_RETURN_IF_ERROR(CheckDevice(device));
  PS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  PeakRun run;
  PS_ASSIGN_OR_RETURN(run.api, cuda::Cublas());
  const cuda::CublasApi& api = *run.api;
  PS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&run.stream, cudaStreamNonBlocking));
  PS_CUDA_RETURN_IF_ERROR(cudaEventCreate(&run.start));
  PS_CUDA_RETURN_IF_ERROR(cudaEventCreate(&run.stop));
  PS_RETURN_IF_ERROR(CublasStatus(api.create(&run.cublas), "cublasCreate"));
  PS_RETURN_IF_ERROR(CublasStatus(api.set_stream(run.cublas, run.stream), "cublasSetStream"));
  PS_RETURN_IF_ERROR(
      CublasStatus(api.set_math_mode(run.cublas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
  PS_CUDA_RETURN_IF_ERROR(cudaMalloc(&run.workspace, kCublasWorkspaceBytes));
  PS_RETURN_IF_ERROR(CublasStatus(
      api.set_workspace(run.cublas, run.workspace, kCublasWorkspaceBytes), "cublasSetWorkspace"));
  const int64_t size_a = static_cast<int64_t>(m) * k, size_b = static_cast<int64_t>(k) * n,
                size_c = static_cast<int64_t>(m) * n;
  PS_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&run.a), sizeof(float) * size_a));
  PS_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&run.b), sizeof(float) * size_b));
  PS_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&run.c), sizeof(float) * size_c));
  // Random-looking inputs: all-zero matrices run faster than real ones (less switching power).
  PS_CUDA_RETURN_IF_ERROR(cuda::LaunchFillPattern(run.stream, size_a, 1, run.a));
  PS_CUDA_RETURN_IF_ERROR(cuda::LaunchFillPattern(run.stream, size_b, 2, run.b));
  const float alpha = 1.0f, beta = 0.0f;
  const cublasComputeType_t compute = ComputeTypeOf(precision);
  auto gemm = [&] {
    // Column-major m x n = (m x k) * (k x n), nothing transposed: cuBLAS's own best case.
    return api.gemm_ex(run.cublas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, run.a, CUDA_R_32F, m,
                       run.b, CUDA_R_32F, k, &beta, run.c, CUDA_R_32F, m, compute,
                       CUBLAS_GEMM_DEFAULT);
  };
  for (int i = 0; i < 2; ++i) {  // warm-up: cuBLAS's heuristics, the GPU's clocks
    PS_RETURN_IF_ERROR(CublasStatus(gemm(), "cublasGemmEx"));
  }
  std::vector<float> millis;
  for (int i = 0; i < iterations; ++i) {
    PS_CUDA_RETURN_IF_ERROR(cudaEventRecord(run.start, run.stream));
    PS_RETURN_IF_ERROR(CublasStatus(gemm(), "cublasGemmEx"));
    PS_CUDA_RETURN_IF_ERROR(cudaEventRecord(run.stop, run.stream));
    PS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(run.stop));
    float ms = 0;
    PS_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, run.start, run.stop));
    millis.push_back(ms);
  }
  std::sort(millis.begin(), millis.end());
  const double seconds = std::max(1e-9, millis[millis.size() / 2] * 1e-3);
  return 2.0 * m * n * static_cast<double>(k) / seconds / 1e12;
}

}  // namespace ps
