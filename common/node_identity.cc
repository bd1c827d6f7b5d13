#include "common/node_identity.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdint>
#include <random>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/printable.h"

namespace ps {
namespace {

bool IsHostChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

bool IsV6Char(char c) {
  return (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || (c >= '0' && c <= '9') || c == ':' ||
         c == '.';
}

}  // namespace

std::string NewSecret() {
  std::random_device random;  // the kernel's getrandom() on Linux
  std::string bytes(32, '\0');
  for (size_t i = 0; i < bytes.size(); i += 4) {
    const uint32_t word = random();
    for (size_t b = 0; b < 4; ++b) bytes[i + b] = static_cast<char>(word >> (8 * b));
  }
  return absl::BytesToHexString(bytes);
}

std::string HmacSha256Hex(absl::string_view key, absl::string_view message) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &length);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), static_cast<size_t>(length)));
}

std::string CheckpointReceipt(absl::string_view node_secret, absl::string_view job_id,
                              uint64_t checkpoint_id, uint64_t rows, uint64_t bytes) {
  if (node_secret.empty()) return "";
  return HmacSha256Hex(node_secret, absl::StrCat("checkpoint\n", job_id, "\n", checkpoint_id, "\n",
                                                 rows, "\n", bytes));
}

namespace {

// Appends `text` with its length first, so that no two field lists give the same message.
void AppendField(std::string* message, absl::string_view text) {
  absl::StrAppend(message, "\n", text.size(), ":", text);
}

}  // namespace

std::string RestoreOrderSignature(absl::string_view cluster_token, absl::string_view job_id,
                                  const v1::RestoreOrder& order) {
  if (cluster_token.empty()) return "";
  std::string message = "restore-order";
  AppendField(&message, job_id);
  absl::StrAppend(&message, "\n", order.shard_epoch());
  AppendField(&message, order.source_job_id());
  absl::StrAppend(&message, "\n", order.checkpoint_id(), "\n", order.clock(), "\n",
                  order.rollback() ? 1 : 0);
  AppendField(&message, order.slots());
  absl::StrAppend(&message, "\n", order.shards_size());
  for (const v1::CheckpointShard& shard : order.shards()) {
    absl::StrAppend(&message, "\n", shard.server_index(), "\n", shard.node_id());
    AppendField(&message, shard.path());
    AppendField(&message, shard.slots());
  }
  return HmacSha256Hex(cluster_token, message);
}

absl::Status ValidateHostPort(absl::string_view field, absl::string_view address) {
  auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = \"", Printable(address, 64), "\" is not host:port (", why, ")"));
  };
  absl::string_view host, port;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos || close + 1 >= address.size() ||
        address[close + 1] != ':') {
      return refuse("an IPv6 address is written [addr]:port");
    }
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
    if (host.empty()) return refuse("no host");
    for (char c : host) {
      if (!IsV6Char(c)) return refuse("the IPv6 address holds a character outside hex, ':', '.'");
    }
  } else {
    const size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos) return refuse("no port");
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (host.empty()) return refuse("no host");
    for (char c : host) {
      if (!IsHostChar(c)) {
        return refuse("a host name holds letters, digits, '-', '_' and '.' only");
      }
    }
    if (host.front() == '.' || host.front() == '-') return refuse("a host starts with . or -");
  }
  int number = 0;
  if (port.empty() || port.size() > 5 || !absl::SimpleAtoi(port, &number) || number < 1 ||
      number > 65535 || port.front() == '+' || port.front() == '-') {
    return refuse("the port must be in 1..65535");
  }
  return absl::OkStatus();
}

}  // namespace ps
