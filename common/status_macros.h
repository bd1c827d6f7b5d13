// Small status helpers: Debian's Abseil (20220623) ships no RETURN_IF_ERROR.
#ifndef PS_COMMON_STATUS_MACROS_H_
#define PS_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PS_STATUS_CONCAT_INNER_(a, b) a##b
#define PS_STATUS_CONCAT_(a, b) PS_STATUS_CONCAT_INNER_(a, b)

// Returns from the current function if `expr` (an absl::Status) is not OK.
#define PS_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status ps_status_ = (expr);      \
    if (!ps_status_.ok()) return ps_status_; \
  } while (0)

// `lhs = value of expr` if OK, else returns its status.
#define PS_ASSIGN_OR_RETURN(lhs, expr) \
  PS_ASSIGN_OR_RETURN_IMPL_(PS_STATUS_CONCAT_(ps_statusor_, __LINE__), lhs, expr)
#define PS_ASSIGN_OR_RETURN_IMPL_(var, lhs, expr) \
  auto var = (expr);                              \
  if (!var.ok()) return var.status();             \
  lhs = std::move(var).value()

#endif  // PS_COMMON_STATUS_MACROS_H_
