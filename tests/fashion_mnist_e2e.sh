#!/usr/bin/env bash
# End to end: 2 ps_server and 2 ps_worker processes train an MLP on Fashion-MNIST in sync mode;
# passes if worker 0's final test accuracy is at least 84%.
# Usage: fashion_mnist_e2e.sh PS_SERVER PS_WORKER
set -euo pipefail
server=$1 worker=$2
dir=$(mktemp -d /tmp/ps_e2e_XXXXXX)
pids=()
cleanup() { kill -9 "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
for i in 0 1; do
  "$server" --listen=127.0.0.1:0 --server_index=$i --num_servers=2 \
    --port_file="$dir/port$i" >"$dir/server$i.log" 2>&1 &
  pids+=($!)
done
for i in 0 1; do
  for _ in $(seq 300); do [ -s "$dir/port$i" ] && break; sleep 0.1; done
  [ -s "$dir/port$i" ] || { echo "server $i did not start"; cat "$dir/server$i.log"; exit 1; }
done
servers="127.0.0.1:$(cat "$dir/port0"),127.0.0.1:$(cat "$dir/port1")"
common=(--servers="$servers" --num_workers=2 --epochs=3 --consistency=sync --log_every_steps=0
        --rpc_timeout=60s)
"$worker" "${common[@]}" --worker_id=1 >"$dir/worker1.log" 2>&1 &
w1=$!
"$worker" "${common[@]}" --worker_id=0 --evaluate | tee "$dir/worker0.log"
wait "$w1" || { echo "worker 1 failed:"; cat "$dir/worker1.log"; exit 1; }
acc=$(sed -n 's/.*final test accuracy \([0-9.]*\)%.*/\1/p' "$dir/worker0.log")
[ -n "$acc" ] || { echo "no final accuracy printed"; exit 1; }
if awk -v a="$acc" 'BEGIN { exit !(a >= 84.0) }'; then
  echo "PASS: test accuracy $acc% >= 84%"
else
  echo "FAIL: test accuracy $acc% < 84%"
  exit 1
fi
