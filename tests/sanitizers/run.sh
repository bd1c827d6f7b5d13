#!/usr/bin/env bash
# The sanitizer builds (docs/testing.md, "Sanitizer builds"): configures a clang build of its own
# (-DPS_SANITIZE=MODE, no CUDA, no Python module, -Wthread-safety -Werror=thread-safety; unity
# batches, about a third less compile time: CMakeLists.txt; UNITY_BUILD=OFF compiles file by
# file), builds only the targets its tests need and runs them with ctest. Every instrumented process of the run
# (gtest binaries, and the daemons and psctl that the multi-process tests start) writes its
# sanitizer reports to a folder of the build; the run fails if a test fails or if any report was
# written (a daemon that dies of a report can go unnoticed by a test that tolerates deaths).
#   address: ASan (leaks included) + UBSan: every gtest suite and the multi-process tests but
#            chaos, recovery_e2e, client_install and (unless SAN_E2E=1) the three whole
#            trainings control_plane_faults, fashion_mnist_e2e, metrics_e2e (docs/testing.md
#            says why).
#   thread:  TSan: the server, client (client/) and scheduler gtest suites, and the
#            check of its Abseil shim (tsan_shim_selftest).
# Usage: tests/sanitizers/run.sh address|thread [extra ctest arguments]
# Environment: BUILD_DIR (build-asan / build-tsan); UNITY_BUILD=OFF (file by file); SAN_FUZZ=1
# (address only) also instruments the build for libFuzzer (-DPS_FUZZ=ON), so that
# tests/fuzz/run.sh can then build its targets in the same folder (BUILD_DIR=build-asan
# tests/fuzz/run.sh) instead of a build of its own, as CI does; SAN_FUZZ=0 turns it off again;
# unset, the folder keeps what it had.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
mode=${1:-}
[ $# -gt 0 ] && shift
case "$mode" in
  address)
    build=${BUILD_DIR:-build-asan}
    # bench: not built here. client_install builds examples/cpp outside against the installed
    # library, without the sanitizer's flags. chaos, recovery_e2e: 19 instrumented trainings
    # between them, too slow for CI (docs/testing.md). netns_*: timed partitions of several
    # trainings (the uninstrumented build runs them). deploy_checks: it matches the
    # uninstrumented binaries' libraries against the container's packages.
    # control_plane_faults, fashion_mnist_e2e, metrics_e2e: whole trainings, 6 to 13 minutes of the
    # step between them on CI's 2 cores; SAN_E2E=1 runs them too (the daemons' other
    # multi-process tests stay in).
    skip='client_install|recovery_e2e|deploy_checks|netns_.*'
    [ "${SAN_E2E:-0}" = 1 ] || skip="$skip|control_plane_faults|fashion_mnist_e2e|metrics_e2e"
    select=(-LE '^(bench|chaos)$' -E "^($skip)\$")
    ;;
  thread)
    build=${BUILD_DIR:-build-tsan}
    select=(-L '^(server_test|client_test|scheduler_test|tsan_shim_selftest)$')
    ;;
  *)
    echo "usage: $0 address|thread [extra ctest arguments]" >&2
    exit 2
    ;;
esac

deploy/install-deps.sh
# clang and its sanitizer runtimes (only recommended by clang's packages).
missing=()
for p in clang libclang-rt-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  echo "sanitizers: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

fuzz=()
case "${SAN_FUZZ:-}" in
  1) fuzz=(-DPS_FUZZ=ON) ;;
  0) fuzz=(-DPS_FUZZ=OFF) ;;
esac
if [ "$mode" = thread ] && [ "${SAN_FUZZ:-}" = 1 ]; then
  echo "sanitizers: SAN_FUZZ=1 goes with address, not thread" >&2
  exit 2
fi

start=$(date +%s)
mkdir -p "$build"
cmake -S . -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  -DPS_SANITIZE="$mode" -DPS_WITH_CUDA=OFF -DPS_WITH_PYTHON=OFF \
  -DCMAKE_UNITY_BUILD="${UNITY_BUILD:-ON}" "${fuzz[@]}" \
  >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
# ps_sanitize_MODE (CMakeLists.txt): the gtest binaries and daemons that these tests need.
cmake --build "$build" -j"$(nproc)" --target "ps_sanitize_$mode"
built=$(date +%s)
echo "sanitizers: $mode: built in $((built - start)) s"

logs=$(cd "$build" && pwd)/sanitizer-reports
rm -rf "$logs"
mkdir -p "$logs"
# One log_path for all: ASan and TSan also read UBSAN_OPTIONS, and the last one read wins.
# Reports: report.<pid>.
export ASAN_OPTIONS="log_path=$logs/report:detect_leaks=1:abort_on_error=0:allocator_may_return_null=0:check_initialization_order=1"
export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="log_path=$logs/report:print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="log_path=$logs/report:suppressions=$root/tests/sanitizers/tsan.supp:print_suppressions=0:second_deadlock_stack=1:history_size=4"
rc=0
ctest --test-dir "$build" --output-on-failure --timeout 600 -j2 "${select[@]}" "$@" || rc=$?
echo "sanitizers: $mode: tests in $(($(date +%s) - built)) s, $(($(date +%s) - start)) s in all"

shopt -s nullglob
reports=("$logs"/*)
if [ ${#reports[@]} -gt 0 ]; then
  echo "sanitizers: $mode: ${#reports[@]} report(s) in $logs:" >&2
  for f in "${reports[@]}"; do
    echo "==== $f" >&2
    head -120 "$f" >&2
  done
  exit 1
fi
[ "$rc" -eq 0 ] || { echo "sanitizers: $mode: tests failed" >&2; exit "$rc"; }
echo "sanitizers: $mode: no reports"
