// CPU lists ("0-3,8,10-11", as taskset, cgroups and /proc write them) and pinning a daemon to
// them: the daemons' --cpus flag (docs/operations.md, "Threads and cores").
#ifndef PS_COMMON_CPU_SET_H_
#define PS_COMMON_CPU_SET_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {

// The CPUs of a list: comma-separated numbers and ranges a-b (a <= b), each CPU once at most;
// sorted. INVALID_ARGUMENT naming the bad part (empty, not a number, reversed, repeated, or
// beyond the largest CPU number a process can be given).
absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view list);

// The shortest list naming `cpus` (sorted, distinct): {0,1,2,3,8} -> "0-3,8".
std::string FormatCpuList(const std::vector<int>& cpus);

// The CPUs this process may run on now.
absl::StatusOr<std::vector<int>> AllowedCpus();

// Restricts this process to `list` (ParseCpuList). Call before it starts threads: the calling
// thread is pinned and the threads started afterwards inherit it (gRPC then also sizes its
// thread pools from these CPUs). INVALID_ARGUMENT naming the CPUs this process may not use.
// Returns the CPUs now used.
absl::StatusOr<std::vector<int>> PinToCpus(absl::string_view list);

}  // namespace ps

#endif  // PS_COMMON_CPU_SET_H_
