#!/usr/bin/env bash
# Transport security end to end on loopback: a scheduler, a server and a worker with mutual TLS
# (certificates of deploy/tls/make-certs.sh), a cluster token and an admin token. A job trains
# while callers without the right material are refused, each with the code it should get, and
# the daemons go on serving: the job SUCCEEDS and every node stays ALIVE.
#   - psctl in plaintext, with a certificate of another CA, without a token, with a wrong token
#   - psctl with the cluster token: read-only commands pass, submit/cancel/checkpoint are
#     PERMISSION_DENIED
#   - a job whose checkpoint.root lies outside --checkpoint_roots: INVALID_ARGUMENT
#   - a plain gRPC client (tests/security_client.py, stubs from the .proto): plaintext against
#     the TLS server, no token, a foreign worker id of the job: all refused; the right material
#     and the job's own worker id: served
#   - a hostile tenant (tests/security_client.py with the cluster token, but no node secret and
#     no admin token) against the running job: registrations at addresses that do not parse or
#     at the live server's, heartbeats without the node's secret, BeginCheckpoint at clock 2^62,
#     FinishCheckpoint marking COMPLETE what no server wrote (rows 2^64-1, NaN seconds),
#     ReportRestoreFailure, a registration flood: each refused (INVALID_ARGUMENT,
#     PERMISSION_DENIED, RESOURCE_EXHAUSTED), and the job still SUCCEEDS
#   - a program of another job, with the credential a worker hands it (not the cluster token):
#     every call to the servers about the job (describing, pulling, pushing, push-pulling,
#     clocking, creating a table in it, checkpointing, awaiting a checkpoint, configuring with
#     no slots at epoch 2^40, rolling back), loading the job's checkpoint into its own tables
#     with a restore order it wrote (nothing is loaded; the same order with the cluster token is
#     carried out), each row of the hostile tenant above, a submit with a NaN learning rate:
#     PERMISSION_DENIED; a forged credential: UNAUTHENTICATED; the job's own: served
#   - a job with a NaN learning rate: INVALID_ARGUMENT naming optimizer.learning_rate
#   - a program job (tests/programs/probe.py) trains on its job credential and succeeds; a job
#     started from its checkpoint (--from_checkpoint) carries out the signed restore order
#   - ps_auth_refused_total counts the refusals by reason on the scheduler's /metrics
# With --plaintext (ctest `security_plaintext`) the same cluster runs without TLS (plain TCP on
# loopback, tokens only) and the same refusals are tried, except those about TLS itself; to
# keep it short the job (of 20 epochs here, so that it outlasts them) must then still be
# RUNNING with every daemon ALIVE, and is cancelled: no undisturbed run, no program job.
# Usage: tests/security_test.sh BUILD_DIR [--plaintext]
set -euo pipefail
build=$(cd "$1" && pwd)
plaintext=0
case ${2:-} in
  "") ;;
  --plaintext) plaintext=1 ;;
  *) echo "usage: $0 BUILD_DIR [--plaintext]"; exit 2 ;;
esac
repo=$(cd "$(dirname "$0")/.." && pwd)
sched_bin=$build/scheduler/ps_scheduler
server_bin=$build/server/ps_server
worker_bin=$build/worker/ps_worker
psctl_bin=$build/tools/psctl
for b in "$sched_bin" "$server_bin" "$worker_bin" "$psctl_bin"; do
  [ -x "$b" ] || { echo "missing binaries in $build"; exit 1; }
done
[ "$plaintext" = 1 ] || command -v openssl >/dev/null || { echo "SKIP: no openssl"; exit 77; }

dir=$(mktemp -d /tmp/ps_security_XXXXXX)
pids=()
keep=0
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ "$keep" = 1 ] || rm -rf "$dir"
}
trap cleanup EXIT INT TERM
fail() {
  echo "FAIL: $*"
  keep=1
  for f in "$dir"/*.log; do echo "== $f"; tail -15 "$f"; done
  exit 1
}
step() { echo "-- $*"; }

if [ "$plaintext" = 0 ]; then
  # Certificates: the cluster's CA and one of a stranger.
  "$repo/deploy/tls/make-certs.sh" "$dir/tls" scheduler server worker psctl >/dev/null
  "$repo/deploy/tls/make-certs.sh" "$dir/other" psctl >/dev/null
fi
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/cluster.token"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/admin.token"
echo wrong-token-0123456789 >"$dir/wrong.token"
chmod 600 "$dir"/*.token
# The TLS flags of node $1 ("" in plaintext).
tls() {
  [ "$plaintext" = 1 ] ||
    echo "--tls_ca=$dir/tls/ca.crt --tls_cert=$dir/tls/$1.crt --tls_key=$dir/tls/$1.key"
}

wait_file() {  # wait_file PATH SECONDS
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    [ -s "$1" ] && return 0
    sleep 0.1
  done
  fail "timed out waiting for $1"
}

mkdir -p "$dir/checkpoints"
# shellcheck disable=SC2046
"$sched_bin" --listen=127.0.0.1:0 --port_file="$dir/sched.port" --state_dir="$dir/state" \
  --checkpoint_root="$dir/checkpoints" --metrics_listen=127.0.0.1:0 \
  --metrics_port_file="$dir/sched.metrics" --heartbeat_interval=500ms --heartbeat_timeout=3s \
  --max_registrations_per_minute=40 \
  $(tls scheduler) --cluster_token_file="$dir/cluster.token" \
  --admin_token_file="$dir/admin.token" >"$dir/scheduler.log" 2>&1 &
pids+=($!)
wait_file "$dir/sched.port" 20
sched=127.0.0.1:$(cat "$dir/sched.port")
# shellcheck disable=SC2046
"$server_bin" --listen=127.0.0.1:0 --port_file="$dir/server.port" --scheduler="$sched" \
  --checkpoint_roots="$dir/checkpoints" --metrics_listen=off $(tls server) \
  --cluster_token_file="$dir/cluster.token" >"$dir/server.log" 2>&1 &
pids+=($!)
# The worker takes its token from the environment, as in a Kubernetes pod.
# shellcheck disable=SC2046
PS_CLUSTER_TOKEN=$(cat "$dir/cluster.token") "$worker_bin" --scheduler="$sched" --device=cpu \
  --metrics_listen=off --health_listen=off --work_dir="$dir/work" $(tls worker) \
  >"$dir/worker.log" 2>&1 &
pids+=($!)
wait_file "$dir/server.port" 20
server=127.0.0.1:$(cat "$dir/server.port")

# psctl as the operator: the cluster's CA, psctl's certificate, the admin token.
# shellcheck disable=SC2046
admin() { "$psctl_bin" --scheduler="$sched" $(tls psctl) --token_file="$dir/admin.token" "$@"; }
# shellcheck disable=SC2046
node() { "$psctl_bin" --scheduler="$sched" $(tls psctl) --token_file="$dir/cluster.token" "$@"; }
# daemons_alive: how many of the daemons started here (by pid) the scheduler lists ALIVE; the
# nodes a hostile tenant registers (pid 0) do not count.
daemons_alive() {
  admin nodes | awk -v pids=" ${pids[*]} " \
    '$3 == "ALIVE" { split($6, hp, "/"); if (index(pids, " " hp[2] " ")) n++ } END { print n + 0 }'
}
expect_refused() {  # expect_refused WHAT PATTERN CMD...: CMD fails and its output matches
  local what=$1 pattern=$2 out
  shift 2
  if out=$("$@" 2>&1); then fail "$what: accepted: $out"; fi
  grep -qE "$pattern" <<<"$out" || fail "$what: expected /$pattern/, got: $out"
  echo "refused as expected: $what: $(head -1 <<<"$out")"
}

if [ "$plaintext" = 1 ]; then
  step "the cluster comes up in plaintext (no TLS) with tokens"
else
  step "the cluster comes up over mutual TLS with tokens"
fi
for ((i = 0; i < 100; i++)); do
  [ "$(admin nodes 2>/dev/null | grep -c ALIVE)" -ge 2 ] && break
  sleep 0.2
done
admin nodes
[ "$(daemons_alive)" -eq 2 ] || fail "expected 2 nodes ALIVE"
admin nodes | grep -q "0\.1\.0 (git" || fail "psctl nodes shows no version"

cat >"$dir/job.textproto" <<EOF
name: "secure"
model: "fashion_mlp"
layers: [784, 64, 10]
num_workers: 1
epochs: 4
batch_size: 64
seed: 3
consistency { mode: SYNC }
EOF
if [ "$plaintext" = 1 ]; then  # outlasts the refusals; cancelled after them
  sed -i 's/^epochs: 4$/epochs: 20/' "$dir/job.textproto"
  grep -q "^epochs: 20$" "$dir/job.textproto" || fail "could not write the job file"
fi
job=$(admin submit "$dir/job.textproto") || fail "admin submit refused"
echo "submitted $job"

step "refusals while $job runs"
if [ "$plaintext" = 0 ]; then
  expect_refused "plaintext psctl against the TLS scheduler" "UNAVAILABLE" \
    "$psctl_bin" --scheduler="$sched" --token_file="$dir/admin.token" --timeout=3s nodes
  expect_refused "psctl with another CA's certificate" "UNAVAILABLE" \
    "$psctl_bin" --scheduler="$sched" --tls_ca="$dir/tls/ca.crt" \
    --tls_cert="$dir/other/psctl.crt" --tls_key="$dir/other/psctl.key" \
    --token_file="$dir/admin.token" --timeout=3s nodes
  expect_refused "psctl trusting another CA" "UNAVAILABLE" \
    "$psctl_bin" --scheduler="$sched" --tls_ca="$dir/other/ca.crt" \
    --tls_cert="$dir/other/psctl.crt" --tls_key="$dir/other/psctl.key" \
    --token_file="$dir/admin.token" --timeout=3s nodes
fi
# shellcheck disable=SC2046
expect_refused "psctl without a token" "UNAUTHENTICATED" \
  env -u PS_TOKEN "$psctl_bin" --scheduler="$sched" $(tls psctl) nodes
# shellcheck disable=SC2046
expect_refused "psctl with a wrong token" "UNAUTHENTICATED" \
  "$psctl_bin" --scheduler="$sched" $(tls psctl) --token_file="$dir/wrong.token" list
node nodes >/dev/null || fail "the cluster token should be enough for psctl nodes"
node status "$job" >/dev/null || fail "the cluster token should be enough for psctl status"
expect_refused "the cluster token on submit" "PERMISSION_DENIED" node submit "$dir/job.textproto"
expect_refused "the cluster token on cancel" "PERMISSION_DENIED" node cancel "$job"
expect_refused "the cluster token on checkpoint" "PERMISSION_DENIED" node checkpoint "$job" --nowait
expect_refused "a checkpoint root outside --checkpoint_roots" "INVALID_ARGUMENT.*checkpoint" \
  admin submit "$dir/job.textproto" --name=escape --checkpoint_root=/tmp/not-allowed
sed 's/^seed: 3$/seed: 3\noptimizer { learning_rate: nan }/' "$dir/job.textproto" >"$dir/nan.textproto"
grep -q "learning_rate: nan" "$dir/nan.textproto" || fail "could not write the NaN job file"
expect_refused "a job with a NaN learning rate" "INVALID_ARGUMENT.*optimizer.learning_rate" \
  admin submit "$dir/nan.textproto"

stubs=""
if command -v grpc_python_plugin >/dev/null && command -v protoc >/dev/null &&
  /usr/bin/python3 -c 'import grpc' 2>/dev/null; then
  mkdir -p "$dir/py"
  (cd "$repo/proto" && protoc -I. --python_out="$dir/py" --grpc_out="$dir/py" \
    --plugin=protoc-gen-grpc="$(command -v grpc_python_plugin)" ps/v1/*.proto)
  stubs=$dir/py
else
  echo "note: no protoc, grpc_python_plugin or python3 grpcio: the plain-client checks skip"
fi
if [ -n "$stubs" ]; then
  table=$((${job#job-} * 1000 + 1))
  client() { /usr/bin/python3 "$repo/tests/security_client.py" "$stubs" "$server" "$job" "$@"; }
  mtls=()  # a plain client's TLS material (none in plaintext)
  [ "$plaintext" = 1 ] ||
    mtls=(--ca="$dir/tls/ca.crt" --cert="$dir/tls/psctl.crt" --key="$dir/tls/psctl.key")
  for ((i = 0; i < 100; i++)); do  # until the job's tables exist on the server
    client 0 "$table" --call=describe "${mtls[@]}" --token="$(cat "$dir/cluster.token")" \
      >/dev/null && break
    sleep 0.2
  done
  if [ "$plaintext" = 0 ]; then
    expect_refused "a plaintext client of the TLS server" "REFUSED UNAVAILABLE" \
      client 0 "$table" --token="$(cat "$dir/cluster.token")"
    expect_refused "a TLS client without a client certificate" "REFUSED UNAVAILABLE" \
      client 0 "$table" --ca="$dir/tls/ca.crt" --token="$(cat "$dir/cluster.token")"
  fi
  expect_refused "a client without a token" "REFUSED UNAUTHENTICATED" client 0 "$table" "${mtls[@]}"
  expect_refused "a push as a worker id the job does not have" \
    "REFUSED FAILED_PRECONDITION: worker 7 is not a live worker" \
    client 7 "$table" "${mtls[@]}" --token="$(cat "$dir/cluster.token")"
  out=$(client 0 "$table" --call=describe "${mtls[@]}" --token="$(cat "$dir/cluster.token")") ||
    fail "the plain client with the cluster's material was refused: $out"
  echo "served as expected: $out"

  step "a program of another job (its job credential, as a worker hands it) against $job"
  credential() {  # credential JOB: the token a worker daemon hands to JOB's programs
    /usr/bin/python3 -c 'import hashlib, hmac, sys
key, job = sys.argv[1].encode(), sys.argv[2]
print("job:" + job + ":" + hmac.new(key, ("job-token\n" + job).encode(), hashlib.sha256).hexdigest())' \
      "$(cat "$dir/cluster.token")" "$1"
  }
  other="job-99"
  dim=$(sed -n 's/.* rows of dim \([0-9]*\)$/\1/p' <<<"$out")  # of $job's table, from above
  [ -n "$dim" ] || fail "no dim in: $out"
  program() { client "$@" "${mtls[@]}" --token="$(credential "$other")"; }
  # First what needs $job running (its tables on the server, a checkpoint of it).
  expect_refused "job-99's program describes $job's table" \
    "REFUSED PERMISSION_DENIED: .*credential" program 0 "$table" --call=describe
  expect_refused "a forged job credential" "REFUSED UNAUTHENTICATED" \
    client 0 "$table" --call=describe "${mtls[@]}" --token="job:$job:$(printf '0%.0s' {1..64})"
  out=$(client 0 "$table" --call=describe "${mtls[@]}" --token="$(credential "$job")") ||
    fail "$job's own credential was refused on its own table: $out"
  echo "served as expected: $job's credential on its own table: $out"
  # Its own job, restored from $job's checkpoint by an order it wrote: only the scheduler's
  # orders, signed for job-99, are carried out. The table shapes and checkpoint files it needs
  # are looked up with the cluster token (an attacker could guess them); its calls carry only
  # job-99's credential. The same order with the cluster token (a daemon's) is carried out and
  # loads the rows: without the signature check the program's would have too.
  admin checkpoint "$job" --wait_timeout=60s || fail "the checkpoint of $job failed"
  steal() {  # steal JOB TOKEN: JOB's program loads $job's latest checkpoint into JOB's tables
    /usr/bin/python3 "$repo/tests/security_client.py" "$stubs" "$server" "$1" 0 "$table" \
      --call=restore_from --source="$job" --scheduler="$sched" "${mtls[@]}" --token="$2" \
      --lookup_token="$(cat "$dir/cluster.token")"
  }
  expect_refused "job-99's program restores job-99 from $job's checkpoint" \
    "REFUSED PERMISSION_DENIED: restore order of job 'job-99' \(checkpoint [0-9]+ of job '$job'.*\
 is not signed.*; job-99's rows unchanged" \
    steal "$other" "$(credential "$other")"
  out=$(steal job-98 "$(cat "$dir/cluster.token")") ||
    fail "the same restore order with the cluster token was not carried out: $out"
  grep -q "its rows changed" <<<"$out" || fail "the cluster token's restore loaded nothing: $out"
  echo "served as expected: the cluster token's order: $out"
  # Then every other call about $job (refused on the credential, whether $job still runs).
  expect_refused "job-99's program pulls from $job" "REFUSED PERMISSION_DENIED: .*credential" \
    program 0 "$table" --call=pull
  expect_refused "job-99's program pushes to $job" "REFUSED PERMISSION_DENIED: .*credential" \
    program 0 "$table" --dim="$dim"
  expect_refused "job-99's program push-pulls $job" "REFUSED PERMISSION_DENIED: .*credential" \
    program 0 "$table" --call=pushpull --dim="$dim"
  expect_refused "job-99's program moves $job's worker 0 to clock 2^40" \
    "REFUSED PERMISSION_DENIED: .*credential" program 0 "$table" --call=clock
  expect_refused "job-99's program creates a table in $job" \
    "REFUSED PERMISSION_DENIED: .*credential" program 0 "$table" --call=create_table
  expect_refused "job-99's program checkpoints $job on the server" \
    "REFUSED PERMISSION_DENIED: .*credential" \
    program 0 "$table" --call=checkpoint --target="$dir/checkpoints/stolen"
  expect_refused "job-99's program awaits $job's checkpoint" \
    "REFUSED PERMISSION_DENIED: .*credential" program 0 "$table" --call=await_checkpoint
  expect_refused "job-99's program configures $job (no slots, epoch 2^40)" \
    "REFUSED PERMISSION_DENIED: .*credential" program 0 "$table" --call=configure
  expect_refused "job-99's program rolls $job back" "REFUSED PERMISSION_DENIED: .*credential" \
    program 0 "$table" --call=restore

  step "a hostile tenant with the cluster token (no node secret, no admin token) against $job"
  tenant() {
    /usr/bin/python3 "$repo/tests/security_client.py" "$stubs" "$sched" "$job" "$@" "${mtls[@]}" \
      --token="$(cat "$dir/cluster.token")"
  }
  expect_refused "Register at 'not an address'" "REFUSED INVALID_ARGUMENT: address" \
    tenant 0 0 --call=register_bad --target="not an address"
  expect_refused "Register at '../../etc:99999'" "REFUSED INVALID_ARGUMENT: address" \
    tenant 0 0 --call=register_bad --target="../../etc:99999"
  expect_refused "Register at the live server's address" "REFUSED PERMISSION_DENIED: .*node_secret" \
    tenant 0 0 --call=register_taken --target="$server"
  for n in 1 2; do
    expect_refused "Heartbeat as node $n without its secret" \
      "REFUSED PERMISSION_DENIED: .*node_secret" tenant "$n" 0 --call=heartbeat
  done
  expect_refused "BeginCheckpoint at clock 2^62 as no worker of $job" \
    "REFUSED PERMISSION_DENIED: .*BeginCheckpoint" tenant 0 0 --call=begin_checkpoint
  expect_refused "FinishCheckpoint COMPLETE with NaN seconds" \
    "REFUSED INVALID_ARGUMENT: write_seconds" tenant 0 1 --call=finish_checkpoint --nan
  expect_refused "FinishCheckpoint COMPLETE with rows 2^64-1 as no worker" \
    "REFUSED PERMISSION_DENIED: .*FinishCheckpoint" tenant 0 1 --call=finish_checkpoint
  expect_refused "ReportRestoreFailure as no worker of $job" \
    "REFUSED PERMISSION_DENIED: .*ReportRestoreFailure" tenant 0 0 --call=restore_failure
  expect_refused "60 registrations at once (cap: 40 a minute)" "REFUSED RESOURCE_EXHAUSTED" \
    tenant 0 0 --call=flood --count=60


  step "a program of another job (its job credential) against the scheduler, about $job"
  sched_program() {  # sched_program ARGS...: job-99's program calls the scheduler about $job
    /usr/bin/python3 "$repo/tests/security_client.py" "$stubs" "$sched" "$job" "$@" "${mtls[@]}" \
      --token="$(credential "$other")"
  }
  expect_refused "job-99's program registers a node" "REFUSED PERMISSION_DENIED: .*credential" \
    sched_program 0 0 --call=register_bad --target=127.0.0.1:1
  expect_refused "job-99's program registers at the live server's address" \
    "REFUSED PERMISSION_DENIED: .*credential" \
    sched_program 0 0 --call=register_taken --target="$server"
  expect_refused "job-99's program floods registrations" "REFUSED PERMISSION_DENIED: .*credential" \
    sched_program 0 0 --call=flood --count=5
  expect_refused "job-99's program heartbeats as node 1" "REFUSED PERMISSION_DENIED: .*credential" \
    sched_program 1 0 --call=heartbeat
  expect_refused "job-99's program begins a checkpoint of $job at clock 2^62" \
    "REFUSED PERMISSION_DENIED: .*credential" sched_program 0 0 --call=begin_checkpoint
  expect_refused "job-99's program marks a checkpoint of $job COMPLETE" \
    "REFUSED PERMISSION_DENIED: .*credential" sched_program 0 1 --call=finish_checkpoint
  expect_refused "job-99's program reports a restore failure of $job" \
    "REFUSED PERMISSION_DENIED: .*credential" sched_program 0 0 --call=restore_failure
  credential "$other" >"$dir/job-99.token"
  chmod 600 "$dir/job-99.token"
  # shellcheck disable=SC2046
  expect_refused "job-99's program submits a job with a NaN learning rate" \
    "PERMISSION_DENIED.*credential" \
    "$psctl_bin" --scheduler="$sched" $(tls psctl) --token_file="$dir/job-99.token" \
    submit "$dir/nan.textproto"
fi

step "the job is unaffected"
# wait_ended JOB SECONDS: waits until JOB has ended, at most SECONDS; its state in `state`.
wait_ended() {
  state=""
  for ((i = 0; i < $2 * 2; i++)); do
    state=$(admin status "$1" --output=json | /usr/bin/python3 -c \
      'import json,sys; print(json.load(sys.stdin).get("state",""))' 2>/dev/null || true)
    case $state in SUCCEEDED | FAILED | CANCELLED) return ;; esac
    sleep 0.5
  done
}
# test_accuracy JOB: the job's last evaluation (JobInfo.progress.testAccuracy).
test_accuracy() {
  admin status "$1" --output=json | /usr/bin/python3 -c \
    'import json,sys; print(json.load(sys.stdin).get("progress", {}).get("testAccuracy", -1))'
}
# The attacked job SUCCEEDS with the test accuracy of the same job run again, undisturbed (a
# sync job of one worker and a fixed seed learns the same).
check_undisturbed() {
  wait_ended "$job" 180
  admin status "$job"
  [ "$state" = SUCCEEDED ] || fail "$job ended '$state'"
  [ "$(daemons_alive)" -eq 2 ] || fail "a daemon stopped serving"
  attacked=$(test_accuracy "$job")
  control=$(admin submit "$dir/job.textproto" --name=control) || fail "admin submit refused"
  wait_ended "$control" 180
  [ "$state" = SUCCEEDED ] || fail "the undisturbed run $control ended '$state'"
  undisturbed=$(test_accuracy "$control")
  echo "test accuracy: $attacked attacked, $undisturbed undisturbed"
  /usr/bin/python3 -c "import sys; a, u = float(sys.argv[1]), float(sys.argv[2]);
sys.exit(not (u > 0.5 and abs(a - u) <= 0.005))" "$attacked" "$undisturbed" ||
    fail "$job's test accuracy $attacked is not within 0.005 of the undisturbed run's $undisturbed"
}
# The short check of --plaintext: the job is still RUNNING after the refusals, every daemon
# ALIVE; then it is cancelled.
check_still_running() {
  state=$(admin status "$job" --output=json | /usr/bin/python3 -c \
    'import json,sys; print(json.load(sys.stdin).get("state",""))')
  [ "$state" = RUNNING ] || fail "$job is '$state' after the refusals"
  [ "$(daemons_alive)" -eq 2 ] || fail "a daemon stopped serving"
  admin cancel "$job" >/dev/null || fail "cannot cancel $job"
  echo "$job was RUNNING after the refusals, every daemon ALIVE; cancelled (--plaintext)"
}
# A program job trains on the job credential its worker hands it.
check_program_job() {
  if [ ! -d "$build/python/paramserver" ] || ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
    echo "note: no paramserver Python package or numpy: the program job check skips"
    return
  fi
  step "a program job trains on its job credential (not the cluster token)"
  cat >"$dir/probe.textproto" <<SPEC
name: "probe"
program {
  argv: ["/usr/bin/python3", "tests/programs/probe.py", "--mode=slow", "--sleep=0.05",
         "--steps=60", "--checkpoint_at=3"]
  working_dir: "$repo"
  env { key: "PYTHONPATH" value: "$build/python" }
}
tables { name: "w" kind: DENSE num_rows: 8 dim: 4 optimizer { kind: SGD learning_rate: 0.1 } }
num_workers: 1
consistency { mode: ASYNC }
SPEC
  probe=$(admin submit "$dir/probe.textproto") || fail "admin submit of the program job refused"
  wait_ended "$probe" 120
  admin status "$probe"
  [ "$state" = SUCCEEDED ] || fail "the program job $probe ended '$state'"
  echo "program job $probe SUCCEEDED on its job credential"
  # A job started from the checkpoint it asked for: its program carries out the restore order
  # the scheduler signed for the new job (an order the servers refused would fail the job).
  restored=$(admin submit "$dir/probe.textproto" --from_checkpoint="$probe") ||
    fail "a job from $probe's checkpoint was refused"
  wait_ended "$restored" 120
  admin status "$restored"
  [ "$state" = SUCCEEDED ] || fail "$restored, restored from $probe's checkpoint, ended '$state'"
  grep -q "restore of job $restored (shard epoch 1.*loaded" "$dir/server.log" ||
    fail "the server log has no restore of $restored"
  echo "program job $restored SUCCEEDED from $probe's checkpoint: a signed restore order"
}
if [ "$plaintext" = 1 ]; then
  check_still_running
else
  check_undisturbed
  check_program_job
fi

step "refusals are counted by reason"
metrics=$(curl -s "http://127.0.0.1:$(cat "$dir/sched.metrics")/metrics" 2>/dev/null ||
  /usr/bin/python3 -c "import urllib.request,sys; print(urllib.request.urlopen(sys.argv[1]).read().decode())" \
    "http://127.0.0.1:$(cat "$dir/sched.metrics")/metrics")
grep '^ps_auth_refused_total' <<<"$metrics"
for reason in missing_token wrong_token not_admin; do
  n=$(awk -v r="reason=\"$reason\"" 'index($0, "ps_auth_refused_total{") == 1 && index($0, r) {print $2}' <<<"$metrics")
  awk -v n="${n:-0}" 'BEGIN{exit !(n >= 1)}' || fail "ps_auth_refused_total{reason=\"$reason\"} is ${n:-absent}"
done
if [ "$plaintext" = 1 ]; then
  echo "PASS: in plaintext, tokens refuse strangers and a hostile tenant; $job was unaffected"
else
  echo "PASS: mutual TLS and tokens refuse strangers and a hostile tenant; $job SUCCEEDED with the undisturbed run's accuracy ($attacked, $undisturbed)"
fi
