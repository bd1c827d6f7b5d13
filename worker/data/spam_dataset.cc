#include "worker/data/spam_dataset.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace ps {
namespace {

constexpr size_t kMinTokenLength = 2;
constexpr size_t kMaxTokenLength = 30;
constexpr size_t kMinBase64LineLength = 40;
constexpr int kMaxHashBits = 63;
constexpr char kFetchHint[] = "; install the corpus with `deploy/fetch-spam-assassin.sh [DIR]`";

using TokenSink = absl::FunctionRef<void(absl::string_view)>;

bool IsWordChar(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)); }

// Emits `prefix` + each lowercased word of `text` whose length is in range. `buffer` is scratch.
void EmitWords(absl::string_view text, absl::string_view prefix, std::string& buffer,
               TokenSink emit) {
  size_t i = 0;
  while (i < text.size()) {
    if (!IsWordChar(text[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && IsWordChar(text[end])) ++end;
    const size_t length = end - i;
    if (length >= kMinTokenLength && length <= kMaxTokenLength) {
      buffer.assign(prefix.data(), prefix.size());
      for (size_t k = i; k < end; ++k) buffer.push_back(absl::ascii_tolower(text[k]));
      emit(buffer);
    }
    i = end;
  }
}

bool LooksLikeBase64(absl::string_view line) {
  if (line.size() < kMinBase64LineLength) return false;
  return std::all_of(line.begin(), line.end(),
                     [](char c) { return IsWordChar(c) || c == '+' || c == '/' || c == '='; });
}

// The token prefix of a header whose words are features, or "" for a skipped header.
absl::string_view HeaderPrefix(absl::string_view name) {
  name = absl::StripAsciiWhitespace(name);
  if (absl::EqualsIgnoreCase(name, "subject")) return "subject:";
  if (absl::EqualsIgnoreCase(name, "from")) return "from:";
  if (absl::EqualsIgnoreCase(name, "to")) return "to:";
  return "";
}

// Calls `emit` for every token of a raw email (see TokenizeMessage).
void ForEachToken(absl::string_view raw, TokenSink emit) {
  std::string buffer;
  bool in_headers = true;
  absl::string_view prefix;  // of the current header; empty: skipped
  for (absl::string_view line : absl::StrSplit(raw, '\n')) {
    if (absl::EndsWith(line, "\r")) line.remove_suffix(1);
    if (!in_headers) {
      if (!LooksLikeBase64(line)) EmitWords(line, "", buffer, emit);
      continue;
    }
    if (line.empty()) {
      in_headers = false;
    } else if (line[0] == ' ' || line[0] == '\t') {  // folded continuation of the last header
      if (!prefix.empty()) EmitWords(line, prefix, buffer, emit);
    } else {
      const size_t colon = line.find(':');
      // A line without a colon (e.g. the mbox "From " line) is no header to read.
      prefix = colon == absl::string_view::npos ? "" : HeaderPrefix(line.substr(0, colon));
      if (!prefix.empty()) EmitWords(line.substr(colon + 1), prefix, buffer, emit);
    }
  }
}

uint64_t Finalize(uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Appends the decoded `field` to `out`.
absl::Status UnescapeInto(absl::string_view field, std::string& out) {
  out.reserve(out.size() + field.size());
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] != '\\') {
      out.push_back(field[i]);
      continue;
    }
    if (++i == field.size()) return absl::InvalidArgumentError("trailing backslash");
    switch (field[i]) {
      case '\\':
        out.push_back('\\');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "unknown escape \\", absl::CEscape(field.substr(i, 1)), " at byte ", i - 1));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  errno = 0;
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int error = errno;
    if (error == ENOENT) return absl::NotFoundError(absl::StrCat(path, " not found", kFetchHint));
    return absl::ErrnoToStatus(error != 0 ? error : ENOMEM, absl::StrCat("cannot open ", path));
  }
  std::string contents;
  char chunk[1 << 16];
  size_t got;
  while ((got = std::fread(chunk, 1, sizeof(chunk), file)) > 0) contents.append(chunk, got);
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) return absl::DataLossError(absl::StrCat("error reading ", path));
  return contents;
}

// Parses one line of messages.tsv into `example` and whether it is a test example.
absl::Status ParseLine(absl::string_view line, const SpamDatasetOptions& options, std::string& text,
                       SpamExample& example, bool& is_test) {
  const std::vector<absl::string_view> fields = absl::StrSplit(line, '\t');
  if (fields.size() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected 4 tab-separated fields (label, group, id, text), found ", fields.size()));
  }
  if (fields[0] != "0" && fields[0] != "1") {
    return absl::InvalidArgumentError(
        absl::StrCat("label must be 0 or 1, found \"", absl::CHexEscape(fields[0]), "\""));
  }
  if (fields[1].empty() || fields[2].empty()) {
    return absl::InvalidArgumentError("empty group or id");
  }
  text.clear();
  PS_RETURN_IF_ERROR(UnescapeInto(fields[3], text));
  example.label = fields[0] == "1" ? 1 : 0;
  example.features = MessageFeatures(text, options.hash_bits);
  is_test = InTestSplit(fields[1], fields[2], options.test_percent);
  return absl::OkStatus();
}

}  // namespace

absl::Status SpamDatasetOptions::Validate() const {
  if (hash_bits < 1 || hash_bits > kMaxHashBits) {
    return absl::InvalidArgumentError(
        absl::StrCat("hash_bits is ", hash_bits, "; must be in 1..", kMaxHashBits));
  }
  if (test_percent < 0 || test_percent > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("test_percent is ", test_percent, "; must be in 0..100"));
  }
  return absl::OkStatus();
}

std::vector<std::string> TokenizeMessage(absl::string_view raw) {
  std::vector<std::string> tokens;
  ForEachToken(raw, [&](absl::string_view token) { tokens.emplace_back(token); });
  return tokens;
}

uint64_t StableHash64(absl::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64 offset basis
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;  // FNV-1a 64 prime
  }
  return Finalize(h);
}

uint64_t TokenFeature(absl::string_view token, int hash_bits) {
  return StableHash64(token) >> (64 - hash_bits);
}

std::vector<uint64_t> MessageFeatures(absl::string_view raw, int hash_bits) {
  std::vector<uint64_t> features;
  ForEachToken(
      raw, [&](absl::string_view token) { features.push_back(TokenFeature(token, hash_bits)); });
  std::sort(features.begin(), features.end());
  features.erase(std::unique(features.begin(), features.end()), features.end());
  features.shrink_to_fit();
  return features;
}

bool InTestSplit(absl::string_view group, absl::string_view id, int test_percent) {
  return StableHash64(absl::StrCat("split:", group, "/", id)) % 100 <
         static_cast<uint64_t>(test_percent);
}

absl::StatusOr<std::string> UnescapeSpamField(absl::string_view field) {
  std::string out;
  PS_RETURN_IF_ERROR(UnescapeInto(field, out));
  return out;
}

int64_t SpamDataset::num_spam() const {
  int64_t n = 0;
  for (const SpamExample& e : train_) n += e.label;
  for (const SpamExample& e : test_) n += e.label;
  return n;
}

absl::StatusOr<SpamDataset> SpamDataset::Load(const std::string& dir,
                                              const SpamDatasetOptions& options) {
  PS_RETURN_IF_ERROR(options.Validate());
  const std::string path = absl::StrCat(dir, "/", kSpamMessagesFile);
  PS_ASSIGN_OR_RETURN(const std::string contents, ReadFile(path));
  SpamDataset data;
  std::string text;
  int64_t line_number = 0;
  absl::string_view rest = contents;
  while (!rest.empty()) {
    ++line_number;
    const size_t newline = rest.find('\n');
    const absl::string_view line = rest.substr(0, newline);
    rest = newline == absl::string_view::npos ? "" : rest.substr(newline + 1);
    SpamExample example;
    bool is_test = false;
    const absl::Status status = ParseLine(line, options, text, example, is_test);
    if (!status.ok()) {
      return absl::DataLossError(absl::StrCat(path, ":", line_number, ": ", status.message()));
    }
    (is_test ? data.test_ : data.train_).push_back(std::move(example));
  }
  if (data.num_examples() == 0) {
    return absl::DataLossError(absl::StrCat(path, " holds no messages", kFetchHint));
  }
  return data;
}

}  // namespace ps
