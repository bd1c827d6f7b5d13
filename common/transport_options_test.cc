#include "common/transport_options.h"

#include <grpc/grpc.h>

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace ps {
namespace {

// The integer channel arguments `args` holds, by name.
std::map<std::string, int> IntArgs(const grpc::ChannelArguments& args) {
  std::map<std::string, int> out;
  const grpc_channel_args c = args.c_channel_args();
  for (size_t i = 0; i < c.num_args; ++i) {
    if (c.args[i].type == GRPC_ARG_INTEGER) out[c.args[i].key] = c.args[i].value.integer;
  }
  return out;
}

TEST(TransportOptionsTest, DefaultsAreValidAndSetLargeFramesOnly) {
  ASSERT_TRUE(TransportOptions().Validate().ok());
  grpc::ChannelArguments args;
  ApplyTransportOptions(TransportOptions(), &args);
  const std::map<std::string, int> got = IntArgs(args);
  EXPECT_EQ(got.at(GRPC_ARG_HTTP2_MAX_FRAME_SIZE), 16777215);
  EXPECT_EQ(got.count(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES), 0u);
  EXPECT_EQ(got.count(GRPC_ARG_HTTP2_BDP_PROBE), 0u);
  EXPECT_EQ(got.count(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE), 0u);
  EXPECT_EQ(got.count(GRPC_ARG_TCP_READ_CHUNK_SIZE), 0u);
}

TEST(TransportOptionsTest, ZeroEverywhereLeavesGrpcDefaults) {
  TransportOptions t;
  t.http2_max_frame_bytes = 0;
  t.http2_stream_window_bytes = 0;
  t.http2_bdp_probe = true;
  t.http2_write_buffer_bytes = 0;
  t.tcp_read_chunk_bytes = 0;
  t.tcp_min_read_chunk_bytes = 0;
  t.tcp_max_read_chunk_bytes = 0;
  ASSERT_TRUE(t.Validate().ok());
  grpc::ChannelArguments args;
  const size_t before = IntArgs(args).size();
  ApplyTransportOptions(t, &args);
  EXPECT_EQ(IntArgs(args).size(), before);
}

TEST(TransportOptionsTest, SettingsBecomeChannelArguments) {
  TransportOptions t;
  t.http2_max_frame_bytes = 1 << 20;
  t.http2_stream_window_bytes = 8 << 20;
  t.http2_bdp_probe = false;
  t.http2_write_buffer_bytes = 1 << 20;
  t.tcp_read_chunk_bytes = 1 << 20;
  t.tcp_min_read_chunk_bytes = 64 << 10;
  t.tcp_max_read_chunk_bytes = 8 << 20;
  ASSERT_TRUE(t.Validate().ok());
  grpc::ChannelArguments args;
  ApplyTransportOptions(t, &args);
  const std::map<std::string, int> got = IntArgs(args);
  EXPECT_EQ(got.at(GRPC_ARG_HTTP2_MAX_FRAME_SIZE), 1 << 20);
  EXPECT_EQ(got.at(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES), 8 << 20);
  EXPECT_EQ(got.at(GRPC_ARG_HTTP2_BDP_PROBE), 0);
  EXPECT_EQ(got.at(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE), 1 << 20);
  EXPECT_EQ(got.at(GRPC_ARG_TCP_READ_CHUNK_SIZE), 1 << 20);
  EXPECT_EQ(got.at(GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE), 64 << 10);
  EXPECT_EQ(got.at(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE), 8 << 20);
}

TEST(TransportOptionsTest, OutOfRangeValuesAreRefusedByName) {
  TransportOptions t;
  t.http2_max_frame_bytes = 1000;  // below HTTP/2's 16384
  absl::Status s = t.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("http2_max_frame_bytes"), std::string::npos) << s;

  t = TransportOptions();
  t.http2_max_frame_bytes = 16777216;  // above 2^24 - 1
  EXPECT_FALSE(t.Validate().ok());

  t = TransportOptions();
  t.http2_stream_window_bytes = 1024;
  s = t.Validate();
  EXPECT_NE(s.message().find("http2_stream_window_bytes"), std::string::npos) << s;

  t = TransportOptions();
  t.tcp_read_chunk_bytes = -1;
  s = t.Validate();
  EXPECT_NE(s.message().find("tcp_read_chunk_bytes"), std::string::npos) << s;

  t = TransportOptions();
  t.tcp_min_read_chunk_bytes = 1 << 20;
  t.tcp_max_read_chunk_bytes = 1 << 16;
  s = t.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("larger than"), std::string::npos) << s;
}

}  // namespace
}  // namespace ps
