// Where a job's table ids start: table ids are unique per server, and jobs share servers.
#ifndef PS_COMMON_JOB_TABLES_H_
#define PS_COMMON_JOB_TABLES_H_

#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"

namespace ps {

// The first table id of a job's tables (a zoo model's, or the tables a program job declares,
// which the scheduler numbers from it). "job-N" gets N * 1000 + 1; other ids a hash in the same
// range. A job has at most 1000 tables.
inline uint32_t FirstTableIdOf(const std::string& job_id) {
  constexpr uint32_t kJobs = 4000000;  // x 1000 ids each, below 2^32
  uint32_t n = 0;
  if (absl::StartsWith(job_id, "job-") && absl::SimpleAtoi(job_id.substr(4), &n)) {
    return (n % kJobs) * 1000 + 1;
  }
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (char c : job_id) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ULL;
  return static_cast<uint32_t>(h % kJobs) * 1000 + 1;
}

}  // namespace ps

#endif  // PS_COMMON_JOB_TABLES_H_
