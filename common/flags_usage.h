// --help for the daemons and tools: lists the flags of the binary's main.cc and those shared
// (common/daemon_flags.cc, common/tls_flags.cc, and common/transport_flags.cc where a binary
// links them); --version prints the version.
#ifndef PS_COMMON_FLAGS_USAGE_H_
#define PS_COMMON_FLAGS_USAGE_H_

#include <errno.h>  // program_invocation_short_name (glibc)

#include <string>

#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/version.h"

namespace ps {

// Sets the usage text and makes --help show the flags defined in `main_file` (pass __FILE__
// from main()). Abseil's default only matches files named after the binary. Call before
// absl::ParseCommandLine.
inline void SetUsage(absl::string_view usage, const char* main_file) {
  absl::SetProgramUsageMessage(usage);
  static std::string* main = new std::string(main_file);
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, *main) || absl::EndsWith(*main, file) ||
           absl::EndsWith(file, "common/daemon_flags.cc") ||
           absl::EndsWith(file, "common/tls_flags.cc") ||
           absl::EndsWith(file, "common/transport_flags.cc");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  config.version_string = [] {
    return absl::StrCat(program_invocation_short_name, " ", VersionString(), "\n");
  };
  absl::SetFlagsUsageConfig(config);
}

}  // namespace ps

#endif  // PS_COMMON_FLAGS_USAGE_H_
