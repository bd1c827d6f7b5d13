#!/usr/bin/env bash
# psctl against a real ps_scheduler (no servers or workers): outputs and exit codes.
# Usage: psctl_test.sh PS_SCHEDULER PSCTL
set -uo pipefail
scheduler_bin=$1 psctl_bin=$2
dir=$(mktemp -d /tmp/psctl_test_XXXXXX)
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# expect CODE DESCRIPTION -- COMMAND...: runs COMMAND (stdout in $out, stderr in $err) and
# checks its exit code.
expect() {
  local want=$1 what=$2
  shift 3
  "$@" >"$dir/out" 2>"$dir/err"
  local got=$?
  out=$(cat "$dir/out") err=$(cat "$dir/err")
  if [ "$got" -ne "$want" ]; then
    fail "$what: exit $got, want $want; stdout: $out; stderr: $err"
  else
    echo "ok: $what (exit $got)"
  fi
}
contains() {  # contains TEXT PATTERN DESCRIPTION
  grep -qE -- "$2" <<<"$1" || fail "$3: '$1' does not match /$2/"
}

"$scheduler_bin" --listen=127.0.0.1:0 --state_dir="$dir/state" --port_file="$dir/port" \
  >"$dir/scheduler.log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -s "$dir/port" ] && break; sleep 0.1; done
[ -s "$dir/port" ] || { echo "ps_scheduler did not start:"; cat "$dir/scheduler.log"; exit 1; }
PS_SCHEDULER="127.0.0.1:$(cat "$dir/port")"
export PS_SCHEDULER
psctl() { "$psctl_bin" "$@"; }

expect 0 "help" -- psctl --help
contains "$out" "Exit codes" "--help lists the exit codes"
expect 0 "help command" -- psctl help

expect 0 "nodes of an empty cluster" -- psctl nodes
contains "$out" "no nodes" "nodes"
expect 0 "nodes as json" -- psctl nodes --output=json
python3 -c 'import json,sys; d = json.load(sys.stdin); assert d["nodes"] == []' <<<"$out" 2>/dev/null ||
  fail "nodes --output=json: $out"

cat >"$dir/bad.textproto" <<EOF
model: "fashion_mlp"
num_workers: 0
data_dir: "$dir"
EOF
expect 1 "submit of a spec with num_workers 0" -- psctl submit "$dir/bad.textproto"
contains "$err" "INVALID_ARGUMENT.*num_workers" "the refusal names the field"

cat >"$dir/good.textproto" <<EOF
name: "psctl-test"
model: "fashion_mlp"
num_workers: 2
num_servers: 1
consistency { mode: SYNC }
optimizer { kind: ADAM learning_rate: 0.001 }
data_dir: "$dir"
EOF
expect 0 "submit of a good spec" -- psctl submit "$dir/good.textproto"
[ "$out" = "job-1" ] || fail "submit printed '$out', want exactly 'job-1'"
expect 0 "submit with flags only" -- psctl submit --model=fashion_mlp --num_workers=1 \
  --data_dir="$dir" --consistency=async --epochs=2
[ "$out" = "job-2" ] || fail "submit printed '$out', want exactly 'job-2'"

expect 0 "list" -- psctl list
contains "$out" "^job-1 +psctl-test +PENDING +fashion_mlp +0/2 .*waiting" "list shows job-1 PENDING with a reason"
expect 0 "status" -- psctl status job-1
contains "$out" "state: +PENDING" "status shows the state"
contains "$out" "reason: +waiting" "status shows the reason"
expect 0 "status as json" -- psctl status job-1 --output=json
python3 -c 'import json,sys; d = json.load(sys.stdin); assert d["jobId"] == "job-1", d' <<<"$out" 2>/dev/null ||
  fail "status --output=json does not parse: $out"

expect 0 "cancel" -- psctl cancel job-1
contains "$out" "job-1 CANCELLED" "cancel prints the new state"
expect 0 "status after cancel" -- psctl status job-1
contains "$out" "state: +CANCELLED" "state after cancel"
expect 1 "watch of a cancelled job" -- psctl status job-1 --watch
contains "$out" "job-1 CANCELLED" "watch prints the final line"
expect 0 "events" -- psctl events job-1
contains "$out" "^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:.]+ +submitted" "events have timestamps"
expect 0 "logs (alias of events)" -- psctl logs job-1

expect 1 "status of an unknown job" -- psctl status job-99
contains "$err" "NOT_FOUND" "unknown job"
expect 1 "cancel of an unknown job" -- psctl cancel job-99
expect 1 "tables of an unknown job" -- psctl tables job-99
contains "$err" "NOT_FOUND" "tables of an unknown job"
expect 2 "tables without a job" -- psctl tables
# job-1 is a zoo job: its spec lists no tables (tests/ctr_embedding_test.sh asks real servers).
expect 1 "tables of a job without tables in its spec" -- psctl tables job-1
contains "$err" "no tables" "tables of a zoo job"

expect 3 "unreachable scheduler" -- psctl --scheduler=127.0.0.1:1 nodes
contains "$err" "cannot reach the scheduler" "unreachable"
expect 3 "unreachable scheduler from PS_SCHEDULER" -- env PS_SCHEDULER=127.0.0.1:1 "$psctl_bin" list

expect 2 "no command" -- psctl
expect 2 "unknown command" -- psctl frobnicate
expect 2 "unknown flag" -- psctl nodes --frobnicate
expect 2 "bad flag value" -- psctl submit "$dir/good.textproto" --num_workers=two
expect 2 "bad --output" -- psctl nodes --output=yaml
expect 2 "missing job id" -- psctl status
expect 2 "submit flag on another command" -- psctl list --num_workers=3
expect 2 "unreadable job file" -- psctl submit "$dir/missing.textproto"
printf 'model: "fashion_mlp"\nnum_workers: two\n' >"$dir/unparsable.textproto"
expect 2 "unparsable job file" -- psctl submit "$dir/unparsable.textproto"
contains "$err" "unparsable.textproto:2:14: " "the parse error has line:column"
expect 2 "bad --consistency" -- psctl submit "$dir/good.textproto" --consistency=eventual
expect 2 "bad --data_assignment" -- psctl submit "$dir/good.textproto" --data_assignment=default
contains "$err" "--data_assignment must be static or dynamic" "the error names the flag's values"
expect 1 "dynamic data in a sync job" -- psctl submit "$dir/good.textproto" --consistency=sync \
  --data_assignment=dynamic
contains "$err" "needs consistency ssp or async" "the scheduler says why"

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed; scheduler log:"
  tail -n 20 "$dir/scheduler.log"
  exit 1
fi
echo "PASS"
