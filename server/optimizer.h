// Server-side optimizers: how a row's values (and optimizer state) change under a gradient.
#ifndef PS_SERVER_OPTIMIZER_H_
#define PS_SERVER_OPTIMIZER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "ps/v1/types.pb.h"

namespace ps {

// One optimizer per table, shared by all its rows. Stateless itself (the per-row state lives
// in the row, after the values), so Apply() is thread-safe for different rows.
class RowOptimizer {
 public:
  // INVALID_ARGUMENT naming the field for a bad spec (negative learning rate, beta outside
  // [0, 1), ...). Unset fields take the defaults documented in types.proto.
  static absl::StatusOr<std::unique_ptr<RowOptimizer>> Create(const v1::OptimizerSpec& spec);
  virtual ~RowOptimizer() = default;

  // Floats of state kept per value: 0 (sgd), 1 (momentum, adagrad), 2 (adam, ftrl).
  virtual int state_per_value() const = 0;
  // Sets the state of a fresh row: `dim * state_per_value()` floats at `state`. `values` holds
  // the initialized row (ftrl derives its state from it).
  virtual void InitState(const float* values, float* state, int dim) const = 0;
  // Applies `grad` (dim floats) to `values` and `state`. `step` is the row's update count
  // including this one (1 for the first update; adam's bias correction uses it). `grad` may lie
  // at any address (a pushed row is read where gRPC received it, often not 4-byte aligned): it
  // is read with unaligned loads. `values` and `state` are a row's own, aligned floats.
  void Apply(const void* grad, int dim, int64_t step, float* values, float* state) const {
    ApplyScaled(grad, dim, step, 1.0f, values, state);
  }
  // Apply() with the learning rate (ftrl: alpha) multiplied by `lr_scale` (a schedule's factor).
  virtual void ApplyScaled(const void* grad, int dim, int64_t step, float lr_scale, float* values,
                           float* state) const = 0;
};

}  // namespace ps

#endif  // PS_SERVER_OPTIMIZER_H_
