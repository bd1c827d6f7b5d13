// A pull's answer, the bytes of a PullResponse, written from the store straight into the buffer
// that goes out: each block's values as float32, encoded in its table's pull_codec, or (a table
// with delta pulls) only the values changed since the block's token.
#ifndef PS_SERVER_PULL_ANSWER_H_
#define PS_SERVER_PULL_ANSWER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ps/v1/parameter_server.pb.h"
#include "server/table_store.h"

namespace ps {

// Sized first (Read), then written (Write) into a buffer of that size. A delta block's size
// depends on what changed, so its values are read by Read; the others' rows are copied by Write,
// straight from the store. Not thread-safe; movable.
class PullAnswer {
 public:
  // Reads what the answer's size depends on. `blocks` are the pull's blocks as the request
  // sent them (table ids, codecs, tokens) and `views` the same blocks resolved, with their codecs
  // checked against their tables' pull_codec; `store` and both must outlive this.
  // FAILED_PRECONDITION if a table was dropped meanwhile.
  static absl::StatusOr<PullAnswer> Read(
      TableStore* store, const google::protobuf::RepeatedPtrField<v1::KeyBlock>& blocks,
      absl::Span<const TableStore::BlockView> views, int64_t min_clock, int64_t wait_micros);
  PullAnswer(PullAnswer&&) noexcept;
  PullAnswer& operator=(PullAnswer&&) noexcept;
  ~PullAnswer();

  // The answer's bytes.
  size_t bytes() const { return total_; }
  // Writes the answer at `out` (bytes() of room), as protobuf would serialize it: blocks
  // (table_id, values, codec, and for delta pulls since and delta), then min_clock and
  // wait_micros. FAILED_PRECONDITION if a table was dropped meanwhile (`out` is then garbage).
  absl::Status Write(char* out) const;

 private:
  struct Delta;  // a delta table's block, read before the answer is sized
  PullAnswer(TableStore* store, const google::protobuf::RepeatedPtrField<v1::KeyBlock>& blocks,
             absl::Span<const TableStore::BlockView> views);
  // The bytes of block i's values field (its payload).
  size_t ValueBytes(size_t i) const;
  // Writes block i's values at `p` (ValueBytes(i) of room).
  absl::Status WriteValues(size_t i, char* p) const;

  TableStore* store_;
  const google::protobuf::RepeatedPtrField<v1::KeyBlock>* blocks_;
  absl::Span<const TableStore::BlockView> views_;
  int64_t min_clock_ = 0;
  int64_t wait_micros_ = 0;
  std::vector<std::unique_ptr<Delta>> deltas_;  // null for a block without delta pulls
  std::vector<size_t> block_bytes_;             // each block's message, as embedded
  size_t total_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_PULL_ANSWER_H_
