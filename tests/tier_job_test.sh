#!/usr/bin/env bash
# The click-through-rate program job (deploy/jobs/ctr_torch.textproto, sync, with --digest) on a
# cluster of 3 servers (started with --tier_roots) and 2 worker daemons on loopback:
#  1. plain: as it is; its peak rows of ctr_emb per server (psctl tables, polled) give the cap
#     R, a tenth of them;
#  2. tiered: its sparse tables (ctr_wide, ctr_emb) with eviction { max_rows: R } and
#     tier { disk: true }: it SUCCEEDS with an AUC and a params_digest (a hash of the rows the
#     held-out set reads and of the MLP) equal to the plain run's, bit for bit; no server held
#     more than R (+ slack) rows of a sparse table in RAM while it ran, and rows went to disk,
#     were written back and read back (psctl tables);
#  3. killed: the tiered job with a checkpoint every 20 steps; one of its servers SIGKILLed
#     after the first checkpoint, while the job is RUNNING (checked with the server stopped):
#     the job recovers from it (the spare takes the dead server's slots, disk rows included) and SUCCEEDS with the plain run's AUC and digest.
# Prints each run's AUC, digest, peak rows (RAM and disk) per table and server, psctl tables
# once, and the servers' peak VmRSS (not asserted). The tier directories go with the test's
# temp dir.
# Usage: tier_job_test.sh BUILD_DIR
# CTR_STEPS, CTR_BATCH: each run's size (default 100 x 1024; the job file's is 400 x 1024).
# TIER_SERVER_FLAGS: more ps_server flags, split on spaces (e.g. "--tier_block_cache_mb=1
# --tier_write_buffer_mb=1": the tier's fixed memory lowered, to see the servers' RSS).
set -euo pipefail
steps=${CTR_STEPS:-100} batch=${CTR_BATCH:-1024}
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
sched_bin=$build/scheduler/ps_scheduler server_bin=$build/server/ps_server
worker_bin=$build/worker/ps_worker psctl_bin=$build/tools/psctl
[ -d "$build/python/paramserver" ] || { echo "SKIP: no paramserver Python package built"; exit 77; }
/usr/bin/python3 -c "import numpy, torch" 2>/dev/null ||
  { echo "SKIP: /usr/bin/python3 lacks numpy or torch"; exit 77; }
source "$(dirname "$0")/lib/daemons.sh" ps_tier_job
# The tier's memory and reserve flags out of range: refused at start-up (exit 2), naming the flag.
for bad in --tier_block_cache_mb=0 --tier_write_buffer_mb=4097 --tier_min_free_mb=-1; do
  rc=0
  out=$("$server_bin" --listen=127.0.0.1:0 "$bad" 2>&1) || rc=$?
  [ "$rc" = 2 ] && grep -q -- "${bad%%=*} must be in" <<<"$out" ||
    fail "ps_server $bad: exit $rc, not refused naming the flag: $out"
done
sched=127.0.0.1:$(free_port)
psctl() { "$psctl_bin" --scheduler="$sched" "$@"; }
"$sched_bin" --listen="$sched" --state_dir="$dir/state" --checkpoint_root="$dir/checkpoints" \
  --heartbeat_interval=500ms --heartbeat_timeout=2s >"$dir/scheduler.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do psctl list >/dev/null 2>&1 && break; sleep 0.1; done
mkdir -p "$dir/tier"
server_pids=()
for i in 0 1 2; do
  "$server_bin" --listen=127.0.0.1:0 --scheduler="$sched" --checkpoint_roots="$dir/checkpoints" \
    --tier_roots="$dir/tier" ${TIER_SERVER_FLAGS:-} >"$dir/server$i.log" 2>&1 &
  pids+=($!) server_pids+=($!)
done
for i in 0 1; do
  "$worker_bin" --scheduler="$sched" --work_dir="$dir/w" --rpc_timeout=60s --recovery_wait=60s \
    >"$dir/worker$i.log" 2>&1 &
  pids+=($!)
done
source "$(dirname "$0")/lib/jobs.sh"  # wait_nodes, json, wait_done, ...
wait_nodes 5
sed -e "s#working_dir: \".\"#working_dir: \"$repo\"#" \
  -e "s#value: \"build/python\"#value: \"$build/python\"#" \
  -e "s#\"--steps=400\"#\"--steps=$steps\"#" \
  -e "s#\"--batch=1024\"#\"--batch=$batch\", \"--digest\"#" \
  "$repo/deploy/jobs/ctr_torch.textproto" >"$dir/plain.textproto"
grep -q -- "--steps=$steps" "$dir/plain.textproto" && grep -q -- '"--digest"' "$dir/plain.textproto" ||
  fail "the job file's argv changed: update this test"
grep -q "^consistency { mode: SYNC }" "$dir/plain.textproto" || fail "the job is not sync any more"
sparse='\(name: "ctr_\(wide\|emb\)"  kind: SPARSE  dim: [0-9]*\)'
grep -c "$sparse" "$dir/plain.textproto" | grep -qx 2 || fail "the sparse tables' lines changed"

# Per line "name server": over the polls, the median and the peak of RAM rows, the peak of RAM
# bytes, and the peaks of disk rows, disk bytes, rows written back, rows read back (disk_reads),
# RAM hits and disk lookups.
peaks() {
  python3 - "$1" <<'PY'
import json, statistics, sys
polls = {}
fields = ("bytes", "diskRows", "diskBytes", "writtenBack", "diskReads", "ramHits", "diskLookups")
for line in open(sys.argv[1]):
    try:
        rows = json.loads(line)
    except ValueError:
        continue
    for r in rows:
        if not r["name"].startswith("ctr_wide") and not r["name"].startswith("ctr_emb"):
            continue
        s = r["stats"]
        polls.setdefault((r["name"], r["server"]), []).append(
            (int(s.get("rows", 0)),) + tuple(int(s.get(f, 0)) for f in fields))
for (name, server), p in sorted(polls.items()):
    ram = [x[0] for x in p if x[0] > 0]
    print(name, server, int(statistics.median(ram or [0])), max(x[0] for x in p),
          *(max(x[i] for x in p) for i in range(1, len(fields) + 1)))
PY
}
rss_kb() {  # each live server's VmRSS in KiB, one line "index KiB" each
  local i
  for i in "${!server_pids[@]}"; do
    awk -v i="$i" '/^VmRSS/ {print i, $2}' "/proc/${server_pids[$i]}/status" 2>/dev/null || true
  done
}

# start NAME: submits $dir/NAME.textproto, sets job. follow NAME: polls psctl tables and the
# servers' RSS until the job ends; sets auc, digest.
start() {
  started=$(date +%s)
  job=$(psctl submit "$dir/$1.textproto")
  : >"$dir/$1.tables"
  : >"$dir/$1.text"
}
follow() {
  local name=$1 state
  : >"$dir/$name.rss"
  for _ in $(seq 1800); do
    state=$(json status "$job" "d.get('state','')")
    case "$state" in SUCCEEDED|FAILED|CANCELLED) break ;; esac
    psctl --output=json tables "$job" 2>/dev/null | tr -d '\n' >>"$dir/$name.tables" || true
    grep -q '"rows":"[1-9]' "$dir/$name.tables" && [ ! -s "$dir/$name.text" ] &&
      { psctl tables "$job" >"$dir/$name.text" 2>&1 || true; }
    echo >>"$dir/$name.tables"
    rss_kb >>"$dir/$name.rss"
    sleep 0.5
  done
  [ "$state" = SUCCEEDED ] || fail "$job ($name): $state: $(json status "$job" "d.get('reason','')")"
  auc=$(json status "$job" "repr(d['progress']['metrics']['auc'])")
  digest=$(json status "$job" "'%012x' % int(d['progress']['metrics']['params_digest'])")
  [ -n "$auc" ] && [ -n "$digest" ] || fail "$job ($name): no auc or params_digest reported"
  echo "== $name: $job SUCCEEDED in $(($(date +%s) - started)) s ($steps steps x $batch)," \
    "auc $auc, params_digest $digest; the servers' peak VmRSS (MiB):" \
    "$(awk '$2 > m[$1] {m[$1] = $2} END {for (i in m) printf " server%d %d", i, m[i] / 1024}' \
      "$dir/$name.rss"); per table and server (name server median-rows peak-rows peak-bytes," \
    "then peaks of disk-rows disk-bytes written-back read-back ram-hits disk-lookups):"
  peaks "$dir/$name.tables" | tee "$dir/$name.peaks"
  [ -s "$dir/$name.peaks" ] || fail "$name: psctl tables never answered while the job ran"
  echo "psctl tables $job, once during the run:"
  cat "$dir/$name.text" 2>/dev/null || true
}
same_as_plain() {  # same_as_plain NAME: the run's auc and digest are the plain run's
  [ "$auc" = "$auc_plain" ] || fail "$1: auc $auc is not the plain run's $auc_plain"
  [ "$digest" = "$digest_plain" ] ||
    fail "$1: params_digest $digest is not the plain run's $digest_plain"
  echo "ok: $1 auc $auc and params_digest $digest equal the plain run's"
}

start plain
follow plain
auc_plain=$auc digest_plain=$digest
max_rows=$(awk '$1 == "ctr_emb" && $4 > m {m = $4} END {print int(m / 10)}' "$dir/plain.peaks")
[ "$max_rows" -gt 0 ] || fail "no ctr_emb rows seen in the plain run"
sed -e "s#$sparse#\1  eviction { max_rows: $max_rows }  tier { disk: true }#" \
  "$dir/plain.textproto" >"$dir/tiered.textproto"
echo "tiered run: eviction { max_rows: $max_rows } tier { disk: true } (a tenth of the plain peak)"
start tiered
follow tiered
same_as_plain tiered
# A request's own keys stay in RAM until its batch of slots is done, then the table is trimmed
# back to the cap (docs/embedding-tables.md#disk-tier): a poll may see the new keys of the
# requests in flight on top of the cap. So: the median of the polls within 5% (+ 64 rows) of
# the cap, and the peak within the keys of two workers' batches (26 fields x the batch size).
awk -v cap="$max_rows" '$3 > cap + cap / 20 + 64 {print "median over the cap:", $0; bad = 1}
  END {exit bad}' "$dir/tiered.peaks" || fail "tiered: median RAM rows over max_rows $max_rows"
slack=$((2 * 26 * batch))
awk -v cap="$max_rows" -v slack="$slack" '$4 > cap + slack {print "over the cap:", $0; bad = 1}
  END {exit bad}' "$dir/tiered.peaks" || fail "tiered: RAM rows over max_rows $max_rows + $slack"
awk '$6 > 0 && $8 > 0 && $9 > 0 {n++} END {exit n < 4}' "$dir/tiered.peaks" ||
  fail "tiered: a sparse table on a server without rows on disk, written back and read back"
grep -q "DISK-ROWS" "$dir/tiered.text" || fail "tiered: psctl tables showed no DISK-ROWS column"
# The prefetch columns (ctr_torch.py prefetches each next batch): a count on every tiered row.
# (The last two columns; a codec column may hold a space.)
awk '$1 == "TABLE" { head = ($(NF - 1) == "PINNED" && $NF == "PF-SKIPPED") }
  $1 == "ctr_emb" { n++; if ($(NF - 1) !~ /^[0-9]+$/ || $NF !~ /^[0-9]+$/) bad = 1 }
  END { exit bad || n == 0 || !head }' "$dir/tiered.text" ||
  fail "tiered: psctl tables showed no PINNED / PF-SKIPPED counts"
echo "ok: tiered RAM rows at max_rows $max_rows (median; peak within + $slack for requests in" \
  "flight), rows on disk, written back and read back on every server"

sed -e "s#^checkpoint { every_steps: [0-9]* }#checkpoint { every_steps: 20 }#" \
  "$dir/tiered.textproto" >"$dir/killed.textproto"
grep -q "every_steps: 20 }" "$dir/killed.textproto" || fail "the job file's checkpoint line changed"
start killed
for _ in $(seq 1200); do  # after the first complete checkpoint
  [ "$(json status "$job" "d.get('latestCheckpointId','0')")" -ge 1 ] 2>/dev/null && break
  case "$(json status "$job" "d.get('state','')")" in SUCCEEDED|FAILED|CANCELLED) break ;; esac
  sleep 0.25
done
[ "$(json status "$job" "d.get('latestCheckpointId','0')")" -ge 1 ] 2>/dev/null ||
  fail "killed: no checkpoint before the job ended"
victim=$(json status "$job" "d['serverNodes'][1]")
pid=$(json nodes "[n['pid'] for n in d['nodes'] if n['nodeId'] == '$victim'][0]")
[ -n "$pid" ] || fail "no pid for server node $victim"
# The victim must die while the job runs: stopped first (a sync job cannot step on without
# it), then the job's state looked at, then killed. A job already over (a machine fast enough
# to finish between the checkpoint and this point) would make the recovery below meaningless:
# said so, and failed.
kill -STOP "$pid"
state=$(json status "$job" "d.get('state','')")
if [ "$state" != RUNNING ]; then
  kill -CONT "$pid"
  fail "killed: $job was already $state at clock $(clock_of "$job") when its server was to be" \
    "killed (after the checkpoint of step 20 of $steps): raise CTR_STEPS so the kill lands mid-job"
fi
kill -9 "$pid"
echo "killed server node $victim (pid $pid) at clock $(clock_of "$job") of $job"
follow killed
psctl events "$job" | tee "$dir/killed.events" | grep -E "dead|restor|recovered" || true
[ "$(json status "$job" "d.get('recoveries',0)")" -ge 1 ] || fail "killed: $job did not recover"
grep -q "from checkpoint" "$dir/killed.events" || fail "killed: not restored from a checkpoint"
same_as_plain killed
echo "PASS"
