// Reference figures for ps_bench: what one raw TCP stream over 127.0.0.1 moves.
#ifndef PS_TESTS_BENCH_TCP_LOOPBACK_H_
#define PS_TESTS_BENCH_TCP_LOOPBACK_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ps {
namespace bench {

// Bytes per write() of the references (iperf3 -l 1M does the same).
inline constexpr size_t kTcpWriteBytes = size_t{1} << 20;

struct LoopbackRun {
  int64_t ops = 0;                   // requests measured
  double seconds = 0;                // from the first measured request to the end of the last
  std::vector<double> latencies_us;  // one per request
};

// One TCP connection over 127.0.0.1 between two threads. A request is `size` bytes written in
// kTcpWriteBytes writes from one reused buffer, then a 1-byte acknowledgement read back: the
// floor under a ps push of `size` bytes. Runs for `duration` and at least `min_ops` requests,
// after one warm-up request.
absl::StatusOr<LoopbackRun> RunTcpLoopback(size_t size, absl::Duration duration, int64_t min_ops);

// Runs `iperf3 -s -1` and `iperf3 -c 127.0.0.1 -l 1M -t <seconds> -J` (iperf3: its path) and
// returns the receiver's bytes per second.
absl::StatusOr<double> RunIperf3(const std::string& iperf3, int seconds);

}  // namespace bench
}  // namespace ps

#endif  // PS_TESTS_BENCH_TCP_LOOPBACK_H_
