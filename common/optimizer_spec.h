// Checks of an optimizer's parameters (OptimizerSpec), shared by the scheduler (at submit) and the
// servers (at CreateTable) so that both refuse the same values with the same words.
#ifndef PS_COMMON_OPTIMIZER_SPEC_H_
#define PS_COMMON_OPTIMIZER_SPEC_H_

#include "absl/status/status.h"
#include "ps/v1/types.pb.h"

namespace ps {

// INVALID_ARGUMENT naming the field ("optimizer.learning_rate is nan; must be in (0, inf)") where
// a parameter the kind uses is NaN, infinite, negative or otherwise out of its range, or the kind
// is unknown. Unset fields take the defaults documented in types.proto and pass.
absl::Status ValidateOptimizerSpec(const v1::OptimizerSpec& spec);

}  // namespace ps

#endif  // PS_COMMON_OPTIMIZER_SPEC_H_
