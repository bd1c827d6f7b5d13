// Orderly shutdown on SIGINT/SIGTERM without async-signal-unsafe handlers.
#ifndef PS_COMMON_SIGNALS_H_
#define PS_COMMON_SIGNALS_H_

#include <csignal>

namespace ps {

// Blocks SIGINT and SIGTERM in the calling thread and every thread it starts later.
// Call first thing in main(), before any thread exists.
inline void BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// Waits for SIGINT or SIGTERM (blocked by BlockTerminationSignals) and returns it.
inline int WaitForTerminationSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

}  // namespace ps

#endif  // PS_COMMON_SIGNALS_H_
