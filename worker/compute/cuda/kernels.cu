// The CUDA backend's kernels. Kept free of Abseil and of the rest of the tree so that nvcc sees
// one small file (compile time: CI has two cores).
#include <cfloat>
#include <climits>
#include <cstdint>

#include "worker/compute/cuda/kernels.h"

namespace ps {
namespace cuda {
namespace {

constexpr int kThreads = 256;
// Grid-stride loops cover any size with at most this many blocks (enough to fill an H100's 132
// SMs many times over).
constexpr int64_t kMaxBlocks = 8192;
constexpr unsigned kFullMask = 0xffffffffu;

int BlocksFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

__global__ void AddBiasKernel(int64_t n, int cols, const float* __restrict__ bias,
                              float* __restrict__ y, bool relu) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = y[i] + bias[i % cols];
    y[i] = relu ? fmaxf(v, 0.0f) : v;
  }
}

__global__ void ReluBackwardKernel(int64_t n, const float* __restrict__ activation,
                                   float* __restrict__ grad) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (!(activation[i] > 0.0f)) grad[i] = 0.0f;
  }
}

// Block (32, 8): threadIdx.x picks a column of the block's 32, threadIdx.y a residue of rows
// mod 8; neighbouring threads read neighbouring columns (coalesced). The 8 partial sums of a
// column are then added in shared memory.
__global__ void BiasGradientKernel(int rows, int cols, const float* __restrict__ grad,
                                   float* __restrict__ bias_grad) {
  __shared__ float partial[8][33];  // 33: no bank conflicts on the transposed read
  const int col = blockIdx.x * 32 + threadIdx.x;
  float sum = 0.0f;
  if (col < cols) {
    for (int r = threadIdx.y; r < rows; r += 8) sum += grad[static_cast<int64_t>(r) * cols + col];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int i = 0; i < 8; ++i) total += partial[i][threadIdx.x];
    bias_grad[col] = total;
  }
}

// One warp per row. Lane l handles the columns j = l, l + 32, ...: in every pass a column is
// read and written by the same lane, so `grad` may alias `logits` without a barrier. The lane
// that owns the label column computes the row's loss from its own read of logits[label], before
// it overwrites that element.
__global__ void SoftmaxCrossEntropyKernel(int batch, int classes, const float* logits,
                                          const int32_t* __restrict__ labels, float grad_scale,
                                          float* grad, double* __restrict__ row_loss,
                                          int* __restrict__ row_correct, DeviceErrors* errors) {
  const int warps_per_block = blockDim.x / 32;
  const int row = blockIdx.x * warps_per_block + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= batch) return;  // whole warps leave together: the shuffles below see full warps
  const float* z = logits + static_cast<int64_t>(row) * classes;

  // Max and first arg-max (ties: the smaller index, as the CPU reference's strict '>').
  float max_value = -FLT_MAX;
  int arg_max = INT_MAX;
  for (int j = lane; j < classes; j += 32) {
    const float v = z[j];
    if (arg_max == INT_MAX || v > max_value) {
      max_value = v;
      arg_max = j;
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other_value = __shfl_xor_sync(kFullMask, max_value, offset);
    const int other_arg = __shfl_xor_sync(kFullMask, arg_max, offset);
    if (other_arg != INT_MAX && (arg_max == INT_MAX || other_value > max_value ||
                                 (other_value == max_value && other_arg < arg_max))) {
      max_value = other_value;
      arg_max = other_arg;
    }
  }

  double denom = 0.0;
  for (int j = lane; j < classes; j += 32) denom += exp(static_cast<double>(z[j] - max_value));
  for (int offset = 16; offset > 0; offset >>= 1) {
    denom += __shfl_xor_sync(kFullMask, denom, offset);
  }

  const int label = labels[row];
  const bool label_ok = label >= 0 && label < classes;
  const int owner = label_ok ? label % 32 : 0;
  if (lane == owner) {
    if (label_ok) {
      row_loss[row] = log(denom) - static_cast<double>(z[label] - max_value);
      row_correct[row] = arg_max == label ? 1 : 0;
    } else {
      row_loss[row] = 0.0;
      row_correct[row] = 0;
      atomicAdd(&errors->bad_labels, 1);
    }
  }
  if (grad == nullptr) return;
  float* g = grad + static_cast<int64_t>(row) * classes;
  const double scale = grad_scale / denom;
  for (int j = lane; j < classes; j += 32) {
    float v = static_cast<float>(scale * exp(static_cast<double>(z[j] - max_value)));
    if (j == label) v -= grad_scale;
    g[j] = v;
  }
}

__global__ void ReduceLossStatsKernel(int batch, const double* __restrict__ row_loss,
                                      const int* __restrict__ row_correct, DeviceLossStats* out) {
  __shared__ double loss[kThreads];
  __shared__ int correct[kThreads];
  double l = 0.0;
  int c = 0;
  for (int r = threadIdx.x; r < batch; r += kThreads) {
    l += row_loss[r];
    c += row_correct[r];
  }
  loss[threadIdx.x] = l;
  correct[threadIdx.x] = c;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      loss[threadIdx.x] += loss[threadIdx.x + half];
      correct[threadIdx.x] += correct[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out->loss_sum = loss[0];
    out->correct = correct[0];
    out->padding = 0;
  }
}

__global__ void GatherKernel(int64_t n, int dim, int table_rows, const float* __restrict__ table,
                             const int32_t* __restrict__ rows, float* __restrict__ out,
                             DeviceErrors* errors) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / dim;
    const int c = static_cast<int>(i % dim);
    const int32_t row = rows[r];
    if (row < 0 || row >= table_rows) {
      out[i] = 0.0f;
      if (c == 0) atomicAdd(&errors->bad_rows, 1);
      continue;
    }
    out[i] = table[static_cast<int64_t>(row) * dim + c];
  }
}

__global__ void ScatterAddKernel(int64_t n, int dim, int table_rows, const float* __restrict__ grad,
                                 const int32_t* __restrict__ rows, float* table,
                                 DeviceErrors* errors) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / dim;
    const int c = static_cast<int>(i % dim);
    const int32_t row = rows[r];
    if (row < 0 || row >= table_rows) {
      if (c == 0) atomicAdd(&errors->bad_rows, 1);
      continue;
    }
    atomicAdd(&table[static_cast<int64_t>(row) * dim + c], grad[i]);
  }
}

__global__ void ScaleKernel(int64_t n, float beta, float* c) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    c[i] = beta == 0.0f ? 0.0f : beta * c[i];
  }
}

__global__ void FillPatternKernel(int64_t n, uint32_t seed, float* x) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // A 32-bit integer hash (lowbias32) of (seed, i): cheap, and no two matrices alike.
    uint32_t h = static_cast<uint32_t>(i) ^ (seed * 0x9e3779b9u) ^ static_cast<uint32_t>(i >> 32);
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    x[i] = static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
}

}  // namespace

cudaError_t LaunchAddBias(cudaStream_t stream, int rows, int cols, const float* bias, float* y,
                          bool relu) {
  const int64_t n = static_cast<int64_t>(rows) * cols;
  if (n <= 0) return cudaSuccess;
  AddBiasKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, cols, bias, y, relu);
  return cudaGetLastError();
}

cudaError_t LaunchReluBackward(cudaStream_t stream, int64_t n, const float* activation,
                               float* grad) {
  if (n <= 0) return cudaSuccess;
  ReluBackwardKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, activation, grad);
  return cudaGetLastError();
}

cudaError_t LaunchBiasGradient(cudaStream_t stream, int rows, int cols, const float* grad,
                               float* bias_grad) {
  if (cols <= 0) return cudaSuccess;
  BiasGradientKernel<<<(cols + 31) / 32, dim3(32, 8), 0, stream>>>(rows < 0 ? 0 : rows, cols, grad,
                                                                   bias_grad);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxCrossEntropy(cudaStream_t stream, int batch, int classes,
                                      const float* logits, const int32_t* labels, float grad_scale,
                                      float* grad, double* row_loss, int* row_correct,
                                      DeviceErrors* errors) {
  if (batch <= 0 || classes <= 0) return cudaSuccess;
  constexpr int kRowsPerBlock = kThreads / 32;
  SoftmaxCrossEntropyKernel<<<(batch + kRowsPerBlock - 1) / kRowsPerBlock, kThreads, 0, stream>>>(
      batch, classes, logits, labels, grad_scale, grad, row_loss, row_correct, errors);
  return cudaGetLastError();
}

cudaError_t LaunchReduceLossStats(cudaStream_t stream, int batch, const double* row_loss,
                                  const int* row_correct, DeviceLossStats* out) {
  ReduceLossStatsKernel<<<1, kThreads, 0, stream>>>(batch < 0 ? 0 : batch, row_loss, row_correct,
                                                    out);
  return cudaGetLastError();
}

cudaError_t LaunchGather(cudaStream_t stream, int n, int dim, int table_rows, const float* table,
                         const int32_t* rows, float* out, DeviceErrors* errors) {
  const int64_t total = static_cast<int64_t>(n) * dim;
  if (total <= 0) return cudaSuccess;
  GatherKernel<<<BlocksFor(total), kThreads, 0, stream>>>(total, dim, table_rows, table, rows, out,
                                                          errors);
  return cudaGetLastError();
}

cudaError_t LaunchScatterAdd(cudaStream_t stream, int n, int dim, int table_rows, const float* grad,
                             const int32_t* rows, float* table, DeviceErrors* errors) {
  const int64_t total = static_cast<int64_t>(n) * dim;
  if (total <= 0) return cudaSuccess;
  ScatterAddKernel<<<BlocksFor(total), kThreads, 0, stream>>>(total, dim, table_rows, grad, rows,
                                                              table, errors);
  return cudaGetLastError();
}

cudaError_t LaunchScale(cudaStream_t stream, int64_t n, float beta, float* c) {
  if (n <= 0) return cudaSuccess;
  ScaleKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, beta, c);
  return cudaGetLastError();
}

cudaError_t LaunchFillPattern(cudaStream_t stream, int64_t n, uint32_t seed, float* x) {
  if (n <= 0) return cudaSuccess;
  FillPatternKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, seed, x);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace ps
