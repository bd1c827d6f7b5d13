// One Pull, Push or PushPull call, from the bytes gRPC received to the bytes of its answer, over
// the DataPlane. gRPC's callback handlers run these steps (ParameterService::StartDataCall) and
// add only the reactor, the hand-off to a thread that may block, and the call's metrics: tests
// and the fuzzer run the very same ones in process.
#ifndef PS_SERVER_DATA_CALL_H_
#define PS_SERVER_DATA_CALL_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "ps/v1/parameter_server.pb.h"
#include "server/data_plane.h"
#include "server/internal/push_request.h"
#include "server/server_metrics.h"

namespace ps {

// Not thread-safe: one thread at a time runs a call (the one that read it, then maybe one that
// may block). Not movable: the pull it serves borrows the request it read.
class DataCall {
 public:
  // `method`: kPull, kPush or kPushPull. `request`: the received bytes, shared (not copied:
  // pushes are applied from its slices). `answer`: where the answer's bytes go; `plane` and
  // `answer` must outlive this. `deadline`: of a pull's wait in the consistency gate.
  // `job_scope`: the job whose credential the call carries ("": any job).
  DataCall(DataPlane* plane, ServerMethod method, const grpc::ByteBuffer& request,
           grpc::ByteBuffer* answer, absl::Time deadline, std::string job_scope);
  DataCall(const DataCall&) = delete;
  DataCall& operator=(const DataCall&) = delete;

  // Serves the call as far as it can. Without `may_block`, stops where it would block (a
  // request or pull answer over DataPlane::kServeHereBytes, or a pull that must wait in the
  // consistency gate) and returns false: call it again with `may_block`, on a thread that may
  // block, and it goes on from where it stopped. True once the call is done: status() says how,
  // and an OK call's answer is in the answer buffer.
  bool Serve(bool may_block);

  const absl::Status& status() const { return status_; }
  ServerMethod method() const { return method_; }
  size_t request_bytes() const { return request_bytes_; }

 private:
  // Reads the request and serves its push (if any); a pull's caller is checked and its
  // pull left in pull_.
  absl::Status Read();

  DataPlane* const plane_;
  const ServerMethod method_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer* const answer_;
  const absl::Time deadline_;
  const std::string job_scope_;
  const size_t request_bytes_;
  bool read_ = false;
  // What a Pull or PushPull read (PushPull: in place), and its pull, which borrows them.
  v1::PullRequest pull_request_;
  InPlaceRequest<v1::PushPullRequest> push_pull_;
  std::optional<PendingPull> pull_;
  absl::Status status_;
};

}  // namespace ps

#endif  // PS_SERVER_DATA_CALL_H_
