#include "server/data_call.h"

#include <grpcpp/impl/codegen/proto_utils.h>

#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/wire.h"

namespace ps {
namespace {

// Parses a request buffer with protobuf.
template <typename Request>
absl::Status ParseRequest(grpc::ByteBuffer* in, Request* req) {
  const size_t bytes = in->Length();
  grpc::Status s = grpc::SerializationTraits<Request>::Deserialize(in, req);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed ", req->GetTypeName(), " (", bytes,
                     " bytes): not the protobuf encoding of that message"));
  }
  return absl::OkStatus();
}

// A PushResponse: `duplicate` when set (a varint true), else nothing.
static_assert(std::is_same_v<decltype(v1::PushResponse().duplicate()), bool>);
grpc::ByteBuffer PushAnswer(bool duplicate) {
  static constexpr char kDuplicate[] = {
      (v1::PushResponse::kDuplicateFieldNumber << 3) | wire::kVarint, 1};
  static_assert(v1::PushResponse::kDuplicateFieldNumber < 16, "a one-byte tag");
  grpc::Slice slice(kDuplicate, duplicate ? sizeof(kDuplicate) : 0);
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace

DataCall::DataCall(DataPlane* plane, ServerMethod method, const grpc::ByteBuffer& request,
                   grpc::ByteBuffer* answer, absl::Time deadline, std::string job_scope)
    : plane_(plane),
      method_(method),
      request_(request),  // shares the slices
      answer_(answer),
      deadline_(deadline),
      job_scope_(std::move(job_scope)),
      request_bytes_(request.Length()) {}

bool DataCall::Serve(bool may_block) {
  if (!read_) {
    if (!may_block && request_bytes_ > DataPlane::kServeHereBytes) return false;
    read_ = true;
    status_ = Read();
    if (!status_.ok() || !pull_.has_value()) return true;
  }
  absl::StatusOr<std::optional<PullAnswer>> pulled = plane_->Pull(&*pull_, may_block);
  if (pulled.ok() && !pulled->has_value()) return false;
  if (!pulled.ok()) {
    status_ = pulled.status();
    return true;
  }
  grpc::Slice slice((*pulled)->bytes());  // uninitialized
  status_ = (*pulled)->Write(reinterpret_cast<char*>(const_cast<uint8_t*>(slice.begin())));
  if (status_.ok()) *answer_ = grpc::ByteBuffer(&slice, 1);
  return true;
}

absl::Status DataCall::Read() {
  switch (method_) {
    case ServerMethod::kPush: {
      InPlaceRequest<v1::PushRequest> push;
      PS_RETURN_IF_ERROR(push.Parse(&request_, ReadPushRequest));
      PS_ASSIGN_OR_RETURN(const bool duplicate, plane_->Push(job_scope_, push.req, push.values));
      *answer_ = PushAnswer(duplicate);
      return absl::OkStatus();
    }
    case ServerMethod::kPull: {
      PS_RETURN_IF_ERROR(ParseRequest(&request_, &pull_request_));
      PS_ASSIGN_OR_RETURN(pull_, plane_->StartPull(job_scope_, pull_request_, deadline_));
      return absl::OkStatus();
    }
    case ServerMethod::kPushPull: {
      PS_RETURN_IF_ERROR(push_pull_.Parse(&request_, ReadPushPullRequest));
      PS_ASSIGN_OR_RETURN(
          pull_, plane_->PushPull(job_scope_, push_pull_.req, push_pull_.values, deadline_));
      return absl::OkStatus();
    }
    default:
      return absl::InternalError(
          absl::StrCat("not a data-plane method: ", ServerMethodName(method_)));
  }
}

}  // namespace ps
