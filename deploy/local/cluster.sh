#!/usr/bin/env bash
# A whole cluster on this machine: one ps_scheduler, N ps_server and M ps_worker daemons on
# 127.0.0.1 with free ports. Builds nothing: expects the binaries in ${BUILD_DIR:-build}.
#
# Usage: deploy/local/cluster.sh COMMAND
#   up [--servers=N] [--workers=M] [--fresh]   start the cluster (default 2 servers, 2 workers)
#        [--server_flags="..."] [--worker_flags="..."]   extra flags for every server / worker
#                                              --fresh: forget the scheduler's state (jobs,
#                                              nodes) and the checkpoints
#   down                                       stop everything (TERM, then KILL after 10 s)
#   status                                     which daemons run, and `psctl nodes`
#   kill-worker N | kill-server N              kill -9 worker / server N (fault demos)
#   add-worker | add-server                    start one more worker / server
#   prometheus                                 start a Prometheus (free port) that scrapes the
#                                              cluster; prints its URL; `down` stops it
#
# Everything lives in run/cluster/ (or $CLUSTER_RUN_DIR, relative to the repository root):
# logs (*.log), pid files (*.pid), the scheduler's state (scheduler/) and env
# (`export PS_SCHEDULER=...`: after `source run/cluster/env`, psctl finds the cluster without
# --scheduler). Daemons whose binary
# has --metrics_listen serve /metrics on a free loopback port (run/cluster/<name>.metrics_port);
# prometheus-targets.json lists them for deploy/prometheus/prometheus.yml (file_sd).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
run=${CLUSTER_RUN_DIR:-run/cluster}
scheduler_bin=$build/scheduler/ps_scheduler
server_bin=$build/server/ps_server
worker_bin=$build/worker/ps_worker
psctl=$build/tools/psctl
prometheus_bin=${PROMETHEUS:-prometheus}
wait_s=${CLUSTER_WAIT_S:-60}  # longest `up` waits for the nodes to register
grace_s=${CLUSTER_GRACE_S:-10}

die() { echo "cluster: $*" >&2; exit 1; }

# alive PIDFILE: the daemon recorded in PIDFILE runs (and is still one of ours).
alive() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -qa "ps_" "/proc/$pid/cmdline" 2>/dev/null
}

# has_metrics BINARY: the binary takes --metrics_listen (older builds do not; --help exits 1).
has_metrics() {
  grep -q metrics_listen <<<"$("$1" --help 2>&1 || true)"
}

# start NAME BINARY FLAGS...: starts a daemon in its own session (it outlives this script),
# serving /metrics on a free loopback port when the binary can.
start() {
  local name=$1 bin=$2
  shift
  rm -f "$run/$name.metrics_port"
  local metrics=()
  has_metrics "$bin" &&
    metrics=(--metrics_listen=127.0.0.1:0 --metrics_port_file="$run/$name.metrics_port")
  # Ours first: a --metrics_listen in --server_flags / --worker_flags wins.
  setsid "$bin" "${metrics[@]}" "${@:2}" >"$run/$name.log" 2>&1 </dev/null &
  echo $! >"$run/$name.pid"
}

# write_targets: run/cluster/prometheus-targets.json (Prometheus file_sd) with the /metrics
# address of every running daemon that has one. Called once the daemons registered, by when
# they have written their metrics port files; waits 5 s at most for a late one.
write_targets() {
  local f name role entries=() port
  for f in "$run"/scheduler.pid "$run"/server*.pid "$run"/worker*.pid; do
    alive "$f" || continue  # also false for a missing file
    name=$(basename "$f" .pid)
    role=${name%%[0-9]*}
    local bin_var="${role}_bin"
    has_metrics "${!bin_var}" || continue
    for _ in $(seq 50); do
      [ -s "$run/$name.metrics_port" ] && break
      alive "$f" || break
      sleep 0.1
    done
    port=$(cat "$run/$name.metrics_port" 2>/dev/null) || {
      echo "cluster: $name wrote no $run/$name.metrics_port; not scraped" >&2; continue; }
    entries+=("{\"targets\": [\"127.0.0.1:$port\"], \"labels\": {\"role\": \"$role\", \"node\": \"$name\"}}")
  done
  local IFS=,
  # Written next to the old file and renamed: Prometheus never reads half a file.
  printf '[%s]\n' "${entries[*]}" | sed 's/},{/},\n {/g' >"$run/prometheus-targets.json.tmp"
  mv "$run/prometheus-targets.json.tmp" "$run/prometheus-targets.json"
}

# wait_port NAME: prints the port the daemon wrote to run/NAME.port.
wait_port() {
  local name=$1
  for _ in $(seq $((wait_s * 10))); do
    [ -s "$run/$name.port" ] && { cat "$run/$name.port"; return 0; }
    alive "$run/$name.pid" || break
    sleep 0.1
  done
  echo "cluster: $name did not start; the end of $run/$name.log:" >&2
  tail -n 20 "$run/$name.log" >&2
  return 1
}

scheduler_address() {
  [ -s "$run/scheduler.port" ] || die "no scheduler port in $run/ (is the cluster up?)"
  echo "127.0.0.1:$(cat "$run/scheduler.port")"
}

next_index() {  # next_index server|worker: the first N without run/cluster/<role>N.pid
  local i=0
  while [ -e "$run/$1$i.pid" ]; do i=$((i + 1)); done
  echo "$i"
}

start_server() {
  local i=$1
  rm -f "$run/server$i.port"
  # shellcheck disable=SC2086  # server_flags is a list of flags
  # Servers write checkpoints only under the scheduler's default root (beside its state dir).
  local roots=$run/checkpoints
  case $roots in /*) ;; *) roots=$PWD/$roots ;; esac
  start "server$i" "$server_bin" --scheduler="$(scheduler_address)" --listen=127.0.0.1:0 \
    --port_file="$run/server$i.port" --checkpoint_roots="$roots" ${server_flags:-}
}

start_worker() {
  local i=$1 on_host=$2
  # Every worker runs on this host: they share its cores (--workers_on_host sets the default of
  # --cpu_threads; a --cpu_threads in --worker_flags wins).
  # shellcheck disable=SC2086
  start "worker$i" "$worker_bin" --scheduler="$(scheduler_address)" \
    --workers_on_host="$on_host" ${worker_flags:-}
}

# The pids of ours that `psctl nodes` shows ALIVE, one per line (from the HOST/PID column,
# found by its shape: columns were added before it).
alive_node_pids() {
  "$psctl" --scheduler="$(scheduler_address)" nodes 2>/dev/null |
    awk '$3 == "ALIVE" { for (i = 4; i <= NF; i++) if ($i ~ /\/[0-9]+$/) { n = split($i, a, "/"); print a[n]; break } }'
}

# wait_registered: waits until every started daemon shows ALIVE in `psctl nodes`.
wait_registered() {
  local want=() missing=() f
  for f in "$run"/server*.pid "$run"/worker*.pid; do
    [ -e "$f" ] && want+=("$(cat "$f")")
  done
  for _ in $(seq $((wait_s * 2))); do
    local registered
    registered=$(alive_node_pids || true)
    missing=()
    for pid in "${want[@]}"; do grep -qx "$pid" <<<"$registered" || missing+=("$pid"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    for f in "$run"/server*.pid "$run"/worker*.pid; do
      alive "$f" || { echo "cluster: $(basename "$f" .pid) exited; the end of its log:" >&2
                      tail -n 20 "${f%.pid}.log" >&2; return 1; }
    done
    sleep 0.5
  done
  echo "cluster: pids ${missing[*]} did not show ALIVE in psctl nodes within ${wait_s}s" >&2
  return 1
}

cmd_up() {
  local servers=2 workers=2 fresh=0
  server_flags="" worker_flags=""
  for arg in "$@"; do
    case $arg in
      --servers=*) servers=${arg#*=} ;;
      --workers=*) workers=${arg#*=} ;;
      --server_flags=*) server_flags=${arg#*=} ;;
      --worker_flags=*) worker_flags=${arg#*=} ;;
      --fresh) fresh=1 ;;
      *) die "up: unknown argument '$arg' (see the top of $0)" ;;
    esac
  done
  [[ $servers =~ ^[0-9]+$ && $workers =~ ^[0-9]+$ ]] || die "up: --servers and --workers take numbers"
  for b in "$scheduler_bin" "$server_bin" "$worker_bin" "$psctl"; do
    [ -x "$b" ] || die "$b is missing; build first: cmake --build $build --target ps_scheduler ps_server ps_worker psctl"
  done
  mkdir -p "$run"
  alive "$run/scheduler.pid" && die "already up (scheduler pid $(cat "$run/scheduler.pid")); run '$0 down' first"
  prometheus_alive && die "a Prometheus from an earlier cluster still runs; run '$0 down' first"
  rm -f "$run"/*.pid "$run"/*.port "$run"/*.metrics_port "$run"/*.log "$run/env" \
    "$run/prometheus-targets.json"
  [ "$fresh" -eq 1 ] && rm -rf "$run/scheduler" "$run/checkpoints"
  echo "$server_flags" >"$run/server_flags"
  echo "$worker_flags" >"$run/worker_flags"

  start scheduler "$scheduler_bin" --listen=127.0.0.1:0 --state_dir="$run/scheduler" \
    --port_file="$run/scheduler.port"
  wait_port scheduler >/dev/null || { cmd_down >/dev/null; exit 1; }
  local address
  address=$(scheduler_address)
  for i in $(seq 0 $((servers - 1))); do start_server "$i"; done
  for i in $(seq 0 $((workers - 1))); do start_worker "$i" "$workers"; done
  for i in $(seq 0 $((servers - 1))); do wait_port "server$i" >/dev/null || { cmd_down >/dev/null; exit 1; }; done
  wait_registered || { cmd_down >/dev/null; exit 1; }
  write_targets
  # Exported: `source run/cluster/env` then hands it to psctl and every other child.
  echo "export PS_SCHEDULER=$address" >"$run/env"
  echo "cluster up: scheduler $address, $servers servers, $workers workers; logs in $run/"
  "$psctl" --scheduler="$address" nodes
  echo
  echo "Use it with:  source $run/env   (export PS_SCHEDULER=$address)"
  echo "              $psctl submit deploy/jobs/fashion_mlp.textproto"
  [ -s "$run/scheduler.metrics_port" ] &&
    echo "Metrics:      $0 prometheus   (targets in $run/prometheus-targets.json)"
  return 0
}

cmd_down() {
  [ -d "$run" ] || { echo "cluster: nothing to stop"; return 0; }
  local pids=() f
  # Workers first, then servers, then the scheduler: nobody reports the others missing.
  for f in "$run"/worker*.pid "$run"/server*.pid "$run"/scheduler.pid "$run"/prometheus.pid; do
    [ -e "$f" ] || continue
    if alive "$f" || { [ "$f" = "$run/prometheus.pid" ] && prometheus_alive; }; then
      kill -TERM "$(cat "$f")" 2>/dev/null || true
      pids+=("$(cat "$f")")
    fi
  done
  for _ in $(seq $((grace_s * 10))); do
    local left=()
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && left+=("$pid"); done
    pids=("${left[@]}")
    [ ${#pids[@]} -eq 0 ] && break
    sleep 0.1
  done
  if [ ${#pids[@]} -gt 0 ]; then
    echo "cluster: still running after ${grace_s}s, killing: ${pids[*]}"
    kill -KILL "${pids[@]}" 2>/dev/null || true
  fi
  rm -f "$run"/*.pid "$run"/*.port "$run"/*.metrics_port "$run/env" "$run/prometheus-targets.json" \
    "$run/prometheus.url"
  echo "cluster down (logs and scheduler state kept in $run/)"
}

cmd_status() {
  local any=0 f
  for f in "$run"/scheduler.pid "$run"/server*.pid "$run"/worker*.pid; do
    [ -e "$f" ] || continue
    any=1
    if alive "$f"; then state=running; else state=exited; fi
    printf '%-10s pid %-8s %s\n' "$(basename "$f" .pid)" "$(cat "$f")" "$state"
  done
  if prometheus_alive; then
    any=1
    printf '%-10s pid %-8s running: %s\n' prometheus "$(cat "$run/prometheus.pid")" \
      "$(cat "$run/prometheus.url" 2>/dev/null)"
  fi
  [ "$any" -eq 1 ] || { echo "cluster: not up"; return 3; }
  if alive "$run/scheduler.pid"; then
    echo
    "$psctl" --scheduler="$(scheduler_address)" nodes
  fi
}

cmd_kill() {  # cmd_kill worker|server N
  local f="$run/$1$2.pid"
  [ -n "${2:-}" ] || die "usage: $0 kill-$1 N"
  alive "$f" || die "$1 $2 is not running"
  kill -KILL "$(cat "$f")"
  echo "killed $1 $2 (pid $(cat "$f")); the scheduler declares it dead after its heartbeat timeout"
}

cmd_add() {  # cmd_add worker|server
  alive "$run/scheduler.pid" || die "the cluster is not up"
  server_flags=$(cat "$run/server_flags" 2>/dev/null || true)
  worker_flags=$(cat "$run/worker_flags" 2>/dev/null || true)
  local i
  i=$(next_index "$1")
  "start_$1" "$i"
  [ "$1" = server ] && { wait_port "server$i" >/dev/null || exit 1; }
  write_targets
  echo "started $1 $i (pid $(cat "$run/$1$i.pid")); log in $run/$1$i.log"
}

prometheus_alive() {
  local pid
  pid=$(cat "$run/prometheus.pid" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -qa "prometheus" "/proc/$pid/cmdline" 2>/dev/null
}

# cmd_prometheus: a Prometheus on a free loopback port scraping the cluster through
# deploy/prometheus/prometheus.yml (file_sd on run/cluster/prometheus-targets.json); its data in
# run/cluster/prometheus/, its log in run/cluster/prometheus.log.
cmd_prometheus() {
  command -v "$prometheus_bin" >/dev/null || die "no $prometheus_bin (Debian: apt-get install prometheus)"
  mkdir -p "$run"
  if prometheus_alive; then
    echo "Prometheus already runs (pid $(cat "$run/prometheus.pid")): $(cat "$run/prometheus.url")"
    return 0
  fi
  [ -s "$run/prometheus-targets.json" ] ||
    echo "cluster: no $run/prometheus-targets.json yet (cluster not up, or binaries without --metrics_listen)" >&2
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  setsid "$prometheus_bin" --config.file=deploy/prometheus/prometheus.yml \
    --storage.tsdb.path="$run/prometheus" --web.listen-address="127.0.0.1:$port" \
    >"$run/prometheus.log" 2>&1 </dev/null &
  echo $! >"$run/prometheus.pid"
  local url="http://127.0.0.1:$port"
  for _ in $(seq $((wait_s * 10))); do
    curl -fs "$url/-/ready" >/dev/null 2>&1 && {
      echo "$url" >"$run/prometheus.url"
      echo "Prometheus: $url   (e.g. $url/graph?g0.expr=ps_worker_samples_per_second)"
      echo "Grafana: import deploy/grafana/ps-cluster.json with this Prometheus as data source"
      return 0
    }
    prometheus_alive || break
    sleep 0.1
  done
  echo "cluster: Prometheus did not start; the end of $run/prometheus.log:" >&2
  tail -n 20 "$run/prometheus.log" >&2
  return 1
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  kill-worker) cmd_kill worker "${2:-}" ;;
  kill-server) cmd_kill server "${2:-}" ;;
  add-worker) cmd_add worker ;;
 add-server) cmd_add server ;;
  prometheus) cmd_prometheus ;;
  *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
