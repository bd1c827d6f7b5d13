// ThreadSanitizer builds only (-DPS_SANITIZE=thread; linked into every executable of such a build).
//
// Debian's Abseil (libabsl_synchronization.so) is not built with -fsanitize=thread: its Mutex,
// CondVar and Notification synchronize with atomics and futexes that TSan cannot see, so every
// access that a mutex orders would be reported as a data race. An instrumented Abseil announces
// each lock and unlock to TSan (ABSL_TSAN_MUTEX_* in mutex.cc); this file does the same from
// outside: it defines the out-of-line members of those classes in the executable, which the
// dynamic linker then binds ahead of the library's (for our code, gRPC and Abseil itself: they
// call them through the PLT), announces the operation and calls the library's definition
// (dlsym(RTLD_NEXT)). Memory accesses inside a lock operation (an absl::Condition being evaluated,
// possibly on the unlocking thread) are ignored, as in an instrumented Abseil.
//
// Also absl::Status's reference count (see Status::UnrefNonInlined at the end).
//
// It is written against Abseil 20220623 (Debian 12: inline namespace debian3): each library
// definition is looked up by its mangled name at its first use, and a missing one aborts the
// process with the name.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace {

// The library's definition of the member whose mangled name is `name`.
void* Real(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    std::fprintf(stderr, "absl_tsan_shim: %s not found in the Abseil libraries\n", name);
    std::abort();
  }
  return f;
}

// The function pointer of `name` with type T (a type's name), looked up once.
#define PS_REAL(T, name)                          \
  ([]() -> T {                                    \
    static T f = reinterpret_cast<T>(Real(name)); \
    return f;                                     \
  }())

constexpr intptr_t kMuWriter = 0x0008;  // mutex.cc: the mutex is held by a writer

// The TSan flags of how `mu` is held now (by the caller): a reader or the writer.
unsigned HeldFlags(const absl::Mutex* mu) {
  auto word = reinterpret_cast<const std::atomic<intptr_t>*>(mu)->load(std::memory_order_relaxed);
  return (word & kMuWriter) != 0 ? 0 : __tsan_mutex_read_lock;
}

// Only the outermost of nested operations is announced: some members call others through the
// PLT (LockWhenWithTimeout tail-calls LockWhenWithDeadline, Notify locks its mutex_, ...), and
// the nested call must not lock or unlock a second time in TSan's eyes.
thread_local int depth = 0;
struct Nesting {
  Nesting() : outer(depth++ == 0) {}
  ~Nesting() { --depth; }
  const bool outer;
};

// Around an operation that releases the held `mu` and takes it again (Await, CondVar::Wait):
// released before it, accesses ignored during it (conditions it evaluates included), taken after.
template <typename F>
auto Rewait(absl::Mutex* mu, F f) {
  Nesting nesting;
  if (!nesting.outer) return f();
  unsigned flags = HeldFlags(mu);
  __tsan_mutex_pre_unlock(mu, flags);
  auto result = f();
  __tsan_mutex_post_unlock(mu, flags);
  __tsan_mutex_pre_lock(mu, flags);
  __tsan_mutex_post_lock(mu, flags, 0);
  return result;
}

// Around a lock (kind = 0 or __tsan_mutex_read_lock; try: a TryLock) that returns when it holds
// `mu` (or, for a try, whether it does).
template <typename F>
auto Locking(absl::Mutex* mu, unsigned kind, bool try_lock, F f) {
  Nesting nesting;
  if (!nesting.outer) return f();
  const unsigned flags = kind | (try_lock ? __tsan_mutex_try_lock : 0);
  __tsan_mutex_pre_lock(mu, flags);
  auto result = f();
  const bool failed = try_lock && !result;
  __tsan_mutex_post_lock(mu, flags | (failed ? __tsan_mutex_try_lock_failed : 0), 0);
  return result;
}

template <typename F>
void Unlocking(absl::Mutex* mu, unsigned kind, F f) {
  Nesting nesting;
  if (!nesting.outer) return f();
  __tsan_mutex_pre_unlock(mu, kind);
  f();
  __tsan_mutex_post_unlock(mu, kind);
}

// absl::Notification { Mutex mutex_; std::atomic<bool> notified_yet_; }: HasBeenNotified() is
// inline (an instrumented acquire load of notified_yet_), so Notify() also releases that address.
static_assert(sizeof(absl::Notification) == sizeof(absl::Mutex) + sizeof(intptr_t),
              "absl::Notification's layout changed");
void* NotifiedFlag(const absl::Notification* n) {
  return const_cast<char*>(reinterpret_cast<const char*>(n) + sizeof(absl::Mutex));
}

}  // namespace

#define M(name) "_ZN4absl7debian35Mutex" name
#define CV(name) "_ZN4absl7debian37CondVar" name
#define N(name) "_ZNK4absl7debian312Notification" name

namespace absl {
ABSL_NAMESPACE_BEGIN

using LockFn = void (*)(Mutex*);
using TryFn = bool (*)(Mutex*);
using WhenFn = void (*)(Mutex*, const Condition&);
using WhenTimeoutFn = bool (*)(Mutex*, const Condition&, Duration);
using WhenDeadlineFn = bool (*)(Mutex*, const Condition&, Time);
using CvWaitFn = void (*)(CondVar*, Mutex*);
using CvTimeoutFn = bool (*)(CondVar*, Mutex*, Duration);
using CvDeadlineFn = bool (*)(CondVar*, Mutex*, Time);
using NotifyFn = void (*)(Notification*);
using NWaitFn = void (*)(const Notification*);
using NTimeoutFn = bool (*)(const Notification*, Duration);
using NDeadlineFn = bool (*)(const Notification*, Time);
using CountFn = bool (*)(BlockingCounter*);
using CountWaitFn = void (*)(BlockingCounter*);
using UnrefFn = void (*)(uintptr_t);

Mutex::~Mutex() {
  __tsan_mutex_destroy(this, __tsan_mutex_not_static);
  PS_REAL(LockFn, M("D2Ev"))(this);
}

void Mutex::Lock() {
  Locking(this, 0, false, [&] { return PS_REAL(LockFn, M("4LockEv"))(this), true; });
}

void Mutex::ReaderLock() {
  Locking(this, __tsan_mutex_read_lock, false,
          [&] { return PS_REAL(LockFn, M("10ReaderLockEv"))(this), true; });
}

bool Mutex::TryLock() {
  return Locking(this, 0, true, [&] { return PS_REAL(TryFn, M("7TryLockEv"))(this); });
}

bool Mutex::ReaderTryLock() {
  return Locking(this, __tsan_mutex_read_lock, true,
                 [&] { return PS_REAL(TryFn, M("13ReaderTryLockEv"))(this); });
}

void Mutex::Unlock() {
  Unlocking(this, 0, [&] { PS_REAL(LockFn, M("6UnlockEv"))(this); });
}

void Mutex::ReaderUnlock() {
  Unlocking(this, __tsan_mutex_read_lock, [&] { PS_REAL(LockFn, M("12ReaderUnlockEv"))(this); });
}

void Mutex::LockWhen(const Condition& cond) {
  Locking(this, 0, false,
          [&] { return PS_REAL(WhenFn, M("8LockWhenERKNS0_9ConditionE"))(this, cond), true; });
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  Locking(this, __tsan_mutex_read_lock, false, [&] {
    return PS_REAL(WhenFn, M("14ReaderLockWhenERKNS0_9ConditionE"))(this, cond), true;
  });
}

// The *WithTimeout / *WithDeadline locks hold the mutex when they return, whatever they return.
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  bool r = false;
  Locking(this, 0, false, [&] {
    r = PS_REAL(WhenTimeoutFn, M("19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE"))(
        this, cond, timeout);
    return true;
  });
  return r;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  bool r = false;
  Locking(this, 0, false, [&] {
    r = PS_REAL(WhenDeadlineFn, M("20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE"))(this, cond,
                                                                                         deadline);
    return true;
  });
  return r;
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  bool r = false;
  Locking(this, __tsan_mutex_read_lock, false, [&] {
    r = PS_REAL(WhenTimeoutFn, M("25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE"))(
        this, cond, timeout);
    return true;
  });
  return r;
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  bool r = false;
  Locking(this, __tsan_mutex_read_lock, false, [&] {
    r = PS_REAL(WhenDeadlineFn, M("26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE"))(
        this, cond, deadline);
    return true;
  });
  return r;
}

void Mutex::Await(const Condition& cond) {
  Rewait(this, [&] {
    PS_REAL(WhenFn, M("5AwaitERKNS0_9ConditionE"))(this, cond);
    return 0;
  });
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  return Rewait(this, [&] {
    return PS_REAL(WhenTimeoutFn, M("16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE"))(
        this, cond, timeout);
  });
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  return Rewait(this, [&] {
    return PS_REAL(WhenDeadlineFn, M("17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE"))(this, cond,
                                                                                         deadline);
  });
}

void CondVar::Wait(Mutex* mu) {
  Rewait(mu, [&] {
    PS_REAL(CvWaitFn, CV("4WaitEPNS0_5MutexE"))(this, mu);
    return 0;
  });
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  return Rewait(mu, [&] {
    return PS_REAL(CvTimeoutFn, CV("15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE"))(this, mu,
                                                                                    timeout);
  });
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  return Rewait(mu, [&] {
    return PS_REAL(CvDeadlineFn, CV("16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE"))(this, mu,
                                                                                  deadline);
  });
}

// Notify() releases notified_yet_'s address and each wait that returns notified acquires it (the
// library's own locking of mutex_ inside them is nested, so not announced).
void Notification::Notify() {
  Nesting nesting;
  __tsan_release(NotifiedFlag(this));
  PS_REAL(NotifyFn, "_ZN4absl7debian312Notification6NotifyEv")(this);
}

void Notification::WaitForNotification() const {
  Nesting nesting;
  PS_REAL(NWaitFn, N("19WaitForNotificationEv"))(this);
  __tsan_acquire(NotifiedFlag(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  Nesting nesting;
  bool r = PS_REAL(NTimeoutFn, N("30WaitForNotificationWithTimeoutENS0_8DurationE"))(this, timeout);
  if (r) __tsan_acquire(NotifiedFlag(this));
  return r;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  Nesting nesting;
  bool r = PS_REAL(NDeadlineFn, N("31WaitForNotificationWithDeadlineENS0_4TimeE"))(this, deadline);
  if (r) __tsan_acquire(NotifiedFlag(this));
  return r;
}

// DecrementCount() counts down with an atomic of its own: each decrement releases, Wait()
// acquires (as an instrumented BlockingCounter would through its annotations).
bool BlockingCounter::DecrementCount() {
  Nesting nesting;
  __tsan_release(this);
  return PS_REAL(CountFn, "_ZN4absl7debian315BlockingCounter14DecrementCountEv")(this);
}

void BlockingCounter::Wait() {
  Nesting nesting;
  PS_REAL(CountWaitFn, "_ZN4absl7debian315BlockingCounter4WaitEv")(this);
  __tsan_acquire(this);
}

// absl::Status (libabsl_status): the last owner of a non-OK status's StatusRep deletes it after a
// reference-count decrement in uninstrumented code, with a tail call to operator delete that TSan
// attributes to our code (so called_from_lib cannot hide it). Each decrement releases and
// acquires the count's address, as the atomic decrement does in an instrumented Abseil.
void Status::UnrefNonInlined(uintptr_t rep) {
  void* count = reinterpret_cast<void*>(rep - 1);  // StatusRep*; its first member is the count
  __tsan_release(count);
  __tsan_acquire(count);
  PS_REAL(UnrefFn, "_ZN4absl7debian36Status15UnrefNonInlinedEm")(rep);
}

ABSL_NAMESPACE_END
}  // namespace absl
