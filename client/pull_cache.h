// The client's copy of the rows it pulled from tables with delta pulls (CodecSpec.delta): a
// pull of such a table sends, per block, the token of the answer its rows came from, and the
// servers answer only the values changed since (docs/data-plane.md#delta-pulls). The copy is
// what those answers are applied to before the rows are copied into the caller's buffer.
#ifndef PS_CLIENT_PULL_CACHE_H_
#define PS_CLIENT_PULL_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "ps/v1/types.pb.h"
#include "client/data_plane_wire.h"

namespace ps {

struct TableOp;

// Thread-safe: answers of one table are applied one at a time. Pulls of the same rows may
// overlap and their answers arrive in any order: a row keeps the newest answer of its server
// table (tokens only grow within one), and an older answer that arrives later gives the caller
// the row's newer values instead of rolling the copy back.
class PullCache {
 public:
  // The token to send for seg's rows of `op` (KeyBlock.since): the oldest of their tokens if
  // every row holds one of the same server table, else 0 (answer every value).
  uint64_t Since(const TableOp& op, const KeySegment& seg, int dim, uint64_t num_rows);
  // A whole answer, decoded into seg's rows of op.out: kept with its token (rows that hold a
  // newer answer keep it, and op.out gets it).
  void StoreWhole(const TableOp& op, const KeySegment& seg, int dim, uint64_t num_rows,
                  uint64_t token);
  // A delta answer (`bytes`: KeyBlock.values, encoded with seg.codec) to the request's block
  // `seg`, sent with seg.since: applied to the copy, whose rows then go to op.out, and kept with
  // its token (rows that hold a newer answer keep it; a row replaced meanwhile by another server
  // table's answer keeps that and is pulled whole next time). INTERNAL (nothing changed) for a
  // malformed block or one that answers a block sent without a token of its table.
  absl::Status ApplyDelta(const TableOp& op, const KeySegment& seg, int dim, uint64_t num_rows,
                          absl::string_view bytes, uint64_t token);

 private:
  struct Table {
    absl::Mutex mu;
    int dim ABSL_GUARDED_BY(mu) = 0;
    std::vector<float> values ABSL_GUARDED_BY(mu);     // row r's at [r * dim, (r + 1) * dim)
    std::vector<uint64_t> tokens ABSL_GUARDED_BY(mu);  // per row; 0: not held
    // Sizes the copy for `num_rows` rows of `d` values; a new shape drops what was held.
    void Reserve(int d, uint64_t num_rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  };
  Table* TableOf(uint32_t table_id);

  absl::Mutex mu_;
  absl::flat_hash_map<uint32_t, std::unique_ptr<Table>> tables_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_CLIENT_PULL_CACHE_H_
