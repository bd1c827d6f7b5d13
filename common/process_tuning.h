// Process-wide settings for the daemons and tools; called from main() only.
#ifndef PS_COMMON_PROCESS_TUNING_H_
#define PS_COMMON_PROCESS_TUNING_H_

#include <malloc.h>

#include "absl/synchronization/mutex.h"

namespace ps {

// - Keeps freed memory in the process: glibc otherwise returns every large freed block to the
//   kernel, and each request's buffers fault in fresh pages again (docs/benchmarks.md has the
//   cost, measured with ps_bench).
// - Turns off Abseil's mutex deadlock detection, which Debian's Abseil build leaves on (it makes
//   every lock several times dearer). Tests keep it on: they do not call this.
inline void TuneProcessForServing() {
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace ps

#endif  // PS_COMMON_PROCESS_TUNING_H_
