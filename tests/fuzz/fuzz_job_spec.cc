// Job specs as users submit them: a textproto of ps.v1.JobSpec (psctl submit FILE) parsed with
// protobuf's TextFormat, or the serialized message (the scheduler's SubmitJob), then
// NormalizeJobSpec. A spec it accepts must be accepted again unchanged (normalizing is
// idempotent) and have a model size within the limits.
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/message_differencer.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "ps/v1/job.pb.h"
#include "scheduler/job_spec.h"

namespace {

// Keeps TextFormat's parse errors off stderr (the fuzzer would print thousands).
class QuietErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // unparsable input is the point
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  ps::v1::JobSpec spec;
  QuietErrors errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(input, &spec) && !spec.ParseFromString(input)) return 0;

  ps::JobLimits limits;
  limits.checkpoint_roots = {"/var/lib/ps/checkpoints", "/srv/ckpt"};
  limits.max_model_bytes = uint64_t{1} << 30;
  if (!ps::NormalizeJobSpec(&spec, limits).ok()) return 0;
  if (ps::ModelBytes(spec) > limits.max_model_bytes) std::abort();
  ps::v1::JobSpec again = spec;
  if (!ps::NormalizeJobSpec(&again, limits).ok()) std::abort();
  if (!google::protobuf::util::MessageDifferencer::Equals(spec, again)) std::abort();
  return 0;
}
