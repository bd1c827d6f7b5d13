#!/usr/bin/env bash
# The click-through-rate program job (deploy/jobs/ctr_torch.textproto, sync) three times on a
# cluster of 2 servers and 2 worker daemons on loopback: as it is, with admission and a cap on
# its sparse tables (ctr_wide, ctr_emb: admission { min_count: 2 } and eviction { max_rows: N },
# N a quarter of the most rows a server held for ctr_emb in the first run: admission alone
# keeps about 43% of them at 150 steps, so a cap of half would evict nothing), and with FP16
# storage on them. Each must SUCCEED; the capped AUC within 0.005 of the first, the FP16 AUC within 0.002;
# in the capped run no server holds more than N (+ slack) rows of a sparse table (psctl tables,
# polled while it runs) and rows were evicted and pushes rejected. Prints each run's AUC, its
# peak rows per sparse table and server, and the servers' peak VmRSS.
# Usage: ctr_embedding_test.sh BUILD_DIR
# CTR_STEPS, CTR_BATCH: each run's size (default 150 x 1024; the job file's is 400 x 1024).
set -euo pipefail
steps=${CTR_STEPS:-150} batch=${CTR_BATCH:-1024}
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
sched_bin=$build/scheduler/ps_scheduler server_bin=$build/server/ps_server
worker_bin=$build/worker/ps_worker psctl_bin=$build/tools/psctl
[ -d "$build/python/paramserver" ] || { echo "SKIP: no paramserver Python package built"; exit 77; }
/usr/bin/python3 -c "import numpy, torch" 2>/dev/null ||
  { echo "SKIP: /usr/bin/python3 lacks numpy or torch"; exit 77; }
source "$(dirname "$0")/lib/daemons.sh" ps_ctr_emb
sched=127.0.0.1:$(free_port)
psctl() { "$psctl_bin" --scheduler="$sched" "$@"; }
"$sched_bin" --listen="$sched" --state_dir="$dir/state" --checkpoint_root="$dir/checkpoints" \
  >"$dir/scheduler.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do psctl list >/dev/null 2>&1 && break; sleep 0.1; done
server_pids=()
for i in 0 1; do
  "$server_bin" --listen=127.0.0.1:0 --scheduler="$sched" --checkpoint_roots="$dir/checkpoints" \
    >"$dir/server$i.log" 2>&1 &
  pids+=($!) server_pids+=($!)
  "$worker_bin" --scheduler="$sched" --work_dir="$dir/w" >"$dir/worker$i.log" 2>&1 &
  pids+=($!)
done
source "$(dirname "$0")/lib/jobs.sh"  # wait_nodes, json, ...
wait_nodes 4
sed -e "s#working_dir: \".\"#working_dir: \"$repo\"#" \
  -e "s#value: \"build/python\"#value: \"$build/python\"#" \
  -e "s#\"--steps=400\"#\"--steps=$steps\"#" -e "s#\"--batch=1024\"#\"--batch=$batch\"#" \
  "$repo/deploy/jobs/ctr_torch.textproto" >"$dir/plain.textproto"
grep -q -- "--steps=$steps" "$dir/plain.textproto" || fail "the job file's argv changed: update this test"
sparse='\(name: "ctr_\(wide\|emb\)"  kind: SPARSE  dim: [0-9]*\)'
grep -c "$sparse" "$dir/plain.textproto" | grep -qx 2 || fail "the sparse tables' lines changed"

# Peak over the polls, per line "name server": rows, evicted, rejected; and the servers' VmRSS.
peaks() {
  python3 - "$1" <<'PY'
import json, sys
peak = {}
for line in open(sys.argv[1]):
    try:
        rows = json.loads(line)
    except ValueError:
        continue
    for r in rows:
        if not r["name"].startswith("ctr_wide") and not r["name"].startswith("ctr_emb"):
            continue
        s = r["stats"]
        k = (r["name"], r["server"])
        old = peak.get(k, (0, 0, 0, 0))
        now = (int(s["rows"]), int(s["evicted"]), int(s["rejected"]), int(s["bytes"]))
        peak[k] = tuple(max(a, b) for a, b in zip(old, now))
for (name, server), (rows, evicted, rejected, nbytes) in sorted(peak.items()):
    print(name, server, rows, evicted, rejected, round(nbytes / max(rows, 1), 1))
PY
}
rss_kb() {  # the servers' VmRSS together, in KiB
  local p files=()
  for p in "${server_pids[@]}"; do files+=("/proc/$p/status"); done
  awk '/^VmRSS/ {s += $2} END {print s + 0}' "${files[@]}" 2>/dev/null || echo 0
}

# run NAME: runs $dir/NAME.textproto to its end, polling psctl tables; sets auc.
run() {
  local name=$1 start job state rss=0 r
  : >"$dir/$name.text"
  start=$(date +%s)
  job=$(psctl submit "$dir/$name.textproto")
  : >"$dir/$name.tables"
  for _ in $(seq 1800); do
    state=$(json status "$job" "d.get('state','')")
    case "$state" in SUCCEEDED|FAILED|CANCELLED) break ;; esac
    psctl --output=json tables "$job" 2>/dev/null | tr -d '\n' >>"$dir/$name.tables" || true
    # One text answer, once the sparse tables have rows, to show what psctl tables prints.
    grep -q '"rows":"[1-9]' "$dir/$name.tables" && [ ! -s "$dir/$name.text" ] &&
      { psctl tables "$job" >"$dir/$name.text" 2>&1 || true; }
    echo >>"$dir/$name.tables"
    r=$(rss_kb) && [ "$r" -gt "$rss" ] && rss=$r
    sleep 0.5
  done
  [ "$state" = SUCCEEDED ] || fail "$job ($name): $state: $(json status "$job" "d.get('reason','')")"
  auc=$(json status "$job" "d['progress']['metrics']['auc']")
  echo "== $name: $job SUCCEEDED in $(($(date +%s) - start)) s ($steps steps x $batch), auc $auc," \
    "servers' peak VmRSS (both) $((rss / 1024)) MiB; peak per table and server" \
    "(name server rows evicted rejected bytes/row):"
  peaks "$dir/$name.tables" | tee "$dir/$name.peaks"
  echo "psctl tables $job, once during the run:"
  cat "$dir/$name.text" 2>/dev/null || true
  grep -q "BYTES/ROW" "$dir/$name.text" 2>/dev/null || fail "$name: psctl tables printed no table"
  [ -s "$dir/$name.peaks" ] || fail "$name: psctl tables never answered while the job ran"
}

run plain
auc_plain=$auc
max_rows=$(awk '$1 == "ctr_emb" && $3 > m {m = $3} END {print int(m / 4)}' "$dir/plain.peaks")
[ "$max_rows" -gt 0 ] || fail "no ctr_emb rows seen in the plain run"
sed -e "s#$sparse#\1  admission { min_count: 2 }  eviction { max_rows: $max_rows }#" \
  "$dir/plain.textproto" >"$dir/capped.textproto"
sed -e "s#$sparse#\1  storage: FP16#" "$dir/plain.textproto" >"$dir/fp16.textproto"
echo "capped run: admission { min_count: 2 } eviction { max_rows: $max_rows } (a quarter of the plain peak)"
run capped
auc_capped=$auc
run fp16
auc_fp16=$auc

# The cap is checked per slot on insert against a relaxed count of the table's rows, so threads
# inserting into different slots at once may each pass it: allow 1% + 64 rows over the cap.
slack=$((max_rows / 100 + 64))
awk -v cap="$max_rows" -v slack="$slack" '$3 > cap + slack {print "over the cap:", $0; bad = 1}
  END {exit bad}' "$dir/capped.peaks" || fail "capped: rows over max_rows $max_rows + $slack"
awk '$4 > 0 {e = 1} $5 > 0 {r = 1} END {exit !(e && r)}' "$dir/capped.peaks" ||
  fail "capped: no rows evicted or no pushes rejected"
check() {  # check NAME AUC BOUND
  python3 -c "import sys; sys.exit(0 if abs($2 - $auc_plain) <= $3 else 1)" ||
    fail "$1: auc $2 is not within $3 of the plain run's $auc_plain"
  echo "ok: $1 auc $2 within $3 of the plain run's $auc_plain"
}
check capped "$auc_capped" 0.005
check fp16 "$auc_fp16" 0.002
echo "PASS"
