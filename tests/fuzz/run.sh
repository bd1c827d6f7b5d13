#!/usr/bin/env bash
# Builds the libFuzzer targets (clang with its sanitizer runtimes, -DPS_FUZZ=ON) and runs each
# for FUZZ_SECONDS on a copy of its seed corpus. The build folder is one of their own, or the ASan
# build's: after `SAN_FUZZ=1 tests/sanitizers/run.sh address`, `BUILD_DIR=build-asan
# tests/fuzz/run.sh` builds only the targets (CI does this). Exits non-zero if any target
# crashes, reports undefined behaviour, leaks, runs out of memory or times out; the input that
# did it is left in the work folder (printed). See docs/testing.md.
# Usage: tests/fuzz/run.sh [target...]   (default: every target)
# Environment: FUZZ_SECONDS (30), BUILD_DIR (build-fuzz), FUZZ_WORK (a new temp folder).
set -euo pipefail
cd "$(dirname "$0")/../.."
targets=(fuzz_codecs fuzz_job_spec fuzz_checkpoint_reader fuzz_data_plane)
[ $# -gt 0 ] && targets=("$@")
seconds=${FUZZ_SECONDS:-30}
build=${BUILD_DIR:-build-fuzz}

deploy/install-deps.sh
missing=()
for p in clang libfuzzer-14-dev libclang-rt-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  echo "fuzz: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

start=$(date +%s)
mkdir -p "$build"
cmake -S . -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug -DPS_FUZZ=ON \
  -DPS_WITH_CUDA=OFF -DPS_WITH_PYTHON=OFF >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
echo "fuzz: built in $(($(date +%s) - start)) s"

work=${FUZZ_WORK:-$(mktemp -d -t ps-fuzz.XXXXXX)}
failed=()
for t in "${targets[@]}"; do
  corpus="$work/$t/corpus"
  rm -rf "$work/$t"
  mkdir -p "$corpus" "$work/$t/artifacts"
  cp tests/fuzz/corpus/"$t"/* "$corpus"/  # the fuzzer adds inputs to it: never the repo's
  log="$work/$t/fuzz.log"
  rc=0
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 \
    "$build/tests/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -detect_leaks=1 -print_final_stats=1 -artifact_prefix="$work/$t/artifacts/" \
    "$corpus" >"$log" 2>&1 || rc=$?
  # The last status line (execs, cov, ft, corpus) and the final statistics.
  summary=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}' || true)
  echo "fuzz: $t: ${seconds} s, ${execs:-?} executions; last: ${summary:-none}"
  if [ "$rc" -ne 0 ]; then
    failed+=("$t")
    echo "fuzz: $t FAILED (exit $rc); log $log, inputs:" >&2
    ls "$work/$t/artifacts" >&2 || true
    grep -E 'ERROR|SUMMARY|runtime error|==[0-9]+==' "$log" | head -20 >&2 || true
  fi
done
echo "fuzz: total $(($(date +%s) - start)) s (build and runs); work folder $work"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
