#!/usr/bin/env bash
# The test command: installs what the build needs, configures, builds and runs every test.
# Usage: tests/run.sh [extra ctest arguments]   (BUILD_DIR overrides the build folder;
#        UNITY_BUILD=OFF compiles file by file)
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install-deps.sh
build=${BUILD_DIR:-build}
mkdir -p "$build"
# Unity batches (CMakeLists.txt): about 40% less compile time from scratch; UNITY_BUILD=OFF
# for a folder that you also rebuild file by file.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_UNITY_BUILD="${UNITY_BUILD:-ON}" \
  >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
grep -E "building CUDA code|CPU backend only" "$build/configure.log" || true
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure --timeout 600 -j2 "$@"
