// Conversions between absl::Status and grpc::Status (one adapter, used by every daemon).
#ifndef PS_COMMON_GRPC_STATUS_H_
#define PS_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ps {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

// The payload that marks a status as the answer of a remote call (or its transport): a caller
// can tell a server's UNAVAILABLE or FAILED_PRECONDITION from a local error with the same code.
inline constexpr absl::string_view kRpcErrorPayload = "ps.rpc_error";

inline absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  out.SetPayload(kRpcErrorPayload, absl::Cord("1"));
  return out;
}

// True if `s` came from a remote call (FromGrpcStatus), through any number of WithPrefix.
inline bool IsRpcError(const absl::Status& s) {
  return !s.ok() && s.GetPayload(kRpcErrorPayload).has_value();
}

// `s` with "prefix: " before its message; code and payloads kept.
inline absl::Status WithPrefix(const absl::Status& s, absl::string_view prefix) {
  if (s.ok()) return s;
  absl::Status out(s.code(), absl::StrCat(prefix, ": ", s.message()));
  s.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace ps

#endif  // PS_COMMON_GRPC_STATUS_H_
