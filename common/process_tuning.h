// Process-wide settings for the daemons and tools; called from main() only.
#ifndef PS_COMMON_PROCESS_TUNING_H_
#define PS_COMMON_PROCESS_TUNING_H_

#include <malloc.h>

#include "absl/synchronization/mutex.h"

namespace ps {

// - Keeps freed memory in the process: glibc otherwise returns every large freed block to the
//   kernel, and each request's buffers fault in fresh pages again (about 24 us per 4 KiB page on
//   the VMs measured; ps_bench showed 3-5x lower throughput at 16-64 MiB because of it).
// - Turns off Abseil's mutex deadlock detection, which Debian's Abseil build leaves on (3x the
//   cost of a lock). Tests keep it on: they do not call this.
inline void TuneProcessForServing() {
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace ps

#endif  // PS_COMMON_PROCESS_TUNING_H_
