// Test support shared by the daemons' tests: read a metric from a registry, ask a gRPC health
// service. Tests only.
#ifndef PS_COMMON_TESTING_DAEMON_PROBES_H_
#define PS_COMMON_TESTING_DAEMON_PROBES_H_

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>
#include <prometheus/registry.h>

#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace ps {
namespace testing {

// The value of a counter or gauge in `registry`, or a histogram's count (its sum with
// `histogram_sum`); -1 if no series has exactly these labels.
inline double MetricValue(prometheus::Registry& registry, const std::string& name,
                          const std::map<std::string, std::string>& labels = {},
                          bool histogram_sum = false) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& m : family.metric) {
      std::map<std::string, std::string> have;
      for (const auto& l : m.label) have[l.name] = l.value;
      if (have != labels) continue;
      switch (family.type) {
        case prometheus::MetricType::Counter:
          return m.counter.value;
        case prometheus::MetricType::Gauge:
          return m.gauge.value;
        case prometheus::MetricType::Histogram:
          return histogram_sum ? m.histogram.sample_sum
                               : static_cast<double>(m.histogram.sample_count);
        default:
          return -1;
      }
    }
  }
  return -1;
}

// grpc.health.v1.Health/Check of `service` ("" = the whole server) at `address`, without the
// health proto's generated code: the request is hand-encoded (HealthCheckRequest{service = 1}).
// Returns 1 SERVING, 2 NOT_SERVING, 0 UNKNOWN, -1 on error.
inline int HealthStatus(const std::string& address, const std::string& service = "") {
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  std::string encoded;
  if (!service.empty()) {
    encoded.push_back(0x0a);                               // field 1, length-delimited
    encoded.push_back(static_cast<char>(service.size()));  // names shorter than 128 bytes
    encoded += service;
  }
  grpc::Slice slice(encoded);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (!status.ok()) return -1;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return -1;
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  // HealthCheckResponse{status = 1 (enum varint)}: 0x08 <status>; empty means UNKNOWN (0).
  if (bytes.empty()) return 0;
  if (bytes.size() != 2 || bytes[0] != 0x08) return -1;
  return bytes[1];
}

}  // namespace testing
}  // namespace ps

#endif  // PS_COMMON_TESTING_DAEMON_PROBES_H_
