#include "common/transport_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

// docs/operations.md, "Transport settings"; clients take the same defaults from
// ps::TransportOptions. 0: gRPC's own default.
ABSL_FLAG(int, http2_max_frame_bytes, ps::TransportOptions().http2_max_frame_bytes,
          "largest HTTP/2 frame this end accepts, bytes (16384..16777215; 0: gRPC's 16 KiB). "
          "Larger frames cut a large request's per-frame work in the transport");
ABSL_FLAG(int, http2_stream_window_bytes, ps::TransportOptions().http2_stream_window_bytes,
          "initial HTTP/2 stream flow-control window this end advertises, bytes (>= 65535; "
          "0: gRPC's 64 KiB, grown by BDP probing)");
ABSL_FLAG(bool, http2_bdp_probe, ps::TransportOptions().http2_bdp_probe,
          "size the flow-control windows by BDP probing (pings); off: the windows stay at "
          "--http2_stream_window_bytes");
ABSL_FLAG(int, http2_write_buffer_bytes, ps::TransportOptions().http2_write_buffer_bytes,
          "bytes gRPC buffers for a write before flushing (0: gRPC's default)");
ABSL_FLAG(int, tcp_read_chunk_bytes, ps::TransportOptions().tcp_read_chunk_bytes,
          "first size of a connection's TCP read buffer, bytes (0: gRPC's 8 KiB)");
ABSL_FLAG(int, tcp_min_read_chunk_bytes, ps::TransportOptions().tcp_min_read_chunk_bytes,
          "smallest the TCP read buffer adapts down to, bytes (0: gRPC's 256 B)");
ABSL_FLAG(int, tcp_max_read_chunk_bytes, ps::TransportOptions().tcp_max_read_chunk_bytes,
          "largest the TCP read buffer adapts up to, bytes (0: gRPC's 4 MiB)");

namespace ps {

TransportOptions TransportOptionsFromFlags() {
  TransportOptions t;
  t.http2_max_frame_bytes = absl::GetFlag(FLAGS_http2_max_frame_bytes);
  t.http2_stream_window_bytes = absl::GetFlag(FLAGS_http2_stream_window_bytes);
  t.http2_bdp_probe = absl::GetFlag(FLAGS_http2_bdp_probe);
  t.http2_write_buffer_bytes = absl::GetFlag(FLAGS_http2_write_buffer_bytes);
  t.tcp_read_chunk_bytes = absl::GetFlag(FLAGS_tcp_read_chunk_bytes);
  t.tcp_min_read_chunk_bytes = absl::GetFlag(FLAGS_tcp_min_read_chunk_bytes);
  t.tcp_max_read_chunk_bytes = absl::GetFlag(FLAGS_tcp_max_read_chunk_bytes);
  return t;
}

std::vector<std::string> TransportServerFlags(const TransportOptions& t) {
  return {absl::StrCat("--http2_max_frame_bytes=", t.http2_max_frame_bytes),
          absl::StrCat("--http2_stream_window_bytes=", t.http2_stream_window_bytes),
          absl::StrCat("--http2_bdp_probe=", t.http2_bdp_probe ? "true" : "false"),
          absl::StrCat("--http2_write_buffer_bytes=", t.http2_write_buffer_bytes),
          absl::StrCat("--tcp_read_chunk_bytes=", t.tcp_read_chunk_bytes),
          absl::StrCat("--tcp_min_read_chunk_bytes=", t.tcp_min_read_chunk_bytes),
          absl::StrCat("--tcp_max_read_chunk_bytes=", t.tcp_max_read_chunk_bytes)};
}

}  // namespace ps
