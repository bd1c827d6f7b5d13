#include "common/grpc_status.h"

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(GrpcStatusTest, RemoteErrorsAreMarkedAndTheMarkSurvivesPrefixes) {
  const absl::Status remote =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused"));
  EXPECT_EQ(remote.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(IsRpcError(remote));
  const absl::Status wrapped = WithPrefix(WithPrefix(remote, "server a:1"), "step 3 of 9");
  EXPECT_EQ(wrapped.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(wrapped.message(), "step 3 of 9: server a:1: connection refused");
  EXPECT_TRUE(IsRpcError(wrapped));
  // A local error of the same code is not remote, prefixed or not.
  const absl::Status local = absl::FailedPreconditionError("no kernel image for this GPU");
  EXPECT_FALSE(IsRpcError(local));
  EXPECT_FALSE(IsRpcError(WithPrefix(local, "step 1 of 9")));
  EXPECT_TRUE(WithPrefix(absl::OkStatus(), "x").ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  EXPECT_EQ(ToGrpcStatus(wrapped).error_message(), wrapped.message());
}

}  // namespace
}  // namespace ps
