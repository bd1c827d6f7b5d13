#!/usr/bin/env bash
# A job's program cannot reach another job (issue 49), end to end on loopback: a scheduler, a
# server and two worker daemons with mutual TLS, a cluster token and an admin token, the worker
# daemons as root with --program_uids (each its own range). Job B (tests/programs/probe.py) trains and
# checkpoints; then job A's program (tests/programs/hostile.py), holding only what a worker
# gives a program, tries:
#   1. table_squat        CreateTable of its own job with the id the scheduler will give the
#                         next job's first table
#   2. checkpoint_squat   Checkpoint into B's checkpoint folder (ckpt-2: B's next checkpoint)
#   3. token_file         reading the worker daemon's --cluster_token_file (and tls_key: its
#                         --tls_key; the program dials with the copies its worker made for it)
#   4. environ            reading /proc/PID/environ of B's program (B's credential)
#   5. agent              connecting to B's agent socket and calling GetAssignment
#   6. checkpoint_files   listing B's checkpoint shard and reading its CURRENT file
#   7. work_dir           listing B's program's folder
# and first leaves a process behind (double fork, a session of its own), which must be gone
# once A's run ends.
# Every one is refused. B then takes its next checkpoint (the folder A named), SUCCEEDS with
# the loss of an undisturbed run of the same program (the next job, whose table id A named),
# and the server counted ps_auth_refused_total{reason="table_id"} and {"checkpoint_path"}.
#
# With --unprivileged (ctest `isolation_unprivileged`) the worker daemons run as an ordinary
# user (uid 60500, via setpriv) without --program_uids: each logs the WARNING that programs run
# as its own user, and one given --program_uids refuses to start; 1, 2, 5 and 6 are still
# refused (the servers' checks; the agent's check of the caller's session by SO_PEERCRED; the
# servers' 0700 checkpoint root); 3, 4 and 7 are open (printed, as docs/operations.md says).
# Needs root (else skips, 77), python3 with grpcio and numpy, protoc and grpc_python_plugin,
# and the paramserver Python package in BUILD_DIR/python.
# Usage: tests/isolation_test.sh BUILD_DIR [--unprivileged]
set -euo pipefail
build=$(cd "$1" && pwd)
unprivileged=0
case ${2:-} in
  "") ;;
  --unprivileged) unprivileged=1 ;;
  *) echo "usage: $0 BUILD_DIR [--unprivileged]"; exit 2 ;;
esac
repo=$(cd "$(dirname "$0")/.." && pwd)
sched_bin=$build/scheduler/ps_scheduler
server_bin=$build/server/ps_server
worker_bin=$build/worker/ps_worker
psctl_bin=$build/tools/psctl
for b in "$sched_bin" "$server_bin" "$worker_bin" "$psctl_bin"; do
  [ -x "$b" ] || { echo "missing binaries in $build"; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (programs run under uids of their own)"; exit 77; }
if ! command -v protoc >/dev/null || ! command -v grpc_python_plugin >/dev/null; then
  echo "SKIP: no protoc or grpc_python_plugin"
  exit 77
fi
/usr/bin/python3 -c 'import grpc, numpy' 2>/dev/null || { echo "SKIP: no python3 grpc/numpy"; exit 77; }
[ -d "$build/python/paramserver" ] || { echo "SKIP: no paramserver Python package"; exit 77; }
[ "$unprivileged" = 0 ] || command -v setpriv >/dev/null || { echo "SKIP: no setpriv"; exit 77; }
command -v openssl >/dev/null || { echo "SKIP: no openssl"; exit 77; }

# shellcheck source=lib/daemons.sh
source "$(dirname "$0")/lib/daemons.sh" ps_isolation
dir=${dir:?}  # set by lib/daemons.sh
# Programs run as other users: they may pass through $dir (to the gRPC stubs), not list it.
chmod 0711 "$dir"
step() { echo "-- $*"; }
wait_file() {  # wait_file PATH SECONDS
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    [ -s "$1" ] && return 0
    sleep 0.1
  done
  fail "timed out waiting for $1"
}

head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/cluster.token"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/admin.token"
chmod 600 "$dir"/*.token
"$repo/deploy/tls/make-certs.sh" "$dir/tls" scheduler server worker psctl >/dev/null
tls() { echo "--tls_ca=$dir/tls/ca.crt --tls_cert=$dir/tls/$1.crt --tls_key=$dir/tls/$1.key"; }
worker_token=$dir/cluster.token
worker_tls=$dir/tls
daemon_user=60500  # --unprivileged: the worker daemons' user
if [ "$unprivileged" = 1 ]; then
  worker_token=$dir/worker.token
  install -m 600 -o "$daemon_user" -g "$daemon_user" "$dir/cluster.token" "$worker_token"
  worker_tls=$dir/tls-worker
  install -d -m 700 -o "$daemon_user" -g "$daemon_user" "$worker_tls"
  for f in ca.crt worker.crt worker.key; do
    install -m 600 -o "$daemon_user" -g "$daemon_user" "$dir/tls/$f" "$worker_tls/$f"
  done
fi
# The servers' checkpoints: theirs only (as StateDirectoryMode=0700 makes it under systemd).
mkdir -m 700 "$dir/checkpoints"
mkdir -p "$dir/py"
(cd "$repo/proto" && protoc -I. --python_out="$dir/py" --grpc_out="$dir/py" \
  --plugin=protoc-gen-grpc="$(command -v grpc_python_plugin)" ps/v1/*.proto)
chmod -R a+rX "$dir/py"

# shellcheck disable=SC2046
"$sched_bin" --listen=127.0.0.1:0 --port_file="$dir/sched.port" --state_dir="$dir/state" \
  --checkpoint_root="$dir/checkpoints" --metrics_listen=off --heartbeat_interval=500ms \
  --heartbeat_timeout=3s --cluster_token_file="$dir/cluster.token" $(tls scheduler) \
  --admin_token_file="$dir/admin.token" >"$dir/scheduler.log" 2>&1 &
pids+=($!)
wait_file "$dir/sched.port" 20
sched=127.0.0.1:$(cat "$dir/sched.port")
# shellcheck disable=SC2046
"$server_bin" --listen=127.0.0.1:0 --port_file="$dir/server.port" --scheduler="$sched" \
  --checkpoint_roots="$dir/checkpoints" --metrics_listen=127.0.0.1:0 \
  --metrics_port_file="$dir/server.metrics" --cluster_token_file="$dir/cluster.token" \
  $(tls server) >"$dir/server.log" 2>&1 &
pids+=($!)
for w in 0 1; do
  work=$dir/work-$w
  flags=(--scheduler="$sched" --device=cpu --metrics_listen=off --health_listen=off
    --work_dir="$work" --cluster_token_file="$worker_token" --tls_ca="$worker_tls/ca.crt"
    --tls_cert="$worker_tls/worker.crt" --tls_key="$worker_tls/worker.key")
  if [ "$unprivileged" = 1 ]; then
    mkdir -p "$work"
    chown "$daemon_user:$daemon_user" "$work"
    setpriv --reuid="$daemon_user" --regid="$daemon_user" --clear-groups -- \
      "$worker_bin" "${flags[@]}" >"$dir/worker-$w.log" 2>&1 &
  else
    "$worker_bin" "${flags[@]}" --program_uids="$((60000 + 100 * w))-$((60099 + 100 * w))" \
      >"$dir/worker-$w.log" 2>&1 &
  fi
  pids+=($!)
done
wait_file "$dir/server.port" 20
server=127.0.0.1:$(cat "$dir/server.port")
# shellcheck disable=SC2046
psctl() { "$psctl_bin" --scheduler="$sched" $(tls psctl) --token_file="$dir/admin.token" "$@"; }
# shellcheck source=lib/jobs.sh
source "$(dirname "$0")/lib/jobs.sh"
wait_nodes 3

step "the worker daemons say how programs run"
for w in 0 1; do
  if [ "$unprivileged" = 1 ]; then
    grep -q "^W.*no --program_uids: program jobs' programs run as this daemon's user" \
      "$dir/worker-$w.log" || fail "worker $w logged no WARNING without --program_uids"
  else
    grep -q "programs run under uids $((60000 + 100 * w))-$((60099 + 100 * w)), one per run" \
      "$dir/worker-$w.log" || fail "worker $w did not take --program_uids"
  fi
done
grep -h -E "no --program_uids|programs run under uids" "$dir"/worker-*.log | sed "s/^/  /" || true
if [ "$unprivileged" = 1 ]; then
  # --program_uids needs root: an unprivileged daemon given it refuses to start.
  if out=$(setpriv --reuid="$daemon_user" --regid="$daemon_user" --clear-groups -- \
      "$worker_bin" --scheduler="$sched" --metrics_listen=off --health_listen=off \
      --work_dir="$dir/work-0" --program_uids=61000-61099 2>&1); then
    fail "an unprivileged daemon started with --program_uids"
  fi
  grep -q "not root: it cannot run programs under the uids of --program_uids" <<<"$out" ||
    fail "an unprivileged daemon with --program_uids said: $out"
  echo "  refused as expected: $(grep -o 'runs as uid.*' <<<"$out" | head -1)"
fi

# probe_spec NAME SLEEP: job B's program (and the undisturbed run's): 600 steps on a zeroed
# table, a checkpoint at step 3.
probe_spec() {
  cat <<SPEC
name: "$1"
program {
  argv: ["/usr/bin/python3", "tests/programs/probe.py", "--mode=slow", "--sleep=$2",
         "--steps=600", "--checkpoint_at=3"]
  working_dir: "$repo"
  env { key: "PYTHONPATH" value: "$build/python" }
}
tables {
  name: "w" kind: DENSE num_rows: 8 dim: 4
  initializer { kind: ZEROS }
  optimizer { kind: SGD learning_rate: 0.1 }
}
num_workers: 1
consistency { mode: ASYNC }
SPEC
}
probe_spec victim 0.05 >"$dir/victim.textproto"
probe_spec control 0 >"$dir/control.textproto"
victim=$(psctl submit "$dir/victim.textproto") || fail "submit of the victim refused"
echo "job B: $victim"

step "job B trains and checkpoints"
shard=""
for _ in $(seq 300); do
  shard=$(find "$dir/checkpoints" -path "*/$victim.*/ckpt-1/shard-0/CURRENT" 2>/dev/null | head -1)
  [ -n "$shard" ] && break
  sleep 0.2
done
[ -n "$shard" ] || fail "no checkpoint of $victim"
shard=$(dirname "$shard")
folder=$(dirname "$(dirname "$shard")")
run_dir=$(ls -d "$dir"/work-*/"$victim"/worker-0)
victim_pid=""
for _ in $(seq 100); do
  victim_pid=$(sed -n 's/^probe pid \([0-9]*\).*/\1/p' "$run_dir/program.log" 2>/dev/null | tail -1)
  [ -n "$victim_pid" ] && break
  sleep 0.1
done
[ -n "$victim_pid" ] || fail "no pid in $run_dir/program.log"
victim_uid=$(stat -c %u "/proc/$victim_pid")
if [ "$unprivileged" = 1 ]; then
  victim_home=$run_dir
  [ "$victim_uid" = "$daemon_user" ] || fail "B's program runs as uid $victim_uid"
else
  victim_home=$run_dir/home
  if [ "$victim_uid" -lt 60000 ] || [ "$victim_uid" -gt 60199 ]; then
    fail "B's program runs as uid $victim_uid, not one of --program_uids"
  fi
  [ "$(stat -c '%u %a' "$victim_home")" = "$victim_uid 700" ] ||
    fail "B's folder $victim_home is $(stat -c '%u %a' "$victim_home")"
  [ "$(stat -c '%u %a' "$run_dir/agent.sock")" = "$victim_uid 600" ] ||
    fail "B's agent socket is $(stat -c '%u %a' "$run_dir/agent.sock")"
  grep -q "^NoNewPrivs:[[:space:]]*1" "/proc/$victim_pid/status" || fail "B's program may gain privileges"
  # Its TLS files: copies its group may read (the worker's own are root's, 0600).
  for f in tls-ca.pem tls-cert.pem tls-key.pem; do
    [ "$(stat -c '%u %g %a' "$run_dir/$f")" = "0 $victim_uid 640" ] ||
      fail "B's $f is $(stat -c '%u %g %a' "$run_dir/$f")"
  done
fi
echo "B's program: pid $victim_pid, uid $victim_uid; checkpoint $shard"
# The servers do not know the admin token: psctl tables (which asks them) needs the cluster's.
out=$(psctl tables "$victim" 2>&1 || true)
grep -q "UNAUTHENTICATED" <<<"$out" || fail "a server took the admin token: $out"
# shellcheck disable=SC2046
"$psctl_bin" --scheduler="$sched" $(tls psctl) --token_file="$dir/cluster.token" tables "$victim" \
  >/dev/null ||
  fail "psctl tables with the cluster token failed"
echo "psctl tables: the admin token UNAUTHENTICATED at the server, the cluster token served"

step "job A's program tries to reach job B"
next_job=job-$((${victim#job-} + 2))   # A is the next job; the undisturbed run the one after
squat_table=$((${next_job#job-} * 1000 + 1))
cat >"$dir/hostile.textproto" <<SPEC
name: "hostile"
program {
  argv: ["/usr/bin/python3", "tests/programs/hostile.py", "--server=$server",
         "--squat_table=$squat_table", "--squat_checkpoint=$folder/ckpt-2/shard-0",
         "--token_file=$worker_token", "--tls_key_file=$worker_tls/worker.key",
         "--environ_pid=$victim_pid", "--leave_behind=$((unprivileged ? 0 : 60))",
         "--agent=$run_dir/agent.sock", "--checkpoint_dir=$shard", "--work_dir=$victim_home"]
  working_dir: "$repo"
  env { key: "PYTHONPATH" value: "$dir/py" }
}
tables { name: "w" kind: DENSE num_rows: 8 dim: 4 optimizer { kind: SGD learning_rate: 0.1 } }
num_workers: 1
SPEC
hostile=$(psctl submit "$dir/hostile.textproto") || fail "submit of the hostile job refused"
echo "job A: $hostile (squats table id $squat_table of $next_job and $folder/ckpt-2)"
state=$(wait_done "$hostile" 120)
[ "$state" = SUCCEEDED ] || fail "the hostile job ended $state"
log=$(cat "$dir"/work-*/"$hostile"/worker-0/program.log)
grep "^hostile:" <<<"$log" | sed 's/^/  /'
grep -q "^hostile: done" <<<"$log" || fail "the hostile program did not finish its attempts"
refused=(table_squat checkpoint_squat agent checkpoint_files checkpoint_file)
open=()
if [ "$unprivileged" = 1 ]; then
  open=(token_file tls_key environ work_dir)
else
  refused+=(token_file tls_key environ work_dir)
fi
for what in "${refused[@]}"; do
  grep -q "^hostile: REFUSED $what:" <<<"$log" || fail "$what was not refused"
done
grep -q "^hostile: REFUSED table_squat: PERMISSION_DENIED: table id $squat_table is not one of" \
  <<<"$log" || fail "the table squat was not refused for its id"
grep -q "^hostile: REFUSED checkpoint_squat: PERMISSION_DENIED: checkpoint path" <<<"$log" ||
  fail "the checkpoint squat was not refused for its path"
[ ! -e "$folder/ckpt-2" ] || fail "$folder/ckpt-2 was created"
if [ "$unprivileged" = 0 ]; then
  # What A's program left running outside its session ends with A's run (its uid's processes).
  left=$(sed -n 's/^hostile: left pid \([0-9]*\) behind$/\1/p' <<<"$log")
  [ -n "$left" ] || fail "the hostile program left nothing behind"
  for _ in $(seq 100); do
    [ -e "/proc/$left" ] || break
    sleep 0.1
  done
  [ ! -e "/proc/$left" ] || fail "A's process $left outlived A's run"
  echo "A's process $left, left behind outside its session, ended with A's run"
fi
if [ "$unprivileged" = 1 ]; then
  grep -q "refused a connection from pid" "$dir"/worker-*.log ||
    fail "no worker logged the refused agent connection"
fi
for what in "${open[@]}"; do
  grep -q "^hostile: [A-Z]* $what:" <<<"$log" || fail "no attempt $what"
  echo "  without --program_uids: $(grep "^hostile: [A-Z]* $what:" <<<"$log" | cut -d' ' -f2-3)"
done

step "job B is undisturbed"
psctl checkpoint "$victim" --wait_timeout=60s >/dev/null ||
  fail "B's next checkpoint (into the folder A named) failed"
[ -e "$folder/ckpt-2/shard-0/CURRENT" ] || fail "B's checkpoint 2 is not in $folder/ckpt-2"
state=$(wait_done "$victim" 300)
[ "$state" = SUCCEEDED ] || fail "B ended $state"
attacked=$(json status "$victim" "d.get('progress',{}).get('loss','')")
control=$(psctl submit "$dir/control.textproto") || fail "submit of the undisturbed run refused"
[ "$control" = "$next_job" ] || fail "the undisturbed run is $control, not $next_job"
state=$(wait_done "$control" 300)
[ "$state" = SUCCEEDED ] || fail "the undisturbed run $control (table id $squat_table) ended $state"
undisturbed=$(json status "$control" "d.get('progress',{}).get('loss','')")
echo "B's last loss: $attacked attacked, $undisturbed undisturbed ($control, table $squat_table)"
if [ -z "$attacked" ] || [ "$attacked" != "$undisturbed" ]; then
  fail "B's loss $attacked is not the undisturbed run's $undisturbed"
fi

step "the server counted the refusals"
metrics=$(/usr/bin/python3 -c "import urllib.request,sys; print(urllib.request.urlopen(sys.argv[1]).read().decode())" \
  "http://127.0.0.1:$(cat "$dir/server.metrics")/metrics")
grep '^ps_auth_refused_total' <<<"$metrics" | sed 's/^/  /'
for reason in table_id checkpoint_path; do
  n=$(awk -v r="reason=\"$reason\"" 'index($0, "ps_auth_refused_total{") == 1 && index($0, r) {print $2}' <<<"$metrics")
  awk -v n="${n:-0}" 'BEGIN{exit !(n >= 1)}' || fail "ps_auth_refused_total{reason=\"$reason\"} is ${n:-absent}"
done
if [ "$unprivileged" = 1 ]; then
  echo "PASS: without --program_uids (WARNING logged) the id and path checks, the agent's peer check and the checkpoint root hold; token file, environ and work folder are open, as documented"
else
  echo "PASS: programs under their own uids: each of job A's attempts refused; $victim SUCCEEDED as undisturbed"
fi
