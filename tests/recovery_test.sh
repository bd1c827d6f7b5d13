#!/usr/bin/env bash
# Checkpoints and recovery with real daemons on loopback:
#  1. an undisturbed sync Fashion-MNIST job (3 servers, 2 workers, a checkpoint every 150 steps);
#  2. the same job with one of its 3 servers SIGKILLed mid-job: it SUCCEEDS without anyone
#     touching it (the survivors take the dead server's slots, the job rolls back to the latest
#     checkpoint), its test accuracy within 1 point of run 1; the recovery time is printed;
#  3. a server SIGKILLed while a checkpoint is being written: that checkpoint FAILS, the
#     previous one stays the latest, the job recovers from it on a spare server and SUCCEEDS;
#  4. `psctl restore` of that ended job from a corrupted checkpoint: the corruption is detected,
#     the restore falls back to the previous complete checkpoint and the new job SUCCEEDS;
#  5. an async job losing one of its 2 servers: only the lost slots are restored, on a spare,
#     while the other server's rows and the workers' clocks go on; the job SUCCEEDS;
#  6. a sync job losing two of its 3 servers one second apart: it SUCCEEDS, training again
#     within 15 s of the second death's detection (workers restarting on the first new shard
#     map waited up to 30 s for the second dead server before they took the next map).
# Usage: recovery_test.sh BUILD_DIR     (HEARTBEAT_TIMEOUT=5s for the daemons' default)
set -euo pipefail
build=$(cd "$1" && pwd)
sched_bin=$build/scheduler/ps_scheduler server_bin=$build/server/ps_server
worker_bin=$build/worker/ps_worker psctl_bin=$build/tools/psctl
hb_timeout=${HEARTBEAT_TIMEOUT:-2s}
source "$(dirname "$0")/lib/daemons.sh" ps_recovery
sched=127.0.0.1:$(free_port)
psctl() { "$psctl_bin" --scheduler="$sched" "$@"; }
"$sched_bin" --listen="$sched" --state_dir="$dir/state" --checkpoint_root="$dir/checkpoints" \
  --heartbeat_interval=500ms --heartbeat_timeout="$hb_timeout" >"$dir/scheduler.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do psctl list >/dev/null 2>&1 && break; sleep 0.1; done
start_server() {  # start_server NAME [FLAGS...]; sets <NAME>_pid
  local name=$1
  shift
  "$server_bin" --listen=127.0.0.1:0 --scheduler="$sched" --checkpoint_roots="$dir/checkpoints" \
    "$@" >"$dir/$name.log" 2>&1 &
  pids+=($!)
  eval "${name}_pid=$!"
}
source "$(dirname "$0")/lib/jobs.sh"  # wait_nodes, json, clock_of, wait_clock, wait_done, ...
checkpoint_state() {  # checkpoint_state JOB ID
  json checkpoints "$1" \
    "[c.get('state') for c in d.get('checkpoints', []) if c['checkpointId'] == '$2'][0]"
}

for i in 0 1 2; do start_server server$i; done
for i in 0 1; do
  "$worker_bin" --scheduler="$sched" --rpc_timeout=60s --recovery_wait=60s \
    >"$dir/worker$i.log" 2>&1 &
  pids+=($!)
done
wait_nodes 5
spec="$dir/job.textproto"
cat >"$spec" <<'SPEC'
name: "recovery-test"
model: "fashion_mlp"
num_workers: 2
num_servers: 3
epochs: 2
seed: 7
consistency { mode: SYNC }
checkpoint { every_steps: 150 }
SPEC

echo "== 1. undisturbed run"
job1=$(psctl submit "$spec")
[ "$(wait_done "$job1")" = SUCCEEDED ] || fail "$job1 did not succeed"
acc1=$(accuracy_of "$job1")
psctl checkpoints "$job1"
echo "ok: $job1 test accuracy $acc1%"

echo "== 2. one of the job's 3 servers SIGKILLed mid-job (no spare: the survivors take over)"
job2=$(psctl submit "$spec")
wait_clock "$job2" 400
[ "$(json status "$job2" "d.get('latestCheckpointId','0')")" -ge 1 ] || fail "no checkpoint yet"
kill -9 "$server1_pid"
killed_at=$(date +%s.%N)
echo "killed server1 at clock $(clock_of "$job2")"
for _ in $(seq 600); do
  [ "$(json status "$job2" "d.get('recoveries',0)")" -ge 1 ] && break
  sleep 0.25
done
trained_at=$(date +%s.%N)
[ "$(json status "$job2" "d.get('recoveries',0)")" -ge 1 ] || fail "$job2 did not recover"
state=$(wait_done "$job2")
psctl events "$job2" | tee "$dir/events2.txt" | grep -E "dead|restor|recovered|checkpoint" || true
[ "$state" = SUCCEEDED ] || fail "$job2 ended $state after a server died"
acc2=$(accuracy_of "$job2")
grep -q "slots move to the 2 surviving servers" "$dir/events2.txt" || fail "no slot move event"
recovered=$(sed -n 's/.*recovered: training again at clock [0-9]*, \([0-9.]*\) s after.*/\1/p' \
  "$dir/events2.txt")
echo "recovery: detection to training again ${recovered} s; SIGKILL to the scheduler seeing" \
  "training again $(python3 -c "print(round($trained_at - $killed_at, 1))") s" \
  "(heartbeat timeout $hb_timeout)"
python3 -c "import sys; sys.exit(abs($acc1 - $acc2) > 1.0)" ||
  fail "test accuracy $acc2% is more than 1 point from the undisturbed $acc1%"
echo "ok: $job2 SUCCEEDED with test accuracy $acc2% (undisturbed: $acc1%)"

echo "== 3. a server SIGKILLed while a checkpoint is written"
start_server slow --checkpoint_write_delay=5s  # its writes take 5 s: a window to kill it in
wait_nodes 5
cat >"$dir/job3.textproto" <<'SPEC'
name: "kill-during-checkpoint"
model: "fashion_mlp"
num_workers: 2
num_servers: 3
epochs: 6
seed: 7
consistency { mode: SYNC }
SPEC
job3=$(psctl submit "$dir/job3.textproto")
start_server spare  # registered after the job started: a spare
wait_nodes 6
wait_clock "$job3" 20
psctl checkpoint "$job3" || fail "checkpoint 1 of $job3 failed"
psctl checkpoint "$job3" --wait=false
# The slow server logs when it holds checkpoint 2's copy and waits to write it: kill it then.
for _ in $(seq 600); do
  grep -q "checkpoint 2 of job $job3: write delayed" "$dir/slow.log" && break
  sleep 0.05
done
grep -q "checkpoint 2 of job $job3: write delayed" "$dir/slow.log" ||
  fail "the slow server did not start writing checkpoint 2"
kill -9 "$slow_pid"
echo "killed the slow server while checkpoint 2 was written"
for _ in $(seq 200); do
  [ "$(checkpoint_state "$job3" 2)" = CHECKPOINT_FAILED ] && break
  sleep 0.25
done
[ "$(checkpoint_state "$job3" 2)" = CHECKPOINT_FAILED ] || fail "checkpoint 2 did not fail"
[ "$(json status "$job3" "d.get('latestCheckpointId')")" = 1 ] || fail "checkpoint 1 not latest"
for _ in $(seq 600); do
  [ "$(json status "$job3" "d.get('recoveries',0)")" -ge 1 ] && break
  sleep 0.25
done
psctl checkpoint "$job3" || fail "checkpoint after the recovery failed"
state=$(wait_done "$job3")
psctl events "$job3" | tee "$dir/events3.txt" | grep -E "dead|restor|recovered|checkpoint" || true
[ "$state" = SUCCEEDED ] || fail "$job3 ended $state"
grep -q "spare server node" "$dir/events3.txt" || fail "the spare did not take the slots"
grep -q "from checkpoint 1 (clock" "$dir/events3.txt" || fail "not restored from checkpoint 1"
psctl checkpoints "$job3"
echo "ok: checkpoint 2 failed, checkpoint 1 stayed the latest and was restored; $job3 SUCCEEDED"

echo "== 4. restore from a corrupt checkpoint falls back to the previous one"
latest=$(json status "$job3" "d.get('latestCheckpointId')")
[ "$latest" -ge 3 ] || fail "expected a checkpoint after the recovery"
ckdir=$(json checkpoints "$job3" \
  "[c['dir'] for c in d['checkpoints'] if c['checkpointId'] == '$latest'][0]")
sst=$(find "$ckdir" -name '*.sst' -size +8k | head -1)
[ -n "$sst" ] || fail "no table file in $ckdir"
size=$(stat -c %s "$sst")
dd if=/dev/urandom of="$sst" bs=1 seek=$((size / 2)) count=4096 conv=notrunc status=none
echo "corrupted 4 KiB of $sst"
job4=$(psctl restore "$job3" 2>/dev/null | head -1)
[ -n "$job4" ] && [ "$job4" != "$job3" ] || fail "psctl restore did not submit a new job"
state=$(wait_done "$job4")
psctl events "$job4" | tee "$dir/events4.txt" | grep -E "corrupt|restor|checkpoint" || true
[ "$state" = SUCCEEDED ] || fail "$job4 ended $state"
grep -q "checkpoint $latest is corrupt" "$dir/events4.txt" || fail "corruption not reported"
grep -q "falling back to checkpoint 1" "$dir/events4.txt" || fail "no fallback to checkpoint 1"
[ "$(checkpoint_state "$job3" "$latest")" = CHECKPOINT_CORRUPT ] || fail "not marked corrupt"
echo "ok: checkpoint $latest found corrupt; $job4 started from checkpoint 1 and SUCCEEDED" \
  "(test accuracy $(accuracy_of "$job4")%)"
echo "== 5. an async job loses a server: only its slots are restored, on a spare"
job5=$(psctl submit "$spec" --name=async-recovery --consistency=async --num_servers=2 \
  --epochs=4)
wait_clock "$job5" 0
victim=$(json status "$job5" "d['serverNodes'][1]")
pid=$(json nodes "[n['pid'] for n in d['nodes'] if n['nodeId'] == '$victim'][0]")
[ -n "$pid" ] || fail "no pid for server node $victim"
for _ in $(seq 600); do  # after the first checkpoint (every 150 steps) is complete
  [ "$(json status "$job5" "d.get('latestCheckpointId','0')")" -ge 1 ] && break
  sleep 0.25
done
kill -9 "$pid"
echo "killed server node $victim (pid $pid) at clock $(clock_of "$job5")"
state=$(wait_done "$job5")
psctl events "$job5" | tee "$dir/events5.txt" | grep -E "dead|restor|recovered" || true
[ "$state" = SUCCEEDED ] || fail "$job5 ended $state"
grep -q "restoring [0-9]* slots, from checkpoint" "$dir/events5.txt" ||
  fail "not a restore of the lost slots only"
grep -q "recovered: training again" "$dir/events5.txt" || fail "no recovery recorded"
acc5=$(accuracy_of "$job5")
python3 -c "import sys; sys.exit($acc5 < 80)" || fail "async job's test accuracy $acc5% < 80%"
echo "ok: $job5 SUCCEEDED with test accuracy $acc5%"

echo "== 6. a sync job loses two of its 3 servers one second apart"
alive=$(psctl nodes | grep -c ALIVE)
for i in 0 1 2; do start_server double$i; done
wait_nodes $((alive + 3))
job6=$(psctl submit "$spec" --name=double-failure --epochs=3)
wait_clock "$job6" 0
for _ in $(seq 600); do  # after the first checkpoint (every 150 steps) is complete
  [ "$(json status "$job6" "d.get('latestCheckpointId','0')")" -ge 1 ] && break
  sleep 0.25
done
victims=()
for k in 1 2; do
  node=$(json status "$job6" "d['serverNodes'][$k]")
  victims+=("$(json nodes "[n['pid'] for n in d['nodes'] if n['nodeId'] == '$node'][0]")")
done
[ -n "${victims[0]}" ] && [ -n "${victims[1]}" ] || fail "no pids for $job6's servers"
kill -9 "${victims[0]}"
sleep 1
kill -9 "${victims[1]}"
echo "killed two of $job6's servers (pids ${victims[*]}) one second apart"
state=$(wait_done "$job6")
psctl events "$job6" | tee "$dir/events6.txt" | grep -E "dead|restor|recovered" || true
[ "$state" = SUCCEEDED ] || fail "$job6 ended $state after two servers died"
last=$(sed -n 's/.*recovered: training again at clock [0-9]*, \([0-9.]*\) s after.*/\1/p' \
  "$dir/events6.txt" | tail -1)
[ -n "$last" ] || fail "no recovery recorded for $job6"
python3 -c "import sys; sys.exit(float('$last') > 15)" ||
  fail "training again only $last s after the second server's death was detected (bound 15 s)"
echo "ok: $job6 SUCCEEDED; training again $last s after the second death was detected"
echo PASS
