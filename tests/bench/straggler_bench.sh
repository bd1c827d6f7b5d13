#!/usr/bin/env bash
# The straggler benchmark: a local cluster (a scheduler, 2 servers, 2 workers) trains
# fashion_mlp once per mode, with worker 1 slowed by --slow (every step followed by a sleep of
# (slow - 1) x its time: ps_worker --slow_factor), all in one invocation so that the figures
# compare. Per job it prints the wall-clock (the scheduler's start to end), the final test
# accuracy, and per worker the examples it read, its examples/s over the job's wall-clock, its
# compute time and its idle time (the wall-clock minus compute: blocked on pulls, waiting for
# data, or done early).
#
# Usage: tests/bench/straggler_bench.sh BUILD_DIR [--slow=2] [--epochs=3] [--staleness=3]
#          [--runs=sync,ssp,async,ssp:static,async:static]
# A run is MODE or MODE:ASSIGNMENT (static | dynamic; default: the mode's default, dynamic for
# ssp and async). --slow=1: no straggler.
set -euo pipefail
build=$(cd "$1" && pwd)
shift
slow=2 epochs=3 staleness=3 runs=sync,ssp,async,ssp:static,async:static
for arg in "$@"; do
  case "$arg" in
    --slow=*) slow=${arg#*=} ;;
    --epochs=*) epochs=${arg#*=} ;;
    --staleness=*) staleness=${arg#*=} ;;
    --runs=*) runs=${arg#*=} ;;
    *) echo "usage: $0 BUILD_DIR [--slow=F] [--epochs=N] [--staleness=S] [--runs=...]" >&2
       exit 2 ;;
  esac
done
sched_bin=$build/scheduler/ps_scheduler server_bin=$build/server/ps_server
worker_bin=$build/worker/ps_worker psctl_bin=$build/tools/psctl
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/lib/daemons.sh" ps_straggler
sched=127.0.0.1:$(free_port)
psctl() { "$psctl_bin" --scheduler="$sched" "$@"; }
source "$here/lib/jobs.sh"

"$sched_bin" --listen="$sched" --state_dir="$dir/state" --checkpoint_root="$dir/checkpoints" \
  --metrics_listen=off >"$dir/scheduler.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do psctl list >/dev/null 2>&1 && break; sleep 0.1; done
for i in 0 1; do
  "$server_bin" --listen=127.0.0.1:0 --scheduler="$sched" --checkpoint_roots="$dir/checkpoints" \
    --metrics_listen=off >"$dir/server$i.log" 2>&1 &
  pids+=($!)
done
wait_nodes 2
# Worker 0 registers first (the scheduler hands out ranks by node id): worker 1 is the slow one.
"$worker_bin" --scheduler="$sched" --metrics_listen=off --health_listen=off \
  --log_every_steps=0 >"$dir/worker0.log" 2>&1 &
pids+=($!)
wait_nodes 3
"$worker_bin" --scheduler="$sched" --metrics_listen=off --health_listen=off \
  --log_every_steps=0 --slow_factor="$slow" >"$dir/worker1.log" 2>&1 &
pids+=($!)
wait_nodes 4

echo "straggler bench: fashion_mlp, 2 servers x 2 workers, $epochs epochs, batch 64 per worker,"
echo "worker 1 slowed ${slow}x (--slow_factor), ssp staleness $staleness; $(nproc) cores"
printf '%-14s %8s %9s  %s\n' run wall test_acc "per worker: examples, examples/s, compute s, idle s"
IFS=, read -r -a run_list <<<"$runs"
for run in "${run_list[@]}"; do
  mode=${run%%:*}
  assignment=
  [ "$run" != "$mode" ] && assignment=${run#*:}
  flags=(--consistency="$mode")
  [ "$mode" = ssp ] && flags+=(--staleness="$staleness")
  [ -n "$assignment" ] && flags+=(--data_assignment="$assignment")
  job=$(psctl submit --model=fashion_mlp --num_workers=2 --epochs="$epochs" --seed=1 \
    --name="straggler-$run" "${flags[@]}")
  state=$(wait_done "$job")
  [ "$state" = SUCCEEDED ] || fail "$run: $job ended $state"
  wall=$(json status "$job" "(int(d['endTimeUnixMs']) - int(d['startTimeUnixMs'])) / 1000")
  acc=$(accuracy_of "$job")
  workers=""
  for w in 0 1; do
    # The worker's last line about this job: "job-N worker K: done: E examples, compute C s, ..."
    line=$(grep -E "$job worker [0-9]+: done: " "$dir/worker$w.log" | tail -1)
    read -r examples compute <<<"$(python3 -c '
import re, sys
m = re.search(r"done: (\d+) examples, compute ([0-9.]+)s", sys.argv[1])
print(m.group(1), m.group(2)) if m else print("0 0")' "$line")"
    workers+=$(python3 -c "
e, c, w = $examples, $compute, $wall
print(f'  w$w {e:6d} {e / w:6.0f}/s {c:5.1f} {max(0.0, w - c):5.1f}', end='')")
  done
  printf '%-14s %7.1fs %8s%%%s\n' "$run" "$wall" "$acc" "$workers"
done
