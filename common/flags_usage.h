// --help for the daemons and tools: lists the flags of the binary's main.cc.
#ifndef PS_COMMON_FLAGS_USAGE_H_
#define PS_COMMON_FLAGS_USAGE_H_

#include <string>

#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace ps {

// Sets the usage text and makes --help show the flags defined in `main_file` (pass __FILE__
// from main()). Abseil's default only matches files named after the binary. Call before
// absl::ParseCommandLine.
inline void SetUsage(absl::string_view usage, const char* main_file) {
  absl::SetProgramUsageMessage(usage);
  static std::string* main = new std::string(main_file);
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, *main) || absl::EndsWith(*main, file);
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
}

}  // namespace ps

#endif  // PS_COMMON_FLAGS_USAGE_H_
