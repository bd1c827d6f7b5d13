// Encodes a push's blocks for their tables' push_codec (common/value_codec.h), keeping the
// residual of the codecs with error feedback (TOPK, SIGN): what a push did not send is added to
// the next push of the same rows. For TOPK also its momentum correction (a velocity per value,
// accumulated into the residual; a value sent clears both) and its warm-up (a row's first
// warmup_steps pushes send a larger fraction).
#ifndef PS_CLIENT_PUSH_ENCODER_H_
#define PS_CLIENT_PUSH_ENCODER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "client/data_plane_wire.h"
#include "ps/v1/types.pb.h"

namespace ps {

struct TableOp;

// Thread-safe: pushes to one table encode one at a time (their residual is shared).
class PushEncoder {
 public:
  // Sets seg->codec and seg->encoded: the gradients of seg's rows of `op` (plus the residual of
  // those rows, for TOPK and SIGN, which then keeps what this encoding lost). Call once per
  // request built: a retry resends the bytes, it does not encode again. Keys of a table with
  // TOPK or SIGN are dense row ids below `num_rows` (such tables are DENSE); a segment with a key
  // past it is encoded without the residual (the servers refuse it). A block whose values plus
  // what is held of them are not all finite is sent as it is (the servers refuse it too) and
  // leaves the residual and velocity as they were.
  void Encode(const v1::CodecSpec& codec, const TableOp& op, int dim, uint64_t num_rows,
              KeySegment* seg);
  // Forgets every residual and velocity (a job restored from a checkpoint replays steps whose
  // gradients they partly hold). The warm-up's push counts go on.
  void Reset();
  // Sum of |residual| and of |velocity| of a table (tests).
  double ResidualL1(uint32_t table_id);
  double VelocityL1(uint32_t table_id);

  // The fraction of a block a TOPK push sends when its rows have been pushed `pushes` times
  // before: ratio^((pushes + 1) / (warmup_steps + 1)) within the warm-up, then ratio.
  static float WarmupRatio(const v1::CodecSpec& codec, uint32_t pushes);

 private:
  struct Residual {
    absl::Mutex mu;
    std::vector<float> values ABSL_GUARDED_BY(mu);     // row r's at [r * dim, (r + 1) * dim)
    std::vector<float> velocity ABSL_GUARDED_BY(mu);   // the same layout; TOPK momentum only
    std::vector<uint32_t> pushes ABSL_GUARDED_BY(mu);  // per row; TOPK warm-up only
  };
  Residual* ResidualOf(uint32_t table_id);
  double SumAbs(uint32_t table_id, bool velocity);

  absl::Mutex mu_;
  absl::flat_hash_map<uint32_t, std::unique_ptr<Residual>> residuals_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_CLIENT_PUSH_ENCODER_H_
