// A shared library loaded with dlopen on first use instead of linked, and its functions looked
// up by name: how the compute backends load their BLAS (internal/openblas_library.h,
// cuda/cublas_library.h say why each is not linked).
#ifndef PS_WORKER_COMPUTE_INTERNAL_SHARED_LIBRARY_H_
#define PS_WORKER_COMPUTE_INTERNAL_SHARED_LIBRARY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {
namespace internal {

// An opened library (never closed: the functions bound from it live as long as the process)
// and the functions bound from it so far. Not thread-safe; the loaders use one from a single
// initialization.
class SharedLibrary {
 public:
  // Opens `soname` from the loader's search path (LD_LIBRARY_PATH, ld.so.cache), else from
  // `fallback_dir` (none if empty), with RTLD_NOW | RTLD_LOCAL: its symbols stay out of the
  // global namespace. FAILED_PRECONDITION "cannot load <what> (<the loader's errors>):
  // <remedy>" if neither opens.
  static absl::StatusOr<SharedLibrary> Open(const std::string& soname,
                                            const std::string& fallback_dir, absl::string_view what,
                                            absl::string_view remedy);

  // Sets *fn to the library's function `name`; null (and noted as missing) if it has none.
  template <typename F>
  void Bind(const char* name, F* fn) {
    *fn = reinterpret_cast<F>(Symbol(name));
  }
  // OK if every Bind found its function; else FAILED_PRECONDITION "the loaded <library> lacks
  // <the missing functions><hint>".
  absl::Status AllBound(absl::string_view library, absl::string_view hint = "") const;

 private:
  explicit SharedLibrary(void* handle) : handle_(handle) {}
  void* Symbol(const char* name);

  void* handle_;
  std::vector<std::string> missing_;
};

}  // namespace internal
}  // namespace ps

#endif  // PS_WORKER_COMPUTE_INTERNAL_SHARED_LIBRARY_H_
