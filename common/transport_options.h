// The HTTP/2 and TCP settings of the data plane's gRPC connections, one definition for both
// ends: the server builder (ps_server's --http2_* and --tcp_* flags) and the client's channels
// (RpcClientOptions::transport). docs/operations.md ("Transport settings") gives each reason.
#ifndef PS_COMMON_TRANSPORT_OPTIONS_H_
#define PS_COMMON_TRANSPORT_OPTIONS_H_

#include <grpcpp/server_builder.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/status/status.h"

namespace ps {

// A field's 0 means "gRPC's own default" (the setting is not passed). The defaults come from
// interleaved A/B runs and profiles of ps_bench (docs/benchmarks.md, "The HTTP/2 transport
// settings"). A setting a peer advertises in HTTP/2 SETTINGS (frame size, stream window)
// governs what that peer receives, so each end's value shapes the other end's sends.
struct TransportOptions {
  // Largest HTTP/2 frame this end accepts (SETTINGS_MAX_FRAME_SIZE), bytes, 16384..16777215.
  // gRPC's default is 16 KiB: a 1 MiB message crosses 64 DATA frames, each with its header and
  // its own pass through the transport's write and parse loops. Default: HTTP/2's largest, so
  // a request part (2 MiB by default) crosses in one frame.
  int http2_max_frame_bytes = 16777215;
  // Initial window of each HTTP/2 stream this end advertises (gRPC's
  // grpc.http2.lookahead_bytes), bytes, 0 or 65535..2^31-1. gRPC's default (kept) is 64 KiB,
  // grown by BDP probing as the connection is measured. A large fixed window with probing off
  // cut a 1 MiB request's latency with one server and client, and cost CPU with two of each:
  // no clear win (docs/benchmarks.md).
  int http2_stream_window_bytes = 0;
  // BDP probing: pings that measure the bandwidth-delay product and size the windows from it.
  // Off, the windows stay at http2_stream_window_bytes (set it large then).
  bool http2_bdp_probe = true;
  // Bytes gRPC buffers for a write before it flushes (grpc.http2.write_buffer_size); 0..2^31-1.
  // gRPC's default kept (4 MiB measured no faster).
  int http2_write_buffer_bytes = 0;
  // The TCP endpoint's read buffer (grpc.experimental.tcp_read_chunk_size and its min and
  // max), bytes: the first size, and the bounds it adapts between. gRPC's defaults: 8 KiB,
  // 256 B and 4 MiB; kept (larger chunks measured no faster on loopback).
  int tcp_read_chunk_bytes = 0;
  int tcp_min_read_chunk_bytes = 0;
  int tcp_max_read_chunk_bytes = 0;

  absl::Status Validate() const;
};

// The settings as channel arguments (a client's channel; the server side uses the builder
// overload, which sets the same arguments). `options` must be valid.
void ApplyTransportOptions(const TransportOptions& options, grpc::ChannelArguments* args);
void ApplyTransportOptions(const TransportOptions& options, grpc::ServerBuilder* builder);

}  // namespace ps

#endif  // PS_COMMON_TRANSPORT_OPTIONS_H_
