#include "common/transport_options.h"

#include <grpc/grpc.h>

#include <cstdint>
#include <functional>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ps {
namespace {

constexpr int kMinFrame = 16384;     // HTTP/2's smallest SETTINGS_MAX_FRAME_SIZE
constexpr int kMaxFrame = 16777215;  // and its largest (2^24 - 1)
constexpr int kMinWindow = 65535;    // HTTP/2's initial window

absl::Status CheckRange(absl::string_view name, int value, int lo, int hi) {
  if (value == 0 || (value >= lo && value <= hi)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(name, " is ", value, "; it must be 0 (gRPC's default) or ", lo, "..", hi));
}

// Calls set(name, value) for each setting that is not gRPC's default.
void ForEachArgument(const TransportOptions& o, const std::function<void(const char*, int)>& set) {
  if (o.http2_max_frame_bytes > 0) set(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, o.http2_max_frame_bytes);
  if (o.http2_stream_window_bytes > 0) {
    set(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, o.http2_stream_window_bytes);
  }
  if (!o.http2_bdp_probe) set(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  if (o.http2_write_buffer_bytes > 0) {
    set(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, o.http2_write_buffer_bytes);
  }
  if (o.tcp_read_chunk_bytes > 0) set(GRPC_ARG_TCP_READ_CHUNK_SIZE, o.tcp_read_chunk_bytes);
  if (o.tcp_min_read_chunk_bytes > 0) {
    set(GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, o.tcp_min_read_chunk_bytes);
  }
  if (o.tcp_max_read_chunk_bytes > 0) {
    set(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, o.tcp_max_read_chunk_bytes);
  }
}

}  // namespace

absl::Status TransportOptions::Validate() const {
  constexpr int kMaxInt = std::numeric_limits<int>::max();
  absl::Status s = CheckRange("http2_max_frame_bytes", http2_max_frame_bytes, kMinFrame, kMaxFrame);
  if (s.ok()) {
    s = CheckRange("http2_stream_window_bytes", http2_stream_window_bytes, kMinWindow, kMaxInt);
  }
  if (s.ok()) s = CheckRange("http2_write_buffer_bytes", http2_write_buffer_bytes, 1, kMaxInt);
  if (s.ok()) s = CheckRange("tcp_read_chunk_bytes", tcp_read_chunk_bytes, 1, kMaxInt);
  if (s.ok()) s = CheckRange("tcp_min_read_chunk_bytes", tcp_min_read_chunk_bytes, 1, kMaxInt);
  if (s.ok()) s = CheckRange("tcp_max_read_chunk_bytes", tcp_max_read_chunk_bytes, 1, kMaxInt);
  if (!s.ok()) return s;
  if (tcp_min_read_chunk_bytes > 0 && tcp_max_read_chunk_bytes > 0 &&
      tcp_min_read_chunk_bytes > tcp_max_read_chunk_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tcp_min_read_chunk_bytes (", tcp_min_read_chunk_bytes,
                     ") is larger than tcp_max_read_chunk_bytes (", tcp_max_read_chunk_bytes, ")"));
  }
  return absl::OkStatus();
}

void ApplyTransportOptions(const TransportOptions& options, grpc::ChannelArguments* args) {
  ForEachArgument(options, [args](const char* name, int value) { args->SetInt(name, value); });
}

void ApplyTransportOptions(const TransportOptions& options, grpc::ServerBuilder* builder) {
  ForEachArgument(options, [builder](const char* name, int value) {
    builder->AddChannelArgument(name, value);
  });
}

}  // namespace ps
