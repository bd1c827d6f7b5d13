# A cluster on the hosts of lib.sh (source lib.sh first, then this with the build dir set):
#   build=/path/to/build; source "$(dirname "$0")/cluster.sh"
#   start_scheduler HOST [FLAGS...]   ps_scheduler on 0.0.0.0:7000 of HOST; sets sched=IP:7000
#   start_server HOST NAME [FLAGS...] ps_server listening on and advertising HOST's IP:7100
#   start_worker HOST NAME [FLAGS...] ps_worker of the scheduler
#   psctl ARGS...                     psctl from the scheduler's host
#   wait_alive N                      until N nodes are ALIVE (bounded)
#   node_of ADDRESS / node_state ID   the node id registered at ADDRESS, a node's state
#   job_events JOB                    its events as "UNIX_MS<TAB>message" lines
#   status_field JOB EXPR, clock_of, accuracy_of, wait_job_clock, wait_job_end
# The binaries are linked (or copied) to $dir/bin first, so a rebuild of BUILD_DIR mid-run
# changes nothing
# (and one briefly missing during a rebuild is waited for, up to 3 minutes).
# Heartbeats: HB_INTERVAL (default 500ms), HB_TIMEOUT (default 2s).
mkdir -p "$dir/bin" "$dir/checkpoints"
for b in scheduler/ps_scheduler server/ps_server worker/ps_worker tools/psctl; do
  for _ in $(seq 180); do [ -x "$build/$b" ] && break; sleep 1; done
  # A hard link where it can (the linker writes a new file: the link keeps the old one), or a copy.
  for _ in $(seq 10); do
    ln -f "$build/$b" "$dir/bin/" 2>/dev/null || cp "$build/$b" "$dir/bin/" 2>/dev/null && break
    sleep 1
  done
  [ -x "$dir/bin/$(basename "$b")" ] || fail "no $build/$b"
done
sched_bin=$dir/bin/ps_scheduler server_bin=$dir/bin/ps_server
worker_bin=$dir/bin/ps_worker psctl_bin=$dir/bin/psctl
# has_flag BINARY FLAG: the binary takes --FLAG.
has_flag() { "$1" --helpfull 2>&1 | grep -q -- "-$2 "; }
# Flags the lead is adding (issue 14): passed when the binary has them.
opt_flag() {  # opt_flag BINARY FLAG VALUE: prints --FLAG=VALUE if BINARY takes it
  if has_flag "$1" "$2"; then echo "--$2=$3"; fi
}

psctl() { hx "${sched_host:?}" "$psctl_bin" --scheduler="$sched" "$@"; }
source "$(dirname "${BASH_SOURCE[0]}")/../lib/jobs.sh"  # json, clock_of, accuracy_of

start_scheduler() {  # start_scheduler HOST [FLAGS...]
  sched_host=$1
  shift
  local ip
  ip=$(host_ip "$sched_host")
  sched=$ip:7000
  # shellcheck disable=SC2046
  host_run "$sched_host" scheduler "$sched_bin" --listen=0.0.0.0:7000 \
    $(opt_flag "$sched_bin" advertise "$ip") --metrics_listen="$ip:9100" \
    --state_dir="$dir/state" --checkpoint_root="$dir/checkpoints" \
    --heartbeat_interval="${HB_INTERVAL:-500ms}" --heartbeat_timeout="${HB_TIMEOUT:-2s}" "$@"
  wait_until 30 "the scheduler answers at $sched" psctl list
}
start_server() {  # start_server HOST NAME [FLAGS...]
  local h=$1 name=$2 ip
  shift 2
  ip=$(host_ip "$h")
  host_run "$h" "$name" "$server_bin" --listen="$ip:7100" --advertise="$ip:7100" \
    --scheduler="$sched" --checkpoint_roots="$dir/checkpoints" --metrics_listen="$ip:9101" "$@"
}
start_worker() {  # start_worker HOST NAME [FLAGS...]
  local h=$1 name=$2 ip
  shift 2
  ip=$(host_ip "$h")
  # shellcheck disable=SC2046
  host_run "$h" "$name" "$worker_bin" --scheduler="$sched" $(opt_flag "$worker_bin" advertise "$ip") \
    --metrics_listen="$ip:9102" --health_listen="$ip:7201" --device=cpu \
    --rpc_timeout="${WORKER_RPC_TIMEOUT:-60s}" --recovery_wait="${WORKER_RECOVERY_WAIT:-60s}" \
    --log_every_steps=10 "$@"
}
alive_count() { psctl nodes 2>/dev/null | grep -c ALIVE; }
wait_alive() {  # wait_alive N: until N nodes are ALIVE
  wait_until 30 "$1 nodes alive" test_alive_at_least "$1"
}
test_alive_at_least() { [ "$(alive_count)" -ge "$1" ]; }
nodes_json() { psctl --output=json nodes 2>/dev/null; }
# node_of ADDRESS: the id of the newest node registered at ADDRESS ('' if none).
node_of() {
  json nodes "max([int(n['nodeId']) for n in d.get('nodes', []) if n.get('address') == '$1'] or [''])"
}
node_state() { json nodes "[n.get('state') for n in d.get('nodes', []) if n['nodeId'] == '$1'][0]"; }
status_field() { json status "$1" "$2"; }
job_state() { json status "$1" "d.get('state','')"; }
# job_events JOB: "UNIX_MS<TAB>message" per event (a checkpoint's "complete" and "pruned" left
# out: they come every few steps).
job_events() {
  psctl --output=json events "$1" 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
for e in d.get("events", []):
    m = e.get("message", "")
    if m.startswith("checkpoint ") and (" complete: " in m or m.endswith("pruned (keep last 3)")):
        continue
    print("%s\t%s" % (e.get("timeUnixMs", 0), e.get("message", "")))' 2>/dev/null || true
}
# job_clock_ge JOB N: the job's clock (as the scheduler last heard it) is at least N.
job_clock_ge() { [ "$(clock_of "$1")" -ge "$2" ] 2>/dev/null; }
wait_job_clock() {  # wait_job_clock JOB N [SECONDS]
  wait_until "${3:-120}" "job $1 at clock $2" job_clock_ge "$1" "$2"
}
job_ended() { case "$(job_state "$1")" in SUCCEEDED | FAILED | CANCELLED) return 0 ;; esac; return 1; }
# wait_job_end JOB SECONDS: until it ends; prints its state (TIMEOUT if it did not).
wait_job_end() { wait_done "$1" "$2"; }
# worker_clock LOGNAME: the last step a worker logged (its --log_every_steps lines), '' if none.
worker_clock() {
  { grep -oE '(step|clock)[ =]+[0-9]+' "$dir/$1.log" 2>/dev/null | tail -1 | grep -oE '[0-9]+$'; } ||
    true
}
# A fashion_mlp job spec at $dir/NAME.textproto: job_spec NAME EPOCHS [EXTRA TEXTPROTO...]
job_spec() {
  local f="$dir/$1.textproto"
  {
    echo "name: \"$1\""
    echo 'model: "fashion_mlp"'
    echo 'num_workers: 2'
    echo 'num_servers: 3'
    echo "epochs: $2"
    echo 'seed: 7'
    printf '%s\n' "${@:3}"
  } >"$f"
  echo "$f"
}
# gen_stubs: Python gRPC stubs of proto/ in $dir/py for ps_pull.py (protoc and
# grpc_python_plugin; Debian's grpc_tools predate proto3 optional). Returns 1 (with a note)
# when /usr/bin/python3 lacks grpcio or the tools are missing.
gen_stubs() {
  local proto_dir plugin
  proto_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../proto" && pwd)
  plugin=$(command -v grpc_python_plugin || true)
  if [ -z "$plugin" ] || ! command -v protoc >/dev/null ||
    ! /usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null; then
    echo "note: no protoc, grpc_python_plugin or python3 grpcio: no direct pulls"
    return 1
  fi
  mkdir -p "$dir/py"
  (cd "$proto_dir" && protoc -I. --python_out="$dir/py" --grpc_out="$dir/py" \
    --plugin=protoc-gen-grpc="$plugin" ps/v1/*.proto) || return 1
}
# direct_pull HOST ADDRESS JOB TABLE_ID SHARD_EPOCH SERVER_INDEX NUM_SERVERS [OWNERS]: ps_pull.py
# from HOST; prints its line, returns its exit code (0 served, 1 refused, 2 no answer).
direct_pull() {
  local h=$1
  shift
  hx "$h" /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/ps_pull.py" "$dir/py" "$@"
}
