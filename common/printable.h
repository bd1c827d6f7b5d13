// Strings that came from a peer (a request, a report, a state file), made safe to store, log,
// export and print: bounded, and without control characters that a terminal would obey.
#ifndef PS_COMMON_PRINTABLE_H_
#define PS_COMMON_PRINTABLE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace ps {

// Limits of the strings the control plane accepts from clients (bytes).
inline constexpr size_t kMaxNameBytes = 128;     // job names, job ids, hostnames
inline constexpr size_t kMaxAddressBytes = 256;  // host:port
inline constexpr size_t kMaxPathBytes = 256;     // data_dir, checkpoint.root
inline constexpr size_t kMaxReportBytes = 1024;  // errors reported by workers (stored clipped)

// True if every byte of `text` is printable ASCII (0x20..0x7e).
inline bool IsPrintableAscii(absl::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) return false;
  }
  return true;
}

// True if `text` holds no control character: no C0 byte (< 0x20), no DEL, no C1 control
// (U+0080..U+009F, bytes 0xc2 0x80..0x9f in UTF-8). Other non-ASCII bytes are allowed.
inline bool HasNoControlCharacters(absl::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) return false;
    if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      return false;
    }
  }
  return true;
}

// `text` with every byte outside printable ASCII written as \xNN, clipped to about `max_bytes`
// of output ("...(N bytes)" then says how long it was). For printing, logging and error messages.
inline std::string Printable(absl::string_view text, size_t max_bytes = SIZE_MAX) {
  std::string out;
  out.reserve(text.size() < max_bytes ? text.size() : max_bytes);
  for (char c : text) {
    if (out.size() >= max_bytes) {
      absl::StrAppend(&out, "...(", text.size(), " bytes)");
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u > 0x7e) {
      absl::StrAppendFormat(&out, "\\x%02x", u);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// INVALID_ARGUMENT naming `field` unless `value` has at most `max_bytes` bytes and only
// printable ASCII (`ascii_only`) or no control characters (otherwise). The message shows the
// value escaped and clipped.
inline absl::Status CheckClientText(absl::string_view field, absl::string_view value,
                                    size_t max_bytes, bool ascii_only) {
  if (value.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is ", value.size(),
                                                   " bytes long; at most ", max_bytes,
                                                   " allowed (\"", Printable(value, 64), "\")"));
  }
  if (ascii_only ? !IsPrintableAscii(value) : !HasNoControlCharacters(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = \"", Printable(value, 64), "\" holds ",
                     ascii_only ? "a character outside printable ASCII" : "a control character"));
  }
  return absl::OkStatus();
}

// Job ids and table names: letters, digits and _ - . / (what the servers accept, and the client
// library checks before sending).
inline bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.' || c == '/';
}

// INVALID_ARGUMENT naming `what` unless `name` has min_bytes..kMaxNameBytes name characters.
// The message quotes the name escaped and clipped.
inline absl::Status CheckName(absl::string_view what, absl::string_view name, size_t min_bytes) {
  bool ok = name.size() >= min_bytes && name.size() <= kMaxNameBytes;
  for (size_t i = 0; ok && i < name.size(); ++i) ok = IsNameChar(name[i]);
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " \"", Printable(name, 64), "\" (", name.size(), " bytes) must have ",
                   min_bytes, "..", kMaxNameBytes, " bytes of letters, digits and _ - . /"));
}

inline absl::Status CheckJobId(absl::string_view job_id) { return CheckName("job_id", job_id, 1); }

// Servers accept an empty table name (shown as "table_<id>"); the client library does not.
inline absl::Status CheckTableName(absl::string_view name) {
  return CheckName("table name", name, 0);
}

}  // namespace ps

#endif  // PS_COMMON_PRINTABLE_H_
