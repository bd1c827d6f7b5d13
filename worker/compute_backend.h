// The dense math a worker needs to train an MLP, behind an interface so that a CUDA backend can
// stand in for the CPU one.
#ifndef PS_WORKER_COMPUTE_BACKEND_H_
#define PS_WORKER_COMPUTE_BACKEND_H_

#include <cstdint>
#include <string>

namespace ps {

// Sum of per-example losses and number of correct arg-max predictions over a batch.
struct LossStats {
  double loss_sum = 0;
  int correct = 0;
};

// All matrices are dense and row-major. Pointers are memory the backend can address directly:
// host memory for the CPU backend. Sizes may be zero (then nothing is read or written).
// Outputs never alias inputs unless a method says so.
// A backend instance is not thread-safe (it may keep scratch buffers); use one per thread.
class ComputeBackend {
 public:
  virtual ~ComputeBackend() = default;

  // A short name for logs, e.g. "cpu".
  virtual std::string name() const = 0;

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
  virtual void ReluBackward(int n, const float* activation, float* grad) = 0;

  // bias_grad[c] = sum over r of grad[r, c], for a rows x cols matrix grad (overwrites).
  virtual void BiasGradient(int rows, int cols, const float* grad, float* bias_grad) = 0;

  // Softmax cross-entropy of `logits` (batch x classes) against `labels` (batch, each in
  // [0, classes)). When `grad` is not null, writes grad_scale * (softmax(logits) - onehot(label))
  // into it (batch x classes; it may alias `logits`). Returns the summed loss (natural log) and
  // the number of rows whose arg-max logit is the label.
  virtual LossStats SoftmaxCrossEntropy(int batch, int classes, const float* logits,
                                        const int32_t* labels, float grad_scale, float* grad) = 0;
};

}  // namespace ps

#endif  // PS_WORKER_COMPUTE_BACKEND_H_
