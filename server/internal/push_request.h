// Push and PushPull requests read in place from the slices gRPC received them in: every field is
// parsed as protobuf would parse it, except the pushed blocks' values, which stay where they
// arrived (ScatteredValues) and are applied from there.
#ifndef PS_SERVER_INTERNAL_PUSH_REQUEST_H_
#define PS_SERVER_INTERNAL_PUSH_REQUEST_H_

#include <deque>

#include "absl/status/status.h"
#include "common/wire.h"
#include "ps/v1/parameter_server.pb.h"
#include "server/internal/scattered_values.h"

namespace ps {

// A message cut into pieces smaller than 1 KiB on average (more than 64 of them) is copied into
// one slice: a client may send tiny HTTP/2 frames, and reading in place keeps a record per
// piece. Normal messages (pieces of tens of KiB here) are left alone. False if unreadable.
bool CoalesceIfFragmented(grpc::ByteBuffer* buffer);

// Reads a PushRequest from `r` into `req` (cleared first), with every block's values left empty:
// block i's values are (*values)[i], pieces of the reader's slices (the reader must outlive
// them). INVALID_ARGUMENT "malformed PushRequest ..." where protobuf would not parse the bytes.
// Job ids must be ASCII (protobuf would also refuse invalid UTF-8; no valid job id is
// anything but ASCII).
absl::Status ReadPushRequest(wire::SliceReader* r, v1::PushRequest* req,
                             std::deque<ScatteredValues>* values);
// The same for a PushPullRequest: the push's blocks' values go to `values`; the pull blocks are
// parsed whole.
absl::Status ReadPushPullRequest(wire::SliceReader* r, v1::PushPullRequest* req,
                                 std::deque<ScatteredValues>* values);

// A Push or PushPull request read in place from a received buffer (Parse), which must outlive
// this: the gradients are applied from its slices.
template <typename Request>
struct InPlaceRequest {
  using Reader = absl::Status (*)(wire::SliceReader*, Request*, std::deque<ScatteredValues>*);

  // Reads `in` (coalesced first if fragmented) with `read` (ReadPushRequest or
  // ReadPushPullRequest).
  absl::Status Parse(grpc::ByteBuffer* in, Reader read) {
    if (!CoalesceIfFragmented(in) || !reader.Reset(in)) {
      return absl::InvalidArgumentError("unreadable request");
    }
    return read(&reader, &req, &values);
  }

  wire::SliceReader reader;
  Request req;
  std::deque<ScatteredValues> values;  // block i's gradients
};

}  // namespace ps

#endif  // PS_SERVER_INTERNAL_PUSH_REQUEST_H_
