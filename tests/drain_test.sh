#!/usr/bin/env bash
# psctl drain on loopback: a sync job on 2 of 3 servers; one of its servers is drained mid-job.
# The job checkpoints, moves that server's slots to the spare (restored from the checkpoint),
# and SUCCEEDS with a sane accuracy; the drained server stays ALIVE, marked draining, and is
# used by no job; draining a worker or an unknown node is refused.
# Usage: tests/drain_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
sched_bin=$build/scheduler/ps_scheduler
server_bin=$build/server/ps_server
worker_bin=$build/worker/ps_worker
psctl_bin=$build/tools/psctl
dir=$(mktemp -d /tmp/ps_drain_XXXXXX)
pids=()
keep=0
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ "$keep" = 1 ] || rm -rf "$dir"
}
trap cleanup EXIT INT TERM
fail() {
  echo "FAIL: $*"
  keep=1
  for f in "$dir"/*.log; do echo "== $f"; tail -15 "$f"; done
  exit 1
}
wait_file() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    [ -s "$1" ] && return 0
    sleep 0.1
  done
  fail "timed out waiting for $1"
}

mkdir -p "$dir/checkpoints"
"$sched_bin" --listen=127.0.0.1:0 --port_file="$dir/sched.port" --state_dir="$dir/state" \
  --checkpoint_root="$dir/checkpoints" --metrics_listen=off --heartbeat_interval=500ms \
  --heartbeat_timeout=3s >"$dir/scheduler.log" 2>&1 &
pids+=($!)
wait_file "$dir/sched.port" 20
sched=127.0.0.1:$(cat "$dir/sched.port")
psctl() { "$psctl_bin" --scheduler="$sched" "$@"; }
for i in 0 1 2; do
  "$server_bin" --listen=127.0.0.1:0 --scheduler="$sched" --checkpoint_roots="$dir/checkpoints" \
    --metrics_listen=off >"$dir/server$i.log" 2>&1 &
  pids+=($!)
done
"$worker_bin" --scheduler="$sched" --device=cpu --metrics_listen=off --health_listen=off \
  --work_dir="$dir/work" >"$dir/worker.log" 2>&1 &
pids+=($!)
for ((i = 0; i < 100; i++)); do
  [ "$(psctl nodes 2>/dev/null | grep -c ALIVE)" -ge 4 ] && break
  sleep 0.2
done
[ "$(psctl nodes | grep -c ALIVE)" -eq 4 ] || fail "expected 4 nodes ALIVE"

json() {  # json COMMAND... -- PYTHON-EXPRESSION over d
  local expr=${*: -1}
  psctl --output=json "${@:1:$#-1}" | /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); print($expr)"
}
cat >"$dir/job.textproto" <<EOF
name: "drain"
model: "fashion_mlp"
layers: [784, 64, 10]
num_workers: 1
num_servers: 2
epochs: 2
batch_size: 64
seed: 3
consistency { mode: SYNC }
EOF
job=$(psctl submit "$dir/job.textproto")
for ((i = 0; i < 200; i++)); do
  clock=$(json status "$job" "d.get('progress',{}).get('clock',0)" 2>/dev/null || echo 0)
  [ "${clock:-0}" -ge 100 ] && break
  sleep 0.1
done
[ "${clock:-0}" -ge 100 ] || fail "$job is not training"
victim=$(json status "$job" "d['serverNodes'][1]")
worker=$(json nodes "[n['nodeId'] for n in d['nodes'] if n.get('role')=='WORKER'][0]")
echo "$job at clock $clock: draining its server node $victim"

if out=$(psctl drain "$worker" 2>&1); then fail "draining a worker was accepted: $out"; fi
grep -q "INVALID_ARGUMENT" <<<"$out" || fail "draining a worker: $out"
if out=$(psctl drain 99 2>&1); then fail "draining node 99 was accepted: $out"; fi
grep -q "NOT_FOUND" <<<"$out" || fail "draining node 99: $out"

start=$(date +%s%3N)
psctl drain "$victim" --wait_timeout=120s || fail "psctl drain $victim failed"
echo "drained in $(($(date +%s%3N) - start)) ms"
psctl nodes
psctl nodes | grep -E "^$victim " | grep -q "ALIVE,draining" || fail "node $victim is not shown draining"
servers=$(json status "$job" "' '.join(d['serverNodes'])")
grep -qw "$victim" <<<"$servers" && fail "$job still uses node $victim: $servers"
psctl events "$job" | grep -E "draining|leaves|restore|recovered"

state=""
for ((i = 0; i < 360; i++)); do
  state=$(json status "$job" "d.get('state','')" 2>/dev/null || true)
  case $state in SUCCEEDED | FAILED | CANCELLED) break ;; esac
  sleep 0.5
done
psctl status "$job"
[ "$state" = SUCCEEDED ] || fail "$job ended '$state'"
acc=$(json status "$job" "d.get('progress',{}).get('testAccuracy',0)")
/usr/bin/python3 -c "import sys; sys.exit(not $acc >= 0.80)" || fail "test accuracy $acc < 0.80"
psctl nodes | grep -E "^$victim " | grep -q ALIVE || fail "the drained server is not ALIVE"
# The servers' --checkpoint_roots is the scheduler's --checkpoint_root: each can write there.
if grep -h "cannot write the scheduler's checkpoint root" "$dir"/server*.log; then
  fail "a server found the scheduler's checkpoint root (one of its own roots) unwritable"
fi
echo "PASS: node $victim drained mid-job; $job SUCCEEDED (test accuracy $acc)"
