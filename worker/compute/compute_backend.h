// The math a worker needs to train its models, behind one interface with two implementations:
// the CPU backend (worker/compute/cpu_backend.h: OpenBLAS, or the exact reference kernel) and
// CUDA (worker/compute/cuda/cuda_backend.h).
#ifndef PS_WORKER_COMPUTE_COMPUTE_BACKEND_H_
#define PS_WORKER_COMPUTE_COMPUTE_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ps {

// Sum of per-example losses and number of correct arg-max predictions over a batch.
struct LossStats {
  double loss_sum = 0;
  int correct = 0;
};

// Where a backend buffer lives.
//   kDevice   memory the compute methods read and write (device memory for CUDA; host memory
//             for the CPU backend). The host must not touch it directly unless host_memory().
//   kStaging  host memory that the copy methods move fastest (page-locked for CUDA, so that
//             copies run asynchronously at full bus speed). The host reads and writes it
//             directly: a worker pulls parameters into it and pushes gradients from it.
enum class MemoryKind { kDevice, kStaging };

class ComputeBackend;

// Memory from ComputeBackend::Allocate, given back when destroyed. Move-only; the backend must
// outlive it.
class BackendBuffer {
 public:
  BackendBuffer() = default;
  ~BackendBuffer() { Reset(); }
  BackendBuffer(BackendBuffer&& other) noexcept { *this = std::move(other); }
  BackendBuffer& operator=(BackendBuffer&& other) noexcept;
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;

  void* data() const { return data_; }
  float* floats() const { return static_cast<float*>(data_); }
  int32_t* ints() const { return static_cast<int32_t*>(data_); }
  size_t bytes() const { return bytes_; }
  MemoryKind kind() const { return kind_; }
  // Frees the memory now; the buffer becomes empty.
  void Reset();

 private:
  friend class ComputeBackend;
  BackendBuffer(ComputeBackend* owner, MemoryKind kind, void* data, size_t bytes)
      : owner_(owner), kind_(kind), data_(data), bytes_(bytes) {}

  ComputeBackend* owner_ = nullptr;
  MemoryKind kind_ = MemoryKind::kDevice;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// All matrices are dense and row-major. Pointers given to the compute methods are kDevice
// memory of this backend (for the CPU backend: any host memory). Sizes may be zero (then nothing
// is read or written). Outputs never alias inputs unless a method says so.
//
// Execution model. A backend has two queues: compute (the compute methods) and copy (the copy
// methods). Work runs in order within a queue; the queues run concurrently unless ordered by
// ComputeAfterCopies() / CopiesAfterCompute(). Where the backend is asynchronous (CUDA), methods
// only queue work: results are visible to the host, and errors reported, after Synchronize().
// The CPU backend does everything at once, in call order.
//
// Errors. The compute and copy methods return nothing: like CUDA's own launches they record the
// first error (a failed launch, a bad label or row index), and Synchronize() returns it; the CUDA
// backend skips the work queued after an error. Bad sizes or pointers are programmer errors.
//
// A backend instance is not thread-safe (it keeps scratch buffers and queues); use one per
// thread.
class ComputeBackend {
 public:
  virtual ~ComputeBackend() = default;

  // A short name for logs, e.g. "cpu" or "cuda:0".
  virtual std::string name() const = 0;
  // True if kDevice memory is host memory (the CPU backend): then the compute methods accept
  // any host pointer, and copies are plain memcpy.
  virtual bool host_memory() const = 0;

  // ---- Memory and queues.

  // A buffer of `bytes` bytes (an empty one for 0), uninitialized. RESOURCE_EXHAUSTED or the
  // backend's error when the memory is not there.
  absl::StatusOr<BackendBuffer> Allocate(MemoryKind kind, size_t bytes);

  // Copies `bytes` from host memory to kDevice memory, or back, on the copy queue. The host
  // memory must stay valid and unchanged until Synchronize(); staging memory makes the copy
  // asynchronous, other host memory may make the call wait.
  virtual void CopyToDevice(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual void CopyToHost(void* host_dst, const void* device_src, size_t bytes) = 0;
  // Compute queued after this call starts once the copies queued before it are done.
  virtual void ComputeAfterCopies() {}
  // Copies queued after this call start once the compute queued before it is done.
  virtual void CopiesAfterCompute() {}
  // Waits for all queued work. Returns the first error recorded since the last call (and
  // forgets it), or OK.
  virtual absl::Status Synchronize() = 0;

  // ---- Compute.

  // C[m, n] = alpha * op(A) * op(B) + beta * C, where op(A) is m x k and op(B) is k x n.
  // A is stored m x k, or k x m when trans_a; B is stored k x n, or n x k when trans_b.
  // When beta == 0, C is not read (it may hold garbage, even NaN).
  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    const float* b, float beta, float* c) = 0;

  // y[r, c] += bias[c] for a rows x cols matrix y.
  virtual void AddBias(int rows, int cols, const float* bias, float* y) = 0;

  // y[r, c] = max(y[r, c] + bias[c], 0) for a rows x cols matrix y.
  virtual void AddBiasRelu(int rows, int cols, const float* bias, float* y) = 0;

  // grad[i] = 0 wherever activation[i] <= 0, for n elements; `activation` is the ReLU output.
  virtual void ReluBackward(int64_t n, const float* activation, float* grad) = 0;

  // bias_grad[c] = sum over r of grad[r, c], for a rows x cols matrix grad (overwrites).
  virtual void BiasGradient(int rows, int cols, const float* grad, float* bias_grad) = 0;

  // Softmax cross-entropy of `logits` (batch x classes) against `labels` (batch, each in
  // [0, classes)). When `grad` is not null, writes grad_scale * (softmax(logits) - onehot(label))
  // into it (batch x classes; it may alias `logits`). Returns the summed loss (natural log) and
  // the number of rows whose arg-max logit is the label. An asynchronous backend waits for the
  // result; a label out of range is an error (reported by Synchronize(); its row scores 0).
  virtual LossStats SoftmaxCrossEntropy(int batch, int classes, const float* logits,
                                        const int32_t* labels, float grad_scale, float* grad) = 0;

  // SoftmaxCrossEntropy without waiting: `*stats` (host memory, valid until then) is filled by
  // the next Synchronize(). The CPU backend fills it at once.
  virtual void SoftmaxCrossEntropyAsync(int batch, int classes, const float* logits,
                                        const int32_t* labels, float grad_scale, float* grad,
                                        LossStats* stats) {
    *stats = SoftmaxCrossEntropy(batch, classes, logits, labels, grad_scale, grad);
  }

  // Sparse embedding rows. table is table_rows x dim; rows holds n indices.
  // out[i, :] = table[rows[i], :] for i < n.
  virtual void Gather(int n, int dim, int table_rows, const float* table, const int32_t* rows,
                      float* out) = 0;
  // table[rows[i], :] += grad[i, :] for i < n; a row may repeat (its gradients add up).
  // An index out of [0, table_rows) is an error (reported by Synchronize(); that row is skipped,
  // or gathered as zeros).
  virtual void ScatterAdd(int n, int dim, int table_rows, const float* grad, const int32_t* rows,
                          float* table) = 0;

 protected:
  // The memory behind Allocate() and BackendBuffer's destructor.
  virtual absl::StatusOr<void*> AllocateMemory(MemoryKind kind, size_t bytes) = 0;
  virtual void FreeMemory(MemoryKind kind, void* data) = 0;

 private:
  friend class BackendBuffer;
};

inline BackendBuffer& BackendBuffer::operator=(BackendBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    owner_ = std::exchange(other.owner_, nullptr);
    kind_ = other.kind_;
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

inline void BackendBuffer::Reset() {
  if (owner_ != nullptr && data_ != nullptr) owner_->FreeMemory(kind_, data_);
  owner_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

inline absl::StatusOr<BackendBuffer> ComputeBackend::Allocate(MemoryKind kind, size_t bytes) {
  if (bytes == 0) return BackendBuffer();
  absl::StatusOr<void*> data = AllocateMemory(kind, bytes);
  if (!data.ok()) return data.status();
  return BackendBuffer(this, kind, *data, bytes);
}

}  // namespace ps

#endif  // PS_WORKER_COMPUTE_COMPUTE_BACKEND_H_
