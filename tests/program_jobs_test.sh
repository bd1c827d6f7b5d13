#!/usr/bin/env bash
# Program jobs with real daemons on loopback (a scheduler, 3 servers, 3 worker daemons):
#  1. bad job files are refused at submit with a clear message (no model and no program,
#     duplicate table names, dim 0, a relative argv[0]);
#  2. bad programs end in FAILED with a reason that says why, and no daemon dies: a program
#     that does not exist, is not executable, exits at once, exits 3 (restarted once first), is killed by
#     SIGSEGV, hangs without reporting (progress_timeout), reports a NaN loss, uses a table
#     its job did not declare, or asks for batches in a job of STATIC data assignment; one that
#     floods stderr succeeds with its log capped;
#  3. psctl cancel stops a job's programs (SIGTERM, then SIGKILL after the grace);
#  3a. psctl tables of a job with a compressed table (topk pushes, fp16 pulls) and a plain one
#     shows each server's achieved ratio per direction (> 2 for topk, 2.00 for fp16) and
#     "none" for the plain table; psctl status one line for the compressed table, summed;
#  3b. a job of dynamic data assignment: its programs (one slowed, one crashing once) read
#     every example once per epoch through session.batches, the fast one more;
#  4. a worker daemon SIGKILLed takes its program with it; the job goes on on the spare worker
#     and succeeds (and the checkpoint its program asked for is complete);
#  5. the PyTorch Fashion-MNIST program (examples/python/fashion_torch.py, 5 epochs) via psctl submit
#     reaches 85% test accuracy; psctl status --watch shows its progress, psctl logs its output;
#  6. the same job with one of its servers SIGKILLed mid-way: it succeeds without anyone
#     touching it, within 1 point of run 5;
#  7. examples/cpp/train_logreg.cc built against the installed client library, run as a
#     program job (ps::Session) by 2 workers: it succeeds (its held-out accuracy within 0.05
#     of the teacher's, else it exits 1).
# Usage: program_jobs_test.sh BUILD_DIR
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
sched_bin=$build/scheduler/ps_scheduler server_bin=$build/server/ps_server
worker_bin=$build/worker/ps_worker psctl_bin=$build/tools/psctl
[ -d "$build/python/paramserver" ] || { echo "SKIP: no paramserver Python package built"; exit 77; }
/usr/bin/python3 -c "import numpy, torch" 2>/dev/null ||
  { echo "SKIP: /usr/bin/python3 lacks numpy or torch"; exit 77; }
source "$(dirname "$0")/lib/daemons.sh" ps_program
sched=127.0.0.1:$(free_port)
psctl() { "$psctl_bin" --scheduler="$sched" "$@"; }
"$sched_bin" --listen="$sched" --state_dir="$dir/state" --checkpoint_root="$dir/checkpoints" \
  --heartbeat_interval=500ms --heartbeat_timeout=2s >"$dir/scheduler.log" 2>&1 &
pids+=($!)
sched_pid=$!
for _ in $(seq 100); do psctl list >/dev/null 2>&1 && break; sleep 0.1; done
server_pids=()
for i in 0 1 2; do
  "$server_bin" --listen=127.0.0.1:0 --scheduler="$sched" --checkpoint_roots="$dir/checkpoints" \
    >"$dir/server$i.log" 2>&1 &
  pids+=($!)
  server_pids+=($!)
done
worker_pids=()
for i in 0 1 2; do
  "$worker_bin" --scheduler="$sched" --work_dir="$dir/w" --max_log_bytes=1048576 \
    --recovery_wait=60s >"$dir/worker$i.log" 2>&1 &
  pids+=($!)
  worker_pids+=($!)
done
source "$(dirname "$0")/lib/jobs.sh"  # wait_nodes, json, clock_of, wait_clock, wait_done, ...
wait_nodes 6
reason_of() { json status "$1" "d.get('reason','')"; }
daemons_alive() {
  for p in "$sched_pid" "${server_pids[@]}" "${worker_pids[@]}"; do
    [ "$p" = dead ] || kill -0 "$p" 2>/dev/null || fail "daemon $p died"
  done
}
# probe_job FILE [ARGV ENTRIES...] [-- EXTRA SPEC LINES]: a 1-worker job of tests/programs/probe.py
probe_spec() {  # probe_spec FILE WORKERS ARGV_JSON [EXTRA_PROGRAM_LINES]
  cat >"$1" <<SPEC
name: "probe"
program {
  argv: $3
  working_dir: "$repo"
  env { key: "PYTHONPATH" value: "$build/python" }
  ${4:-}
}
tables { name: "w" kind: DENSE num_rows: 8 dim: 4 optimizer { kind: SGD learning_rate: 0.1 } }
num_workers: $2
num_servers: 2
consistency { mode: ASYNC }
SPEC
}
probe_argv() { echo "[\"/usr/bin/python3\", \"tests/programs/probe.py\"$(printf ', "%s"' "$@")]"; }

echo "== 1. bad job files are refused at submit"
refused() {  # refused NAME SPEC_TEXT EXPECTED_TEXT
  echo "$2" >"$dir/bad.textproto"
  if out=$(psctl submit "$dir/bad.textproto" 2>&1); then fail "$1: accepted ($out)"; fi
  grep -q -- "$3" <<<"$out" || fail "$1: '$out' does not say '$3'"
  echo "ok: $1: $out"
}
refused "no model, no program" 'num_workers: 1' "neither model nor program"
refused "duplicate tables" 'program { argv: "/bin/true" } num_workers: 1
  tables { name: "t" kind: SPARSE dim: 4 } tables { name: "t" kind: SPARSE dim: 8 }' \
  "another table has the name"
refused "dim 0" 'program { argv: "/bin/true" } num_workers: 1 tables { name: "t" kind: SPARSE }' \
  "dim = 0 must be in"
refused "relative argv[0]" 'program { argv: "bin/train" } num_workers: 1
  tables { name: "t" kind: SPARSE dim: 4 }' "must be an absolute path or a name"

echo "== 2. bad programs: each job FAILS with its reason; no daemon dies"
cp "$repo/tests/programs/probe.py" "$dir/not_executable.py"
chmod -x "$dir/not_executable.py"
declare -A expect
submit_probe() {  # submit_probe NAME EXPECTED ARGV_JSON [PROGRAM_LINES]
  probe_spec "$dir/$1.textproto" 1 "$3" "${4:-}"
  local job
  job=$(psctl submit "$dir/$1.textproto") || fail "$1: not submitted"
  expect[$job]="$1|$2"
}
submit_probe missing "does not exist" '["/nonexistent/train"]'
submit_probe not_executable "is not executable" "[\"$dir/not_executable.py\"]"
submit_probe exit3 "exited with status 3 \\(start 2\\).*giving up with status 3" \
  "$(probe_argv --mode=exit3)" "max_restarts: 1"
submit_probe exits_at_once "exited with status 1; it wrote nothing to stderr" '["/bin/false"]'
submit_probe crash "killed by signal 11" "$(probe_argv --mode=crash)"
submit_probe hang "reported no progress" "$(probe_argv --mode=hang)" \
  "progress_timeout_seconds: 3"
submit_probe nan "non-finite loss" "$(probe_argv --mode=nan)"
submit_probe undeclared "not declared by job" "$(probe_argv --mode=undeclared)"
submit_probe static_data "reads its data by STATIC assignment" "$(probe_argv --mode=data)"
submit_probe flood "" "$(probe_argv --mode=flood --flood_mb=3)"
for job in "${!expect[@]}"; do
  name=${expect[$job]%%|*} want=${expect[$job]#*|}
  state=$(wait_done "$job")
  reason=$(reason_of "$job")
  if [ -z "$want" ]; then
    [ "$state" = SUCCEEDED ] || fail "$name ($job): $state: $reason"
    log=$dir/w/$job/worker-0/program.log
    size=$(stat -c %s "$log") old=$(stat -c %s "$log.1" 2>/dev/null || echo 0)
    [ "$size" -le 1048576 ] && [ "$old" -le 1048576 ] && [ "$old" -gt 0 ] ||
      fail "flood: log $size bytes, $log.1 $old bytes (cap 1 MiB each)"
    echo "ok: $name ($job) SUCCEEDED; its 3 MiB of stderr capped: log $size + $old bytes"
  else
    [ "$state" = FAILED ] || fail "$name ($job): $state, not FAILED ($reason)"
    grep -Eq -- "$want" <<<"$reason" || fail "$name ($job): reason '$reason' lacks '$want'"
    echo "ok: $name ($job) FAILED: ${reason:0:160}"
  fi
done
daemons_alive
probe_spec "$dir/ok.textproto" 2 "$(probe_argv --mode=ok --steps=30)"
job=$(psctl submit "$dir/ok.textproto")
[ "$(wait_done "$job")" = SUCCEEDED ] || fail "a good program job after the bad ones: $(reason_of "$job")"
echo "ok: a good job after them SUCCEEDED; every daemon still runs"

# pid_of JOB WORKER: the pid its probe printed.
pid_of() {
  for _ in $(seq 100); do
    local p
    p=$(psctl logs "$1" --worker="$2" 2>/dev/null | sed -n 's/^probe pid \([0-9]*\).*/\1/p' | tail -1)
    [ -n "$p" ] && { echo "$p"; return 0; }
    sleep 0.1
  done
  fail "no probe pid for $1 worker $2"
}
gone() {  # gone PID SECONDS: the process ends within SECONDS
  for _ in $(seq $(($2 * 10))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  return 1
}

echo "== 3. psctl cancel stops the programs"
probe_spec "$dir/slow.textproto" 2 "$(probe_argv --mode=slow --steps=100000 --sleep=0.05)" \
  "stop_grace_seconds: 2"
job=$(psctl submit "$dir/slow.textproto")
wait_clock "$job" 5
p0=$(pid_of "$job" 0) p1=$(pid_of "$job" 1)
psctl cancel "$job" >/dev/null
gone "$p0" 5 && gone "$p1" 5 || fail "programs $p0 $p1 still run after cancel"
echo "ok: cancel stopped programs $p0 and $p1 ($(wait_done "$job"))"

echo "== 3a. psctl tables shows each direction's codec and the ratio it achieved"
# "c" sends topk (10%) pushes and fp16 pulls, "u" plain float32; the probe steps on both.
cat >"$dir/codecs.textproto" <<SPEC
name: "codecs"
program {
  argv: $(probe_argv --mode=slow --steps=100000 --sleep=0.05 --tables=c,u)
  working_dir: "$repo"
  env { key: "PYTHONPATH" value: "$build/python" }
  stop_grace_seconds: 2
}
tables { name: "c" kind: DENSE num_rows: 64 dim: 4 optimizer { kind: SGD learning_rate: 0.1 }
         push_codec { codec: CODEC_TOPK ratio: 0.1 } pull_codec { codec: CODEC_FP16 } }
tables { name: "u" kind: DENSE num_rows: 64 dim: 4 optimizer { kind: SGD learning_rate: 0.1 } }
num_workers: 1
num_servers: 2
consistency { mode: ASYNC }
SPEC
job=$(psctl submit "$dir/codecs.textproto") || fail "codecs job: not submitted"
wait_clock "$job" 5
psctl tables "$job" >"$dir/codecs.text" || fail "psctl tables $job: $(cat "$dir/codecs.text")"
cat "$dir/codecs.text"
psctl --output=json tables "$job" >"$dir/codecs.json" || fail "psctl --output=json tables $job"
/usr/bin/python3 - "$dir/codecs.json" "$dir/codecs.text" <<'PY' || fail "psctl tables: no ratios"
import json, re, sys
rows = json.load(open(sys.argv[1]))
c = [r for r in rows if r["name"] == "c"]
u = [r for r in rows if r["name"] == "u"]
assert len(c) == 2 and len(u) == 2, f"not one line per table and server: {rows}"
for r in c:  # each server holds some of c's 64 rows
    assert r["push_codec"] == "topk" and r["pull_codec"] == "fp16", r
    s = r["stats"]
    raw, wire = int(s["pushRawBytes"]), int(s["pushWireBytes"])
    assert wire > 0 and r["push_ratio"] > 2 and abs(r["push_ratio"] - raw / wire) < 0.01, r
    raw, wire = int(s["pullRawBytes"]), int(s["pullWireBytes"])
    assert raw == 2 * wire > 0 and r["pull_ratio"] == 2, r
for r in u:
    assert (r["push_codec"], r["push_ratio"], r["pull_codec"], r["pull_ratio"]) == \
        ("none", 1, "none", 1), r
    assert all(int(r["stats"][f]) == 0 for f in
               ("pushRawBytes", "pushWireBytes", "pullRawBytes", "pullWireBytes")), r
text = open(sys.argv[2]).read().splitlines()
assert re.search(r"\bPUSH\s+PULL$", text[0]), text[0]
for line in text[1:]:
    name = line.split()[0]
    want = r"topk [0-9.]+x\s+fp16 2\.00x$" if name == "c" else r"none\s+none$"
    assert re.search(want, line), f"{line!r} does not end in {want}"
print("ratios: " + ", ".join(f"c push {r['push_ratio']:.2f}x pull {r['pull_ratio']:.2f}x"
                             for r in c))
PY
# psctl status sums each compressed table's bytes over its servers; "u" has no line.
psctl status "$job" >"$dir/codecs.status" || fail "psctl status $job"
grep -Eq '^compression c: push topk [0-9.]+x, pull fp16 2\.00x \(2 of 2 servers\)$' \
  "$dir/codecs.status" || fail "psctl status: no compression line for c: $(cat "$dir/codecs.status")"
! grep -q '^compression u' "$dir/codecs.status" || fail "psctl status: a compression line for u"
grep '^compression' "$dir/codecs.status"
psctl cancel "$job" >/dev/null
echo "ok: psctl tables and status showed c's topk and fp16 ratios and u uncompressed ($(wait_done "$job"))"

echo "== 3b. dynamic data: the scheduler hands a program its batches (session.batches)"
# 2 workers, worker 1 slowed; worker 0 SIGKILLs its program once when handed its 20th batch
# (restarted: max_restarts 1). Every example of each of the 3 epochs is read exactly once, and
# the fast worker reads more.
probe_spec "$dir/data.textproto" 2 "$(probe_argv --mode=data --examples=1000 --batch=10 \
  --slow_worker=1 --sleep=0.03 --crash_at=20 --record="$dir/data-record")" "max_restarts: 1"
echo 'data_assignment: DYNAMIC epochs: 3' >>"$dir/data.textproto"
job=$(psctl submit "$dir/data.textproto")
state=$(wait_done "$job")
[ "$state" = SUCCEEDED ] || fail "dynamic data job: $state ($(reason_of "$job"))"
[ -e "$dir/data-record.crashed" ] || fail "dynamic data job: the program of worker 0 never crashed"
/usr/bin/python3 - "$dir/data-record" <<'PY' || fail "dynamic data job: examples not read once"
import collections, sys
lines = {w: open(f"{sys.argv[1]}.{w}").read().split("\n")[:-1] for w in (0, 1)}
seen = collections.Counter()
indices = collections.Counter()
for w in lines:
    for line in lines[w]:
        epoch, index, *examples = map(int, line.split())
        indices[index] += 1
        for e in examples:
            seen[(epoch, e)] += 1
want = {(epoch, e) for epoch in (1, 2, 3) for e in range(1000)}
assert set(seen) == want, f"{len(want - set(seen))} (epoch, example) pairs never read"
twice = [k for k, n in seen.items() if n != 1]
assert not twice, f"{len(twice)} read more than once, e.g. {twice[:3]}"
assert len(indices) == 300 and max(indices.values()) == 1, "ranges read twice or missing"
n0, n1 = len(lines[0]), len(lines[1])
assert n0 > 2 * n1, f"the fast worker read {n0} batches, the slowed one {n1}"
print(f"3 epochs x 1000 examples read once each; worker 0 read {n0} batches, worker 1 {n1}")
PY
psctl status "$job" | grep -q "300 of 300 ranges of 10 read (epoch 3 of 3)" ||
  fail "dynamic data job: psctl status has no full data line: $(psctl status "$job")"
psctl events "$job" | grep -q "data: epoch 3 of 3 read" || fail "no epoch event: $(psctl events "$job")"
echo "ok: dynamic data job $job SUCCEEDED across a program crash"

echo "== 4. a worker daemon SIGKILLed takes its program with it; the job goes on"
probe_spec "$dir/slow2.textproto" 2 \
  "$(probe_argv --mode=slow --steps=150 --sleep=0.05 --checkpoint_at=3)"
job=$(psctl submit "$dir/slow2.textproto")
wait_clock "$job" 10
node=$(json status "$job" "d['workerNodes'][1]")
wpid=$(json nodes "[n['pid'] for n in d['nodes'] if n['nodeId'] == '$node'][0]")
prog=$(pid_of "$job" 1)
kill -9 "$wpid"
for i in 0 1 2; do [ "${worker_pids[$i]}" = "$wpid" ] && worker_pids[$i]=dead; done
gone "$prog" 3 || fail "program $prog outlived its worker daemon $wpid"
[ "$(wait_done "$job")" = SUCCEEDED ] || fail "$job after a worker kill: $(reason_of "$job")"
echo "ok: worker daemon $wpid killed, its program $prog ended with it; $job SUCCEEDED"
[ "$(json checkpoints "$job" "[c['state'] for c in d.get('checkpoints', [])]")" = "['CHECKPOINT_COMPLETE']" ] ||
  fail "$job: the checkpoint its program asked for: $(psctl checkpoints "$job")"
echo "ok: the checkpoint the program asked for (session.request_checkpoint) is COMPLETE"
psctl events "$job" | grep -E "dead|joined" | head -3
"$worker_bin" --scheduler="$sched" --work_dir="$dir/w" >"$dir/worker3.log" 2>&1 &
pids+=($!)
worker_pids+=($!)
wait_nodes 6

echo "== 5. examples/python/fashion_torch.py via psctl submit"
sed -e 's#"--epochs=5"#"--epochs=5"#' -e "s#working_dir: \".\"#working_dir: \"$repo\"#" \
  -e "s#value: \"build/python\"#value: \"$build/python\"#" -e 's#every_steps: 500#every_steps: 300#' \
  "$repo/deploy/jobs/fashion_torch.textproto" >"$dir/fashion.textproto"
job1=$(psctl submit "$dir/fashion.textproto")
psctl status "$job1" --watch --output=text | tail -2
[ "$(wait_done "$job1")" = SUCCEEDED ] || fail "$job1: $(reason_of "$job1")"
acc1=$(accuracy_of "$job1")
python3 -c "import sys; sys.exit(0 if $acc1 >= 85 else 1)" || fail "$job1: test accuracy $acc1% < 85%"
psctl logs "$job1" --worker=0 --lines=3 | tee "$dir/logs.out"
grep -q "test accuracy" "$dir/logs.out" || fail "psctl logs lacks the program's last line"
echo "ok: $job1 test accuracy $acc1%"

echo "== 6. the same job with one of its servers SIGKILLed mid-way"
job2=$(psctl submit "$dir/fashion.textproto")
wait_clock "$job2" 500
node=$(json status "$job2" "d['serverNodes'][0]")
spid=$(json nodes "[n['pid'] for n in d['nodes'] if n['nodeId'] == '$node'][0]")
kill -9 "$spid"
echo "killed server node $node (pid $spid) at clock $(clock_of "$job2")"
[ "$(wait_done "$job2")" = SUCCEEDED ] || fail "$job2: $(reason_of "$job2")"
acc2=$(accuracy_of "$job2")
psctl events "$job2" | grep -E "died|recovered" || true
python3 -c "import sys; sys.exit(0 if abs($acc2 - $acc1) <= 1 else 1)" ||
  fail "$job2: test accuracy $acc2% is not within 1 point of $acc1%"
grep -h "recovered under" "$dir"/w/"$job2"/worker-*/program.log
echo "ok: $job2 test accuracy $acc2% (undisturbed $acc1%)"

echo "== 7. the C++ example (installed library, ps::Session) as a program job"
cmake --install "$build" --prefix "$dir/prefix" --component client >"$dir/install.log" 2>&1 ||
  fail "cmake --install failed: $(tail -5 "$dir/install.log")"
cmake -S "$repo/examples/cpp" -B "$dir/example" -DCMAKE_PREFIX_PATH="$dir/prefix" \
  >"$dir/example.log" 2>&1 && cmake --build "$dir/example" -j2 >>"$dir/example.log" 2>&1 ||
  fail "examples/cpp does not build: $(tail -5 "$dir/example.log")"
sed -e "s#/opt/paramserver/example/train_logreg#$dir/example/train_logreg#" \
  "$repo/deploy/jobs/train_logreg.textproto" >"$dir/logreg.textproto"
job=$(psctl submit "$dir/logreg.textproto")
[ "$(wait_done "$job")" = SUCCEEDED ] || fail "$job: $(reason_of "$job")"
psctl status "$job" | grep -E "^(state|progress|result)" || true
psctl logs "$job" --worker=0 --lines=2
echo "ok: $job (C++) SUCCEEDED, test accuracy $(accuracy_of "$job")%"
echo "PASS"
