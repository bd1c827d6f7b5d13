#!/usr/bin/env bash
# A step interrupted by a server's death is visible to the program, which never sees an
# undefined buffer: a scheduler, 3 servers and a worker daemon on loopback run
# tests/programs/probe.py --mode=guard (each step pulls into an array filled with NaN first and
# exits 5 if a pull returns without having written it); one of the job's servers is SIGKILLed
# mid-run, twice. The job must SUCCEED, the program must have caught paramserver.StepInterrupted
# (its report of a NaN loss in the interrupted step ignored) and recovered.
# Usage: step_interrupt_test.sh BUILD_DIR
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
sched_bin=$build/scheduler/ps_scheduler server_bin=$build/server/ps_server
worker_bin=$build/worker/ps_worker psctl_bin=$build/tools/psctl
[ -d "$build/python/paramserver" ] || { echo "SKIP: no paramserver Python package built"; exit 77; }
/usr/bin/python3 -c "import numpy" 2>/dev/null || { echo "SKIP: /usr/bin/python3 lacks numpy"; exit 77; }
source "$(dirname "$0")/lib/daemons.sh" ps_step_interrupt
sched=127.0.0.1:$(free_port)
psctl() { "$psctl_bin" --scheduler="$sched" "$@"; }
"$sched_bin" --listen="$sched" --state_dir="$dir/state" --checkpoint_root="$dir/checkpoints" \
  --heartbeat_interval=500ms --heartbeat_timeout=2s >"$dir/scheduler.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do psctl list >/dev/null 2>&1 && break; sleep 0.1; done
for i in 0 1 2; do
  "$server_bin" --listen=127.0.0.1:0 --scheduler="$sched" --checkpoint_roots="$dir/checkpoints" \
    >"$dir/server$i.log" 2>&1 &
  pids+=($!)
done
"$worker_bin" --scheduler="$sched" --work_dir="$dir/w" --recovery_wait=60s >"$dir/worker.log" 2>&1 &
pids+=($!)
source "$(dirname "$0")/lib/jobs.sh"  # wait_nodes, json, clock_of, wait_clock, wait_done
wait_nodes 4

cat >"$dir/guard.textproto" <<SPEC
name: "guard"
program {
  argv: ["/usr/bin/python3", "tests/programs/probe.py", "--mode=guard", "--steps=400",
         "--sleep=0.05"]
  working_dir: "$repo"
  env { key: "PYTHONPATH" value: "$build/python" }
}
tables { name: "w" kind: DENSE num_rows: 64 dim: 4 optimizer { kind: SGD learning_rate: 0.01 } }
num_workers: 1
num_servers: 2
consistency { mode: ASYNC }
checkpoint { every_steps: 20 }
SPEC
job=$(psctl submit "$dir/guard.textproto")
kill_a_server() {  # kill_a_server CLOCK: SIGKILLs one of the job's servers past that clock
  wait_clock "$job" "$1"
  local node spid
  node=$(json status "$job" "d['serverNodes'][0]")
  spid=$(json nodes "[n['pid'] for n in d['nodes'] if n['nodeId'] == '$node'][0]")
  [ -n "$spid" ] || fail "no pid for server node $node"
  kill -9 "$spid"
  echo "killed server node $node (pid $spid) at clock $(clock_of "$job")"
}
kill_a_server 40
kill_a_server 140
state=$(wait_done "$job")
log=$(ls "$dir"/w/"$job"/worker-*/program.log | head -1)
cp "$log" "$dir/program.log"  # shown by fail
[ "$state" = SUCCEEDED ] || fail "$job ended $state: $(json status "$job" "d.get('reason','')")"
grep -q "undefined buffer" "$log" && fail "the program saw an undefined buffer"
grep -q "steps interrupted" "$log" || fail "the program did not finish its loop"
grep -Eq "interrupted: .*step interrupted" "$log" ||
  fail "no request raised paramserver.StepInterrupted"
grep -q "recovered under" "$log" || fail "the session did not recover"
grep -E "probe: step [0-9]+ interrupted" "$log" | head -2
grep -E "probe: [0-9]+ steps interrupted" "$log"
echo "PASS"
