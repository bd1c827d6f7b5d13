// The strings clients send that a server stores, exports as metric labels, or logs: job ids and
// table names. Bounded and of a plain character set, so that no label, log line or error
// message carries an unbounded string or a control character.
#ifndef PS_SERVER_NAMES_H_
#define PS_SERVER_NAMES_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace ps {

// Job ids: 1..128 bytes; table names: 0..128 bytes (empty: "table_<id>"). Both of letters,
// digits and _ - . / (the client library's rule for the names it sends).
inline constexpr size_t kMaxNameBytes = 128;
// Free text of a restore order (its reason): at most this many bytes, printable ASCII.
inline constexpr size_t kMaxReasonBytes = 1024;

inline bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.' || c == '/';
}

// INVALID_ARGUMENT naming `what` unless `name` has min_bytes..kMaxNameBytes name characters.
// The message quotes at most the first 64 bytes, escaped.
inline absl::Status CheckName(const char* what, const std::string& name, size_t min_bytes) {
  bool ok = name.size() >= min_bytes && name.size() <= kMaxNameBytes;
  for (size_t i = 0; ok && i < name.size(); ++i) ok = IsNameChar(name[i]);
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " '", absl::CEscape(name.substr(0, 64)),
                   name.size() > 64 ? "...' (" : "' (", name.size(), " bytes) must have ",
                   min_bytes, "..", kMaxNameBytes, " bytes of letters, digits and _ - . /"));
}

inline absl::Status CheckJobId(const std::string& job_id) { return CheckName("job_id", job_id, 1); }

inline absl::Status CheckTableName(const std::string& name) {
  return CheckName("table name", name, 0);
}

// INVALID_ARGUMENT unless `text` is at most kMaxReasonBytes of printable ASCII.
inline absl::Status CheckFreeText(const char* what, const std::string& text) {
  bool ok = text.size() <= kMaxReasonBytes;
  for (size_t i = 0; ok && i < text.size(); ++i) {
    ok = text[i] >= 0x20 && text[i] < 0x7f;
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " (", text.size(),
                                                 " bytes) must be at most ", kMaxReasonBytes,
                                                 " bytes of printable ASCII"));
}

}  // namespace ps

#endif  // PS_SERVER_NAMES_H_
