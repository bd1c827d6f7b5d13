// --port_file: a daemon that bound port 0 tells scripts and tests which port it got.
#ifndef PS_COMMON_PORT_FILE_H_
#define PS_COMMON_PORT_FILE_H_

#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps {

// Writes "<port>\n" to `path` atomically (a temporary file renamed over it), so a reader never
// sees a partial number.
inline absl::Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  const bool ok = f != nullptr && std::fprintf(f, "%d\n", port) > 0;
  if (f != nullptr && std::fclose(f) != 0) return absl::InternalError("close " + tmp);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot write port file ", path));
  }
  return absl::OkStatus();
}

}  // namespace ps

#endif  // PS_COMMON_PORT_FILE_H_
