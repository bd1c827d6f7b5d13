// GemmPrecision names: compiled in every build (the flags parse them with or without CUDA).
#include "absl/strings/str_cat.h"
#include "worker/compute/cuda/cuda_backend.h"

namespace ps {

absl::string_view GemmPrecisionName(GemmPrecision precision) {
  switch (precision) {
    case GemmPrecision::kFp32:
      return "fp32";
    case GemmPrecision::kTf32:
      return "tf32";
    case GemmPrecision::kBf16:
      return "bf16";
    case GemmPrecision::kFp16:
      return "fp16";
  }
  return "?";
}

absl::StatusOr<GemmPrecision> ParseGemmPrecision(absl::string_view name) {
  for (GemmPrecision p :
       {GemmPrecision::kFp32, GemmPrecision::kTf32, GemmPrecision::kBf16, GemmPrecision::kFp16}) {
    if (name == GemmPrecisionName(p)) return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("GEMM precision '", name, "' is unknown; want fp32, tf32, bf16 or fp16"));
}

}  // namespace ps
