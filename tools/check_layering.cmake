cmake_minimum_required(VERSION 3.22)
# Fails (as a build step) when shipped code includes a header against the project's layering.
# Run as: cmake -DSOURCE_DIR=<repo root> -P tools/check_layering.cmake
# Each folder below may include (with #include "...") only the repository paths listed for it;
# tests (*_test.cc) and test helpers (testing/ folders) may include anything.
# The public client header (client/include/ps/) may include no gRPC, protobuf or
# repository header at all: programs built against the installed library see only absl.
set(rules
  "client/include/=NONE"
  "client/=client/,common/,ps/v1/,ps/client.h,ps/session.h"
  "worker/compute/=worker/compute/,common/"
  "worker/data/=worker/data/,common/"
  "worker/models/=worker/models/,client/,worker/compute/,worker/data/,common/,ps/v1/"
  "worker/daemon/=worker/,client/,common/,ps/v1/"
  "client/python/=ps/client.h,ps/session.h"
  "common/=common/,ps/v1/"
  "server/=server/,common/,ps/v1/"
  "scheduler/=scheduler/,common/,ps/v1/"
  "tools/=tools/,common/,ps/v1/")
set(roots client common server scheduler tools worker ps)

file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR}
  ${SOURCE_DIR}/common/*.h ${SOURCE_DIR}/common/*.cc
  ${SOURCE_DIR}/server/*.h ${SOURCE_DIR}/server/*.cc
  ${SOURCE_DIR}/scheduler/*.h ${SOURCE_DIR}/scheduler/*.cc
  ${SOURCE_DIR}/tools/*.h ${SOURCE_DIR}/tools/*.cc
  ${SOURCE_DIR}/client/*.h ${SOURCE_DIR}/client/*.cc
  ${SOURCE_DIR}/worker/*.h ${SOURCE_DIR}/worker/*.cc ${SOURCE_DIR}/worker/*.cu)
set(violations "")
foreach(f ${files})
  if(f MATCHES "_test\\.cc$" OR f MATCHES "/testing/")
    continue()
  endif()
  # The most specific rule whose folder holds the file.
  set(allowed "")
  set(best 0)
  foreach(rule ${rules})
    string(FIND "${rule}" "=" eq)
    string(SUBSTRING "${rule}" 0 ${eq} folder)
    math(EXPR from "${eq} + 1")
    string(SUBSTRING "${rule}" ${from} -1 list)
    string(LENGTH "${folder}" len)
    string(FIND "${f}" "${folder}" at)
    if(at EQUAL 0 AND len GREATER best)
      set(best ${len})
      string(REPLACE "," "|" allowed "${list}")
    endif()
  endforeach()
  if(best EQUAL 0)
    continue()
  endif()
  file(STRINGS ${SOURCE_DIR}/${f} includes REGEX "^#include [\"<]")
  foreach(line ${includes})
    string(REGEX REPLACE "^#include [\"<]([^\">]*)[\">].*" "\\1" inc "${line}")
    if(allowed STREQUAL "NONE")
      if(inc MATCHES "^(grpc|grpcpp|google/protobuf|ps/v1|client|common|worker|server|scheduler)/")
        list(APPEND violations "${f}: public header includes ${inc}")
      endif()
      continue()
    endif()
    string(REGEX MATCH "^[a-z_]+" root "${inc}")
    if(NOT line MATCHES "^#include \"" OR NOT root IN_LIST roots)
      continue()  # the standard library, absl, gRPC, ...
    endif()
    set(ok FALSE)
    string(REPLACE "|" ";" allowed_list "${allowed}")
    foreach(prefix ${allowed_list})
      string(FIND "${inc}" "${prefix}" at)
      if(at EQUAL 0)
        set(ok TRUE)
      endif()
    endforeach()
    if(NOT ok)
      list(APPEND violations "${f}: includes ${inc} (allowed: ${allowed})")
    endif()
  endforeach()
endforeach()
if(violations)
  string(REPLACE ";" "\n  " text "${violations}")
  message(FATAL_ERROR "Includes against the layering (tools/check_layering.cmake):\n  ${text}")
endif()
