#!/usr/bin/env bash
# Issue 14 (d): the scheduler partitioned from everyone for longer than the heartbeat timeout.
# 6 hosts (scheduler, 3 servers, 2 workers; heartbeat every 500 ms, dead after HB_TIMEOUT=3s).
# A sync Fashion-MNIST job (a checkpoint every CHECKPOINT_EVERY=50 steps); at clock 100 the scheduler's switch
# port goes down for PARTITION_S (default 6) seconds, then comes back. Checked:
#   - training goes on meanwhile: the workers' clocks (their logs) advance during the partition;
#   - after the heal no node is (or stays) declared dead: within 10 s every one of the 5
#     original nodes has heartbeated again and is ALIVE under its original node id (none had
#     to register again), and the job has no dead-node event;
#   - the job SUCCEEDS with a sane accuracy (no rollback needed).
# Prints a timeline with what the scheduler logged meanwhile.
# Usage: tests/netns/partition_scheduler_test.sh BUILD_DIR     (needs root; 77 otherwise)
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh" ps_netns_partition_scheduler
netns_require
source "$here/cluster.sh"
partition_s=${PARTITION_S:-6}
HB_TIMEOUT=${HB_TIMEOUT:-3s}

netns_hosts sched s0 s1 s2 w0 w1
start_scheduler sched
for i in 0 1 2; do start_server "s$i" "server$i"; done
for i in 0 1; do start_worker "w$i" "worker$i"; done
wait_alive 5
mark "5 nodes alive"
nodes_before=$(json nodes "' '.join(sorted(n['nodeId'] for n in d['nodes'] if n.get('state') == 'ALIVE'))")

ckpt=${CHECKPOINT_EVERY:-50}  # 0: no checkpoints (rank 0 asks the scheduler for each one)
spec=$(job_spec partition-scheduler 6 'consistency { mode: SYNC }' "checkpoint { every_steps: $ckpt }")
job=$(psctl submit "$spec")
mark "submitted $job"
wait_job_clock "$job" 100 120
host_cut sched
cut_at=$(now_ms)
c1=$(worker_clock worker0)
mark_t "$cut_at" "CUT: the scheduler's host isolated (heartbeat timeout $HB_TIMEOUT) at worker0 clock $c1"
half=$((partition_s * 1000 / 2))
sleep "$(awk -v m="$half" 'BEGIN{print m/1000}')"
mark "during the partition: worker0 clock $(worker_clock worker0)"
sleep "$(awk -v m="$((partition_s * 1000 - half))" 'BEGIN{print m/1000}')"
c2=$(worker_clock worker0)
host_heal sched
heal_at=$(now_ms)
mark_t "$heal_at" "HEALED after ${partition_s}s: worker0 clock $c1 -> $c2 during the partition"
all_back() {  # the original nodes ALIVE, each heard since the heal
  [ "$(json nodes "' '.join(sorted(n['nodeId'] for n in d['nodes'] if n.get('state') == 'ALIVE' and int(n.get('lastHeartbeatUnixMs', 0)) >= $heal_at))")" = "$nodes_before" ]
}
back=1
if poll_until 10 all_back; then
  mark "every original node heard again, ALIVE under its id ($nodes_before)"
else
  back=0
  mark "NOT every original node alive under its id 10 s after the heal: $(psctl nodes | tr '\n' ';' | cut -c1-400)"
fi
state=$(wait_job_end "$job" 300)
mark "$job ended $state at clock $(clock_of "$job")"
job_events "$job" | while IFS=$'\t' read -r t m; do mark_at "$t" "event: $m"; done
log_marks "$dir/scheduler.log" "$cut_at" "scheduler log: " "dead|regist|fail|restor|shard"
for w in worker0 worker1; do
  log_marks "$dir/$w.log" "$cut_at" "$w log: " "^[EW][0-9]"
done
for s in server0 server1 server2; do
  log_marks "$dir/$s.log" "$cut_at" "$s log: " "^[EW][0-9]"
done
timeline
[ -n "$c1" ] && [ -n "$c2" ] && [ "$c2" -gt "$c1" ] ||
  fail "training did not go on during the partition (worker0 clock '$c1' -> '$c2')"
[ $back = 1 ] || fail "after the heal, not every original node is alive under its id"
job_events "$job" | grep -qiE "dead|died" &&
  fail "a node of $job was declared dead because the scheduler was partitioned"
[ "$state" = SUCCEEDED ] || fail "$job ended $state: $(status_field "$job" "d.get('reason','')")"
acc=$(accuracy_of "$job")
python3 -c "import sys; sys.exit(not $acc >= 80)" || fail "test accuracy $acc% < 80%"
echo "PASS: training went on during the ${partition_s}s partition (clock $c1 -> $c2); nobody" \
  "declared dead; $job SUCCEEDED (test accuracy $acc%)"
