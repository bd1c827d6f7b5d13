#!/usr/bin/env bash
# The click-through-rate program job (examples/python/ctr_torch.py --session, via
# deploy/jobs/ctr_torch.textproto) on a cluster of 2 servers and 2 worker daemons on loopback,
# in sync and in async mode: each SUCCEEDS with a held-out AUC within 0.02 (sync) / 0.03
# (async) of the teacher's (the best any model can reach on the data), as its program reported
# them (psctl status: auc, teacher_auc); samples/s, keys pulled per second and the
# communication share are printed.
# Usage: ctr_program_test.sh BUILD_DIR
# The benchmark size (docs/benchmarks.md), about 2.4 million rows per sparse table:
#   CTR_STEPS=1000 CTR_BATCH=4096 CTR_MODES=sync tests/ctr_program_test.sh build
set -euo pipefail
steps=${CTR_STEPS:-400} batch=${CTR_BATCH:-1024} modes=${CTR_MODES:-sync async}
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
sched_bin=$build/scheduler/ps_scheduler server_bin=$build/server/ps_server
worker_bin=$build/worker/ps_worker psctl_bin=$build/tools/psctl
[ -d "$build/python/paramserver" ] || { echo "SKIP: no paramserver Python package built"; exit 77; }
/usr/bin/python3 -c "import numpy, torch" 2>/dev/null ||
  { echo "SKIP: /usr/bin/python3 lacks numpy or torch"; exit 77; }
source "$(dirname "$0")/lib/daemons.sh" ps_ctr
sched=127.0.0.1:$(free_port)
psctl() { "$psctl_bin" --scheduler="$sched" "$@"; }
"$sched_bin" --listen="$sched" --state_dir="$dir/state" --checkpoint_root="$dir/checkpoints" \
  >"$dir/scheduler.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do psctl list >/dev/null 2>&1 && break; sleep 0.1; done
for i in 0 1; do
  "$server_bin" --listen=127.0.0.1:0 --scheduler="$sched" --checkpoint_roots="$dir/checkpoints" \
    >"$dir/server$i.log" 2>&1 &
  pids+=($!)
  "$worker_bin" --scheduler="$sched" --work_dir="$dir/w" >"$dir/worker$i.log" 2>&1 &
  pids+=($!)
done
source "$(dirname "$0")/lib/jobs.sh"  # wait_nodes, json, wait_done, ...
wait_nodes 4
sed -e "s#working_dir: \".\"#working_dir: \"$repo\"#" \
  -e "s#value: \"build/python\"#value: \"$build/python\"#" \
  -e "s#\"--steps=400\"#\"--steps=$steps\"#" -e "s#\"--batch=1024\"#\"--batch=$batch\"#" \
  "$repo/deploy/jobs/ctr_torch.textproto" >"$dir/ctr.textproto"
grep -q -- "--steps=$steps" "$dir/ctr.textproto" || fail "the job file's argv changed: update this test"

for mode in $modes; do
  echo "== $mode"
  start=$(date +%s)
  job=$(psctl submit "$dir/ctr.textproto" --consistency="$mode")
  state=$(wait_done "$job")
  [ "$state" = SUCCEEDED ] || fail "$job ($mode): $state: $(json status "$job" "d.get('reason','')")"
  metric() { json status "$job" "d['progress']['metrics']['$1']"; }
  auc=$(metric auc) teacher=$(metric teacher_auc)
  echo "$job ($mode, $steps steps x $batch) in $(($(date +%s) - start)) s: auc $auc teacher_auc" \
    "$teacher; rank 0: $(json status "$job" "round(d['progress']['samplesPerSecond'])")" \
    "samples/s, $(json status "$job" "round(d['progress']['metrics']['keys_pulled_per_s'])")" \
    "keys pulled/s, $(json status "$job" \
      "round(100 * d['progress']['metrics']['communication_share'])")% of its time waiting" \
    "on the servers"
  bound=0.02
  [ "$mode" = async ] && bound=0.03
  python3 -c "import sys; sys.exit(0 if $teacher - $auc <= $bound else 1)" ||
    fail "$job ($mode): auc $auc is not within $bound of the teacher's $teacher"
  echo "ok: $mode within $bound of the teacher"
done
echo "PASS"
