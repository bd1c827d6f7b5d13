// PS_EXPORT marks the client library's public API (<ps/client.h>, <ps/session.h>): the shared
// library (libparamserver_client.so) is built with hidden visibility, so that only what is
// marked is exported and gRPC, protobuf and the library's own classes stay inside it.
#ifndef PS_EXPORT_H_
#define PS_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define PS_EXPORT __attribute__((visibility("default")))
#else
#define PS_EXPORT
#endif

#endif  // PS_EXPORT_H_
