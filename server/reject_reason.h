// Why a request was refused before it touched state: a bounded label for
// ps_server_rejected_requests_total, attached to the Status at the validation site.
#ifndef PS_SERVER_REJECT_REASON_H_
#define PS_SERVER_REJECT_REASON_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace ps {

enum class RejectReason : uint8_t {
  kNone = 0,         // not a rejection (OK, or a failure after validation: deadline, ...)
  kUnknownTable,     // no table with that id
  kWrongJob,         // the table belongs to another job
  kBadSize,          // undecodable keys/values, too many keys, values != keys * dim
  kDuplicateKey,     // a key twice in one block
  kKeyOutOfRange,    // a dense key >= num_rows
  kNonFinite,        // NaN / Inf gradient (policy: reject)
  kWrongShard,       // a key in a slot this server does not own
  kBadClock,         // a clock ahead of / behind what the consistency rules allow
  kBadLrScale,       // lr_scale outside [0, 1000]
  kUnconfiguredJob,  // the job was never configured on this server
  kDroppedJob,       // the job was dropped from this server (it ended): DropJob
  kOther,            // any other refused request (bad spec, epoch conflict, dead worker, ...)
};
inline constexpr int kNumRejectReasons = static_cast<int>(RejectReason::kOther) + 1;

// The label value ("unknown_table", ...); "" for kNone.
inline absl::string_view RejectReasonName(RejectReason r) {
  static constexpr absl::string_view kNames[kNumRejectReasons] = {"",
                                                                  "unknown_table",
                                                                  "wrong_job",
                                                                  "bad_size",
                                                                  "duplicate_key",
                                                                  "key_out_of_range",
                                                                  "nonfinite",
                                                                  "wrong_shard",
                                                                  "bad_clock",
                                                                  "bad_lr_scale",
                                                                  "unconfigured_job",
                                                                  "dropped_job",
                                                                  "other"};
  return kNames[static_cast<int>(r)];
}

inline constexpr absl::string_view kRejectReasonPayloadUrl = "type.ps/ps.RejectReason";

// Returns `s` (an error) tagged with `reason`.
inline absl::Status Rejected(RejectReason reason, absl::Status s) {
  s.SetPayload(kRejectReasonPayloadUrl, absl::Cord(RejectReasonName(reason)));
  return s;
}

// The tag set by Rejected(); untagged validation errors (INVALID_ARGUMENT, FAILED_PRECONDITION,
// ALREADY_EXISTS, OUT_OF_RANGE) are kOther; OK and other codes are kNone.
inline RejectReason RejectReasonOf(const absl::Status& s) {
  if (s.ok()) return RejectReason::kNone;
  if (auto payload = s.GetPayload(kRejectReasonPayloadUrl); payload.has_value()) {
    const std::string name(*payload);
    for (int i = 1; i < kNumRejectReasons; ++i) {
      if (RejectReasonName(static_cast<RejectReason>(i)) == name) {
        return static_cast<RejectReason>(i);
      }
    }
    return RejectReason::kOther;
  }
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kOutOfRange:
      return RejectReason::kOther;
    default:
      return RejectReason::kNone;
  }
}

}  // namespace ps

#endif  // PS_SERVER_REJECT_REASON_H_
