// The CUDA backend's own kernels (everything but the GEMMs), as plain launch functions so that
// only kernels.cu goes through nvcc. Each launch is asynchronous on `stream` and returns the
// launch error (cudaGetLastError()); a size of zero launches nothing. All matrices are dense and
// row-major in device memory; sizes follow ComputeBackend (worker/compute_backend.h).
#ifndef PS_WORKER_COMPUTE_CUDA_KERNELS_H_
#define PS_WORKER_COMPUTE_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ps {
namespace cuda {

// Counters the kernels raise on bad input (they cannot return errors): read back by the backend
// and turned into INVALID_ARGUMENT.
struct DeviceErrors {
  int bad_labels;  // SoftmaxCrossEntropy: labels outside [0, classes)
  int bad_rows;    // Gather / ScatterAdd: row indices outside [0, table_rows)
};

// One SoftmaxCrossEntropy's result in device memory.
struct DeviceLossStats {
  double loss_sum;
  int correct;
  int padding;
};

// y[r, c] += bias[c]; with `relu`, then y = max(y, 0).
cudaError_t LaunchAddBias(cudaStream_t stream, int rows, int cols, const float* bias, float* y,
                          bool relu);

// grad[i] = 0 where activation[i] <= 0.
cudaError_t LaunchReluBackward(cudaStream_t stream, int64_t n, const float* activation,
                               float* grad);

// bias_grad[c] = sum over r of grad[r, c] (overwritten; zeros when rows == 0).
cudaError_t LaunchBiasGradient(cudaStream_t stream, int rows, int cols, const float* grad,
                               float* bias_grad);

// Per row r: row_loss[r] = logsumexp(logits[r]) - logits[r, label], row_correct[r] = 1 if the
// first arg-max is the label; with `grad`, grad[r] = grad_scale * (softmax - onehot) (grad may
// alias logits). A label out of range counts in errors->bad_labels and scores loss 0, wrong.
cudaError_t LaunchSoftmaxCrossEntropy(cudaStream_t stream, int batch, int classes,
                                      const float* logits, const int32_t* labels, float grad_scale,
                                      float* grad, double* row_loss, int* row_correct,
                                      DeviceErrors* errors);

// out->loss_sum = sum of row_loss, out->correct = sum of row_correct (one block, in a fixed
// order: the result does not depend on timing). Writes zeros for batch == 0.
cudaError_t LaunchReduceLossStats(cudaStream_t stream, int batch, const double* row_loss,
                                  const int* row_correct, DeviceLossStats* out);

// out[i, :] = table[rows[i], :]; rows out of range give zeros and count in errors->bad_rows.
cudaError_t LaunchGather(cudaStream_t stream, int n, int dim, int table_rows, const float* table,
                         const int32_t* rows, float* out, DeviceErrors* errors);

// table[rows[i], :] += grad[i, :] with atomic adds (repeated rows accumulate; the order of the
// additions, hence the last bits, may differ between runs); rows out of range are skipped and
// counted in errors->bad_rows.
cudaError_t LaunchScatterAdd(cudaStream_t stream, int n, int dim, int table_rows, const float* grad,
                             const int32_t* rows, float* table, DeviceErrors* errors);

// c[i] *= beta for n elements (beta == 0 writes zeros without reading c, as GEMM's contract
// requires).
cudaError_t LaunchScale(cudaStream_t stream, int64_t n, float beta, float* c);

// x[i] = a deterministic pseudo-random value in [-1, 1) of (seed, i): benchmark inputs.
cudaError_t LaunchFillPattern(cudaStream_t stream, int64_t n, uint32_t seed, float* x);

}  // namespace cuda
}  // namespace ps

#endif  // PS_WORKER_COMPUTE_CUDA_KERNELS_H_
