#!/usr/bin/env bash
# Without a scheduler: builds the daemons, starts 2 parameter servers and 2 workers on
# loopback, trains an MLP on Fashion-MNIST (sync mode), shows progress and the test accuracy.
# Usage: deploy/local/demo-standalone.sh [--epochs=N] [--consistency=sync|ssp|async] [other ps_worker flags]
# Logs go to run/demo/. Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/../.."
deploy/install-deps.sh
build=${BUILD_DIR:-build}
echo "== building ps_server and ps_worker in $build/"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target ps_server ps_worker -j"$(nproc)" | grep -E "error|Built target" || true
[ -x "$build/server/ps_server" ] && [ -x "$build/worker/ps_worker" ] || { echo "build failed"; exit 1; }

run=run/demo
rm -rf "$run" && mkdir -p "$run"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM

num_servers=2 num_workers=2
for i in $(seq 0 $((num_servers - 1))); do
  "$build/server/ps_server" --listen=127.0.0.1:0 --server_index="$i" \
    --num_servers=$num_servers --port_file="$run/server$i.port" >"$run/server$i.log" 2>&1 &
  pids+=($!)
done
servers=()
for i in $(seq 0 $((num_servers - 1))); do
  for _ in $(seq 300); do [ -s "$run/server$i.port" ] && break; sleep 0.1; done
  [ -s "$run/server$i.port" ] || { echo "server $i did not start:"; cat "$run/server$i.log"; exit 1; }
  servers+=("127.0.0.1:$(cat "$run/server$i.port")")
done
list=$(IFS=,; echo "${servers[*]}")
echo "== $num_servers parameter servers on $list; logs in $run/"
echo "== training a 784-128-10 MLP on Fashion-MNIST with $num_workers workers (sync)"
flags=(--servers="$list" --num_workers=$num_workers --epochs=5 --consistency=sync
       --log_every_steps=100 "$@")
for w in $(seq 1 $((num_workers - 1))); do
  "$build/worker/ps_worker" "${flags[@]}" --worker_id="$w" >"$run/worker$w.log" 2>&1 &
  pids+=($!)
done
start=$(date +%s)
"$build/worker/ps_worker" "${flags[@]}" --worker_id=0 --evaluate 2>&1 | tee "$run/worker0.log"
status=${PIPESTATUS[0]}
for w in $(seq 1 $((num_workers - 1))); do
  wait "${pids[$((num_servers + w - 1))]}" || { echo "worker $w failed:"; tail "$run/worker$w.log"; status=1; }
done
[ "$status" -eq 0 ] || exit "$status"
echo "== done in $(( $(date +%s) - start )) s: $(grep -o 'final test accuracy.*' "$run/worker0.log")"
