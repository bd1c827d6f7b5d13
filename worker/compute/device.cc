#include "worker/compute/device.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "worker/compute/cpu_backend.h"

namespace ps {

std::string DeviceSpec::ToString() const {
  switch (kind) {
    case Kind::kCpu:
      return "cpu";
    case Kind::kAuto:
      return "auto";
    case Kind::kCuda:
      break;
  }
  return absl::StrCat("cuda:", index);
}

absl::StatusOr<DeviceSpec> ParseDevice(absl::string_view text) {
  const absl::string_view original = text;
  DeviceSpec d;
  if (text == "cpu") return d;
  if (text == "auto") {
    d.kind = DeviceSpec::Kind::kAuto;
    return d;
  }
  d.kind = DeviceSpec::Kind::kCuda;
  if (text == "cuda") return d;
  if (absl::ConsumePrefix(&text, "cuda:")) {
    int index = -1;
    // SimpleAtoi takes a sign and spaces; a device ordinal is plain digits.
    const bool digits = !text.empty() && text.size() <= 4 &&
                        text.find_first_not_of("0123456789") == absl::string_view::npos;
    if (digits && absl::SimpleAtoi(text, &index)) {
      d.index = index;
      return d;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("device '", original,
                   "' is not one of cpu, auto, cuda, cuda:N (N = 0, 1, ...: a CUDA device)"));
}

absl::StatusOr<DeviceSpec> ResolveDevice(const DeviceSpec& requested,
                                         const CudaAvailability& cuda) {
  switch (requested.kind) {
    case DeviceSpec::Kind::kCpu:
      return requested;
    case DeviceSpec::Kind::kAuto: {
      DeviceSpec d;
      if (cuda.compiled && cuda.devices > 0) d.kind = DeviceSpec::Kind::kCuda;
      return d;
    }
    case DeviceSpec::Kind::kCuda:
      break;
  }
  const std::string name = requested.ToString();
  if (!cuda.compiled) {
    return absl::FailedPreconditionError(
        absl::StrCat(name,
                     " asked for, but this binary was built without CUDA support (no CUDA "
                     "toolkit at build time, or -DPS_WITH_CUDA=OFF), so only --device=cpu works"));
  }
  if (cuda.devices == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " asked for, but there is no usable CUDA device (", cuda.reason,
                     "); use --device=cpu"));
  }
  if (requested.index >= cuda.devices) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " asked for, but there are only ", cuda.devices,
                     " CUDA device(s): cuda:0..cuda:", cuda.devices - 1));
  }
  return requested;
}

absl::StatusOr<OverlapMode> ParseOverlap(absl::string_view text) {
  for (OverlapMode m : {OverlapMode::kAuto, OverlapMode::kOn, OverlapMode::kOff}) {
    if (text == OverlapName(m)) return m;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("overlap mode '", text, "' is unknown; want auto, on or off"));
}

absl::string_view OverlapName(OverlapMode mode) {
  switch (mode) {
    case OverlapMode::kAuto:
      return "auto";
    case OverlapMode::kOn:
      return "on";
    case OverlapMode::kOff:
      return "off";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<ComputeBackend>> MakeBackend(const ComputeOptions& options) {
  switch (options.device.kind) {
    case DeviceSpec::Kind::kCpu:
      PS_RETURN_IF_ERROR(CpuKernelsAvailable(options.cpu_kernels));
      return MakeCpuBackend({options.cpu_kernels});
    case DeviceSpec::Kind::kCuda:
      return MakeCudaBackend(options.device.index, options.gemm_precision);
    case DeviceSpec::Kind::kAuto:
      break;
  }
  return absl::InvalidArgumentError("MakeBackend: resolve the device first (it is 'auto')");
}

}  // namespace ps
