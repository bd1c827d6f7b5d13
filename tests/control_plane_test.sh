#!/usr/bin/env bash
# Faults the control plane must survive, with real daemons on loopback:
#  1. a worker SIGKILLed mid-job in sync mode: the job goes on with the other worker, a worker
#     started later joins it, and it SUCCEEDS;
#  2. the scheduler SIGKILLed and restarted mid-job: the job keeps running and SUCCEEDS, and
#     its history survives;
#  3. a bad spec is refused at submit time, naming the field; a data_dir the workers lack fails
#     the job with the workers' reason.
# Usage: control_plane_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
sched_bin=$build/scheduler/ps_scheduler server_bin=$build/server/ps_server
worker_bin=$build/worker/ps_worker psctl_bin=$build/tools/psctl
source "$(dirname "$0")/lib/daemons.sh" ps_control
port=$(free_port)
sched=127.0.0.1:$port
psctl() { "$psctl_bin" --scheduler="$sched" "$@"; }
start_scheduler() {
  "$sched_bin" --listen="$sched" --state_dir="$dir/state" >>"$dir/scheduler.log" 2>&1 &
  sched_pid=$!
  pids+=($sched_pid)
  for _ in $(seq 100); do psctl list >/dev/null 2>&1 && return 0; sleep 0.1; done
  fail "scheduler did not start"
}
start_worker() {
  "$worker_bin" --scheduler="$sched" --rpc_timeout=60s >"$dir/worker$1.log" 2>&1 &
  pids+=($!)
  eval "worker$1_pid=$!"
}
# Field $2 of job $1's status as JSON ('' if absent).
job_field() {
  psctl --output=json status "$1" 2>/dev/null |
    python3 -c "import json,sys; d=json.load(sys.stdin); print(eval('d' + sys.argv[1]))" "$2" 2>/dev/null || true
}
wait_clock() {  # wait_clock JOB N: until the job's clock passes N (bounded)
  for _ in $(seq 600); do
    c=$(job_field "$1" ".get('progress',{}).get('clock','0')")
    [ "${c:-0}" -gt "$2" ] && return 0
    sleep 0.1
  done
  fail "job $1 did not reach clock $2"
}
wait_done() {  # wait_done JOB: until the job ends; prints its state
  for _ in $(seq 1800); do
    s=$(job_field "$1" ".get('state','')")
    case "$s" in SUCCEEDED|FAILED|CANCELLED) echo "$s"; return 0 ;; esac
    sleep 0.1
  done
  echo TIMEOUT
}

start_scheduler
for i in 0 1; do
  "$server_bin" --listen=127.0.0.1:0 --scheduler="$sched" --checkpoint_roots="$dir/checkpoints" \
    >"$dir/server$i.log" 2>&1 &
  pids+=($!)
done
start_worker 0
start_worker 1
for _ in $(seq 100); do
  [ "$(psctl nodes | grep -c ALIVE)" -ge 4 ] && break
  sleep 0.1
done

spec="$dir/job.textproto"
cat >"$spec" <<'SPEC'
name: "fault-test"
model: "fashion_mlp"
num_workers: 2
num_servers: 2
epochs: 2
consistency { mode: SYNC }
SPEC

echo "== 3. bad specs are refused at submit time"
out=$(psctl submit "$spec" --num_workers=0 2>&1) && fail "num_workers 0 accepted"
echo "$out" | grep -q "num_workers" || fail "message does not name num_workers: $out"
out=$(psctl submit "$spec" --model=resnet 2>&1) && fail "unknown model accepted"
echo "$out" | grep -q "model" || fail "message does not name model: $out"
out=$(psctl submit "$spec" --consistency=ssp --staleness=-1 2>&1) && fail "staleness -1 accepted"
echo "$out" | grep -q "staleness" || fail "message does not name staleness: $out"
out=$(psctl submit "$spec" --data_dir=relative/data 2>&1) && fail "relative data_dir accepted"
echo "$out" | grep -q "data_dir" || fail "message does not name data_dir: $out"
echo "ok: refused with messages naming the field"

echo "== 3b. a data_dir the workers lack: accepted (the scheduler does not probe its disk), then"
echo "      failed by the workers with a clear reason"
job=$(psctl submit "$spec" --data_dir=/nonexistent/ps-data)
state=$(wait_done "$job")
[ "$state" = FAILED ] || fail "job $job with a missing data_dir ended $state"
reason=$(job_field "$job" ".get('reason','')")
echo "$reason" | grep -q "/nonexistent/ps-data" || fail "the reason does not name the path: $reason"
echo "ok: $job FAILED: $reason"

echo "== 1. a worker killed mid-job (sync)"
job=$(psctl submit "$spec")
wait_clock "$job" 100
kill -9 "$worker1_pid"
killed_at=$(date +%s.%N)
echo "killed worker 1 at clock $(job_field "$job" ".get('progress',{}).get('clock')")"
start_worker 2  # joins the running job
state=$(wait_done "$job")
[ "$state" = SUCCEEDED ] || fail "job $job ended $state after a worker died"
psctl events "$job" >"$dir/events1.txt"
grep -q "dead" "$dir/events1.txt" || fail "no dead-worker event"
grep -q "joined as worker" "$dir/events1.txt" || fail "the new worker did not join"
cat "$dir/events1.txt"
echo "ok: $job SUCCEEDED: $(job_field "$job" ".get('progress',{}).get('testAccuracy')") test accuracy"

echo "== 2. the scheduler killed and restarted mid-job"
job=$(psctl submit "$spec")
wait_clock "$job" 100
kill -9 "$sched_pid"
echo "scheduler killed; the job trains on without it"
sleep 3
start_scheduler
state=$(wait_done "$job")
[ "$state" = SUCCEEDED ] || fail "job $job ended $state after a scheduler restart"
psctl events "$job" >"$dir/events2.txt"
cat "$dir/events2.txt"
grep -q "submitted" "$dir/events2.txt" || fail "history lost across the restart"
grep -q "restarted" "$dir/events2.txt" || fail "no restart event"
psctl list
echo "PASS"
