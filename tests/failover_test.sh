#!/usr/bin/env bash
# Failover onto replicas (docs/operations.md, "When a node dies") with real daemons on loopback:
# a sync Fashion-MNIST job with `replication { replicas: 1 }` on 3 servers and 2 workers, run
#  1. undisturbed, then
#  2. with one of its servers SIGKILLed once the job passed a clock drawn from a seed
#     (FAILOVER_SEED, printed; default fixed), and a second one once the backups placed at the
#     failover hold every slot: the job SUCCEEDS on its last server, its events show each dead
#     server's slots promoted to their backups and no restore (no checkpoint is read, no clock
#     goes back), and its final parameters are bit-identical to run 1's (the params_digest rank
#     0 reports: sync is deterministic, and the push of the clock in flight is re-sent to the
#     new owners, which apply it once). Prints the time from the SIGKILL to training again.
# Usage: failover_test.sh BUILD_DIR     (HEARTBEAT_TIMEOUT=2s by default)
set -euo pipefail
build=$(cd "$1" && pwd)
sched_bin=$build/scheduler/ps_scheduler server_bin=$build/server/ps_server
worker_bin=$build/worker/ps_worker psctl_bin=$build/tools/psctl
hb_timeout=${HEARTBEAT_TIMEOUT:-2s}
seed=${FAILOVER_SEED:-51}
source "$(dirname "$0")/lib/daemons.sh" ps_failover
sched=127.0.0.1:$(free_port)
psctl() { "$psctl_bin" --scheduler="$sched" "$@"; }
"$sched_bin" --listen="$sched" --state_dir="$dir/state" --checkpoint_root="$dir/checkpoints" \
  --heartbeat_interval=500ms --heartbeat_timeout="$hb_timeout" >"$dir/scheduler.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do psctl list >/dev/null 2>&1 && break; sleep 0.1; done
source "$(dirname "$0")/lib/jobs.sh"  # wait_nodes, json, clock_of, wait_clock, wait_done
declare -A server_pid  # by address
for i in 0 1 2; do
  address=127.0.0.1:$(free_port)
  "$server_bin" --listen="$address" --scheduler="$sched" --checkpoint_roots="$dir/checkpoints" \
    >"$dir/server$i.log" 2>&1 &
  pids+=($!)
  server_pid[$address]=$!
done
for i in 0 1; do
  "$worker_bin" --scheduler="$sched" --rpc_timeout=60s --recovery_wait=60s \
    >"$dir/worker$i.log" 2>&1 &
  pids+=($!)
done
wait_nodes 5
spec="$dir/job.textproto"
cat >"$spec" <<'SPEC'
name: "failover-test"
model: "fashion_mlp"
num_workers: 2
num_servers: 3
epochs: 2
seed: 7
consistency { mode: SYNC }
replication { replicas: 1 }
SPEC
# json, asked again while it answers nothing (psctl on a busy machine).
json_of() {
  local v=""
  for _ in $(seq 20); do
    v=$(json "$@")
    [ -n "$v" ] && break
    sleep 0.25
  done
  echo "$v"
}
digest_of() { json_of status "$1" "'%012x' % int(d['progress']['metrics']['params_digest'])"; }

echo "== 1. undisturbed run"
job1=$(psctl submit "$spec")
[ "$(wait_done "$job1")" = SUCCEEDED ] || fail "$job1 did not succeed"
digest1=$(digest_of "$job1")
total=$(json_of status "$job1" "d['progress']['totalClocks']")
[ -n "$digest1" ] && [ -n "$total" ] || fail "$job1 reported no params_digest or clocks"
echo "ok: $job1 SUCCEEDED after $total clocks, params_digest $digest1"

# The clock to kill at, from the seed: somewhere in the job's second eighth to its fourth
# (what psctl shows lags the workers by up to a heartbeat: room is left for the second kill).
kill_clock=$((total / 8 + seed * 7919 % (total / 4)))
echo "== 2. the same job, a server SIGKILLed once it passed clock $kill_clock (seed $seed)," \
  "another once the new backups hold every slot"
job2=$(psctl submit "$spec")
wait_clock "$job2" "$kill_clock"
# kill_server JOB: SIGKILLs the job's second server; prints its address.
kill_server() {
  local address
  address=$(json_of status "$1" "d['serverAddresses'][1]")
  [ -n "${server_pid[$address]:-}" ] || fail "no server at $address"
  kill -9 "${server_pid[$address]}"
  echo "$address"
}
# wait_recoveries JOB N: until the job trained again after its N-th server loss.
wait_recoveries() {
  for _ in $(seq 600); do
    [ "$(json status "$1" "d.get('recoveries',0)")" -ge "$2" ] && return 0
    sleep 0.1
  done
  fail "$1 did not train again after server loss $2"
}
victim=$(kill_server "$job2")
killed_at=$(date +%s.%N)
[ -n "$victim" ] || fail "no server of $job2 to kill"
echo "killed server $victim at clock $(clock_of "$job2")"
wait_recoveries "$job2" 1
trained_at=$(date +%s.%N)
first_kill_s=$(python3 -c "print(round($trained_at - $killed_at, 1))")
# The new backups hold every slot once two clocks completed under the new map: wait until rank 0
# reported under it, then for two clocks more.
for _ in $(seq 600); do
  [ "$(json status "$job2" "d['progress'].get('shardEpoch','0')")" = 2 ] && break
  sleep 0.1
done
seeded_clock=$(($(clock_of "$job2") + 2))
# Room for the kill and its recovery before the job ends (psctl's view lags the workers).
[ "$seeded_clock" -lt $((total - total / 8)) ] ||
  fail "$job2 is at clock $seeded_clock of $total: too near its end for its second server to die"
wait_clock "$job2" "$seeded_clock"
victim2=$(kill_server "$job2")
[ -n "$victim2" ] || fail "no second server of $job2 to kill"
echo "killed server $victim2 at clock $(clock_of "$job2")"
wait_recoveries "$job2" 2
state=$(wait_done "$job2")
psctl events "$job2" >"$dir/events2.txt"
grep -E "dead|failover|restor|recovered" "$dir/events2.txt" || true
[ "$state" = SUCCEEDED ] || fail "$job2 ended $state after its servers died"
[ "$(grep -c "failover: its [0-9]* slots are promoted to their backups" "$dir/events2.txt")" = 2 ] ||
  fail "not two failover events"
if grep -E "restoring|no failover" "$dir/events2.txt"; then
  fail "$job2 recovered from a checkpoint instead of its backups"
fi
if grep -h "restore ordered" "$dir/scheduler.log"; then fail "the scheduler ordered a restore"; fi
digest2=$(digest_of "$job2")
sed -n 's/.*recovered: training again at clock [0-9]*, \([0-9.]*\) s after.*/\1/p' \
  "$dir/events2.txt" | tr '\n' ' ' | sed 's/^/failover: detection to training again (s): /'
echo
echo "failover: SIGKILL to the scheduler seeing training again $first_kill_s s (first death;" \
  "heartbeat timeout $hb_timeout)"
grep -h "re-sent the push of clock" "$dir"/worker*.log || true
[ "$digest2" = "$digest1" ] ||
  fail "params_digest $digest2 after the failovers is not the undisturbed run's $digest1"
echo "ok: $job2 SUCCEEDED with params_digest $digest2, bit-identical to the undisturbed run"
echo "PASS"
