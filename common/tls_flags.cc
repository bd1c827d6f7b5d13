#include "common/tls_flags.h"

#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain: serve TLS on the gRPC port and present it when dialing (mutual "
          "TLS); needs --tls_key. Read at start: restart to rotate");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate(s): dial with TLS and verify peers against it; with --tls_cert, "
          "also require callers to present a certificate it signed (mutual TLS)");

namespace ps {

SecurityOptions TlsOptionsFromFlags() {
  SecurityOptions options;
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  options.tls_ca_file = absl::GetFlag(FLAGS_tls_ca);
  return options;
}

}  // namespace ps
