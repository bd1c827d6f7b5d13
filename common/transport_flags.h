// The data plane's transport flags (--http2_*, --tcp_*_read_chunk_bytes): ps_server's, and
// ps_bench's for both of its ends (common/transport_flags.cc). Only binaries that call
// TransportOptionsFromFlags() link the definitions.
#ifndef PS_COMMON_TRANSPORT_FLAGS_H_
#define PS_COMMON_TRANSPORT_FLAGS_H_

#include <string>
#include <vector>

#include "common/transport_options.h"

namespace ps {

// The seven flags, as TransportOptions (not checked: TransportOptions::Check is the caller's).
TransportOptions TransportOptionsFromFlags();

// The same settings as ps_server's flags (`--name=value`), for a process that spawns servers.
std::vector<std::string> TransportServerFlags(const TransportOptions& t);

}  // namespace ps

#endif  // PS_COMMON_TRANSPORT_FLAGS_H_
