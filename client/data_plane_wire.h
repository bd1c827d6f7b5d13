// The data plane's requests and pull answers on the wire, encoded and decoded by hand
// (common/wire.h): gradients are sent straight from the caller's buffers (borrowed gRPC slices)
// and pulled values are copied straight from the received slices into the caller's `out`.
// The bytes are those of the protobuf messages in ps/v1/parameter_server.proto.
#ifndef PS_CLIENT_DATA_PLANE_WIRE_H_
#define PS_CLIENT_DATA_PLANE_WIRE_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/wire.h"
#include "ps/v1/types.pb.h"

namespace ps {

struct TableOp;

// Keys of one op that go into one part: indices into op.keys.
struct KeySegment {
  int op = 0;
  std::vector<uint32_t> idx;
  // How the block's values travel (KeyBlock.codec). A push block with a codec sends `encoded`
  // (its gradients, encoded once when the request is built) instead of the op's gradients; a
  // pull block asks for its answer in this codec and decodes it.
  v1::ValueCodec codec = v1::CODEC_NONE;
  std::string encoded;
  float momentum = 0.0f;  // KeyBlock.momentum: the topk momentum correction the push applied
  // Pulls of a table with delta pulls (CodecSpec.delta): the answer goes through the client's
  // copy (PullCache), and `since` (KeyBlock.since) is the token of the rows held (0: none).
  bool delta = false;
  uint64_t since = 0;
  uint64_t num_rows = 0;  // the table's (delta pulls)
};

class PullCache;

// The fields every data-plane request starts with.
struct RequestHeader {
  std::string job_id;
  uint32_t worker_id = 0;
  uint64_t request_id = 0;  // pushes
  int64_t clock = 0;
  uint64_t shard_epoch = 0;
  float lr_scale = 1.0f;      // pushes
  bool prefetch = false;      // pulls: PullRequest.prefetch (rows read from disk, no values)
  uint32_t resend_parts = 0;  // pushes: PushRequest.resend_parts (0: an ordinary push)
};

// PullRequest: keys only.
void EncodePullRequest(const RequestHeader& h, const std::vector<TableOp>& ops,
                       const std::vector<int>& dims, const std::vector<KeySegment>& segments,
                       wire::MessageBuilder* b);
// PushRequest: keys copied, gradients borrowed from the ops.
void EncodePushRequest(const RequestHeader& h, const std::vector<TableOp>& ops,
                       const std::vector<int>& dims, const std::vector<KeySegment>& segments,
                       wire::MessageBuilder* b);
// PushPullRequest (advance_clock set): a push of `push_segments` of `push_ops`, a pull of
// `pull_segments` of `pull_ops`.
void EncodePushPullRequest(const RequestHeader& h, uint32_t clock_parts,
                           const std::vector<TableOp>& push_ops, const std::vector<int>& push_dims,
                           const std::vector<KeySegment>& push_segments,
                           const std::vector<TableOp>& pull_ops, const std::vector<int>& pull_dims,
                           const std::vector<KeySegment>& pull_segments, wire::MessageBuilder* b);

// Parses a PullResponse, copying block j's values into the `out` rows of `segments[j]`.
// Blocks with a codec are decoded (FP16, BF16, INT8); blocks of delta segments go through
// `cache` (required if there are any). INTERNAL if the answer is malformed or its blocks or
// sizes do not match the request (rows already copied may hold new values then).
absl::Status DecodePullResponse(grpc::ByteBuffer* response, const std::vector<TableOp>& ops,
                                const std::vector<int>& dims,
                                const std::vector<KeySegment>& segments, PullCache* cache,
                                int64_t* min_clock, int64_t* wait_micros);

}  // namespace ps

#endif  // PS_CLIENT_DATA_PLANE_WIRE_H_
