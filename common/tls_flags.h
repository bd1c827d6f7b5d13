// --tls_cert, --tls_key and --tls_ca: shared by every daemon and psctl (common/tls_flags.cc).
#ifndef PS_COMMON_TLS_FLAGS_H_
#define PS_COMMON_TLS_FLAGS_H_

#include "common/security.h"

namespace ps {

// The three flags, as SecurityOptions (token empty).
SecurityOptions TlsOptionsFromFlags();

}  // namespace ps

#endif  // PS_COMMON_TLS_FLAGS_H_
