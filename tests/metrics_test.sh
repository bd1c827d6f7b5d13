#!/usr/bin/env bash
# Observability end to end, with real daemons on loopback and a real Prometheus:
#  1. every daemon's /metrics passes `promtool check metrics` (format and lint);
#  2. deploy/prometheus/prometheus.yml passes `promtool check config`, and every PromQL
#     expression of deploy/grafana/ps-cluster.json parses (queried on the Prometheus below);
#  3. a Prometheus scraping the cluster (file_sd, 1 s) sees a fashion_mlp job (1 epoch) train:
#     the job's ps_worker_steps_total rose, and the keys the servers count as pushed equal, exactly,
#     the keys the workers count as pushed; once it ended, both servers dropped it;
#  4. grpc.health.v1 answers SERVING on the scheduler, each server's data port and each worker's
#     --health_listen port, and a server stopped with SIGTERM stops answering SERVING.
# Usage: metrics_test.sh BUILD_DIR     (exit 77: skipped, prometheus/promtool/curl missing)
set -euo pipefail
for tool in prometheus promtool curl python3; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed (Debian: apt-get install prometheus curl)"; exit 77; }
done
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
sched_bin=$build/scheduler/ps_scheduler server_bin=$build/server/ps_server
worker_bin=$build/worker/ps_worker psctl_bin=$build/tools/psctl
dashboard=$src/deploy/grafana/ps-cluster.json

source "$src/tests/lib/daemons.sh" ps_metrics
# wait_for SECONDS WHAT COMMAND...: until COMMAND succeeds, or FAIL after SECONDS.
wait_for() {
  local limit=$1 what=$2
  shift 2
  local end=$((SECONDS + limit))
  until "$@"; do
    [ $SECONDS -lt $end ] || fail "$what (waited ${limit}s)"
    sleep 0.2
  done
}
has_content() { [ -s "$1" ]; }

for b in "$sched_bin" "$server_bin" "$worker_bin" "$psctl_bin"; do
  [ -x "$b" ] || fail "$b is missing"
  grep -q metrics_listen <<<"$("$b" --help 2>&1 || true)" || [ "$b" = "$psctl_bin" ] ||
    fail "$b has no --metrics_listen flag"
done
grep -q health_listen <<<"$("$worker_bin" --help 2>&1 || true)" || fail "ps_worker has no --health_listen flag"

# ---------------------------------------------------------------------------------------------
# gRPC health without a gRPC client: curl speaks HTTP/2 with prior knowledge (h2c). The request
# is one gRPC message frame (flag 0, length 0: an empty HealthCheckRequest, i.e. the whole
# server); the answer's message is HealthCheckResponse{status = 1 SERVING | 2 NOT_SERVING}, on
# the wire 08 01 / 08 02 after the 5-byte frame header.
health_ok=1
curl --version | grep -q HTTP2 || { echo "note: curl without HTTP/2; health checks skipped"; health_ok=0; }
# health HOST:PORT: prints SERVING, NOT_SERVING, UNKNOWN, NO_ANSWER or grpc-status=N.
health() {
  local out=$dir/health.$$ hdr=$dir/health_hdr.$$
  rm -f "$out" "$hdr"
  if ! printf '\x00\x00\x00\x00\x00' |
      curl -s --http2-prior-knowledge --max-time 3 -X POST \
        -H 'content-type: application/grpc' -H 'te: trailers' \
        --data-binary @- -D "$hdr" -o "$out" "http://$1/grpc.health.v1.Health/Check"; then
    echo NO_ANSWER; return 0
  fi
  local code
  code=$(tr -d '\r' <"$hdr" | sed -n 's/^grpc-status: *//p' | tail -1)
  if [ -n "$code" ] && [ "$code" != 0 ]; then echo "grpc-status=$code"; return 0; fi
  case "$(od -An -tx1 -v "$out" | tr -d ' \n')" in
    00000000020801) echo SERVING ;;
    00000000020802) echo NOT_SERVING ;;
    0000000002080?|0000000000) echo UNKNOWN ;;
    *) echo "UNPARSED:$(od -An -tx1 -v "$out" | tr -d '\n')" ;;
  esac
}
expect_serving() {  # expect_serving NAME HOST:PORT
  local h
  h=$(health "$2")
  [ "$h" = SERVING ] || fail "grpc.health.v1.Health/Check on $1 ($2) answered $h, not SERVING"
  echo "ok: $1 health SERVING"
}

# ---------------------------------------------------------------------------------------------
echo "== the cluster: scheduler, 2 servers, 2 workers, each with /metrics on a free port"
metrics_flags() { echo "--metrics_listen=127.0.0.1:0 --metrics_port_file=$dir/$1.metrics_port"; }
# shellcheck disable=SC2046  # metrics_flags is a list of flags
"$sched_bin" --listen=127.0.0.1:0 --port_file="$dir/scheduler.port" --state_dir="$dir/state" \
  $(metrics_flags scheduler) >"$dir/scheduler.log" 2>&1 &
pids+=($!)
wait_for 30 "the scheduler wrote no port file" has_content "$dir/scheduler.port"
sched=127.0.0.1:$(cat "$dir/scheduler.port")
psctl() { "$psctl_bin" --scheduler="$sched" "$@"; }
for i in 0 1; do
  # shellcheck disable=SC2046
  "$server_bin" --listen=127.0.0.1:0 --scheduler="$sched" --port_file="$dir/server$i.port" \
    --checkpoint_roots="$dir/checkpoints" $(metrics_flags "server$i") >"$dir/server$i.log" 2>&1 &
  pids+=($!)
  server_pid[i]=$!
done
declare -A health_port
for i in 0 1; do
  health_port[worker$i]=$(free_port)
  # shellcheck disable=SC2046
  "$worker_bin" --scheduler="$sched" --rpc_timeout=60s \
    --health_listen="127.0.0.1:${health_port[worker$i]}" $(metrics_flags "worker$i") \
    >"$dir/worker$i.log" 2>&1 &
  pids+=($!)
done
alive_nodes() { [ "$(psctl nodes 2>/dev/null | grep -c ALIVE)" -ge 4 ]; }
wait_for 60 "4 nodes did not show ALIVE in psctl nodes" alive_nodes
names=(scheduler server0 server1 worker0 worker1)
declare -A metrics
for n in "${names[@]}"; do
  wait_for 30 "$n wrote no metrics port file" has_content "$dir/$n.metrics_port"
  metrics[$n]=127.0.0.1:$(cat "$dir/$n.metrics_port")
done
echo "metrics: $(for n in "${names[@]}"; do printf '%s=%s ' "$n" "${metrics[$n]}"; done)"

echo "== 1. promtool check metrics on every /metrics"
for n in "${names[@]}"; do
  curl -sf --max-time 5 "http://${metrics[$n]}/metrics" >"$dir/$n.metrics.txt" ||
    fail "GET http://${metrics[$n]}/metrics ($n) failed"
  out=$(promtool check metrics <"$dir/$n.metrics.txt" 2>&1) ||
    fail "promtool check metrics on $n's /metrics: $out"
  grep -q '^ps_process_resident_memory_bytes{' "$dir/$n.metrics.txt" ||
    fail "$n exposes no ps_process_resident_memory_bytes"
  echo "ok: $n: $(grep -vc '^#' "$dir/$n.metrics.txt") samples, promtool clean"
done

echo "== 2. configs and dashboard"
promtool check config "$src/deploy/prometheus/prometheus.yml" >"$dir/promtool_config.log" 2>&1 ||
  { cat "$dir/promtool_config.log"; fail "promtool check config deploy/prometheus/prometheus.yml"; }
python3 -m json.tool "$dashboard" >/dev/null || fail "$dashboard is not valid JSON"
echo "ok: prometheus.yml valid, dashboard is JSON"
# docs/metrics.md documents exactly the metric families the daemons register.
# A family is registered with .Name("ps_...") or, in server_metrics.cc, Counters/Gauges/
# Histograms(registry, "ps_...", help), which clang-format may break after the "(".
grep -rhoE '(\.Name\(|registry, )"ps_[a-z0-9_]+"' \
    "$src"/{common,server,worker,scheduler} --include='*.cc' --include='*.h' \
    --exclude='*_test.cc' | grep -oE 'ps_[a-z0-9_]+' | sort -u >"$dir/names_code.txt"
# shellcheck disable=SC2016  # the backquotes are markdown's
grep -oE '^\| `ps_[a-z0-9_]+` \| (counter|gauge|histogram) \|' "$src/docs/metrics.md" |
  grep -oE 'ps_[a-z0-9_]+' | sort -u >"$dir/names_docs.txt"
[ -s "$dir/names_code.txt" ] || fail "found no .Name(\"ps_...\") in the sources"
diff "$dir/names_code.txt" "$dir/names_docs.txt" >"$dir/names_diff.txt" ||
  fail "docs/metrics.md and the code disagree (< code only, > docs only): $(cat "$dir/names_diff.txt")"
echo "ok: docs/metrics.md lists exactly the $(wc -l <"$dir/names_code.txt") metrics the code registers"

prom_port=$(free_port)
prom=http://127.0.0.1:$prom_port
# file_sd, as deploy/local/cluster.sh writes it for deploy/prometheus/prometheus.yml.
entries=()
for n in "${names[@]}"; do
  entries+=("{\"targets\": [\"${metrics[$n]}\"], \"labels\": {\"role\": \"${n%%[0-9]*}\", \"node\": \"$n\"}}")
done
(IFS=,; echo "[${entries[*]}]") >"$dir/targets.json"
cat >"$dir/prometheus.yml" <<EOF
global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: ps
    honor_labels: true
    file_sd_configs: [{files: ["$dir/targets.json"], refresh_interval: 1s}]
EOF
prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/prom_data" \
  --web.listen-address="127.0.0.1:$prom_port" >"$dir/prometheus.log" 2>&1 &
pids+=($!)
prom_ready() { curl -sf "$prom/-/ready" >/dev/null 2>&1; }
wait_for 60 "Prometheus did not become ready" prom_ready

# query_all EXPR: every sample of an instant query, "labels=value; ..." (for the log).
query_all() {
  curl -s --max-time 10 "$prom/api/v1/query" --data-urlencode "query=$1" |
    python3 -c '
import json, sys
d = json.load(sys.stdin)
r = d.get("data", {}).get("result", [])
print("; ".join("%s=%s" % (",".join("%s=%s" % kv for kv in sorted(x["metric"].items())) or "{}",
                           x["value"][1]) for x in r) or d.get("error") or "none")' 2>/dev/null
}
# query EXPR: prints the value of an instant query's single (or first) sample, "none" for an
# empty result, or "error: ..." when Prometheus refuses the expression.
query() {
  curl -s --max-time 10 "$prom/api/v1/query" --data-urlencode "query=$1" |
    python3 -c '
import json, sys
try:
    d = json.load(sys.stdin)
except ValueError:
    print("error: no JSON answer"); sys.exit()
if d.get("status") != "success":
    print("error:", d.get("errorType"), d.get("error")); sys.exit()
r = d["data"]["result"]
if d["data"]["resultType"] == "scalar": print(r[1])
elif not r: print("none")
else: print(r[0]["value"][1])'
}

# Every expression of the dashboard, with Grafana's variables replaced, must parse.
python3 - "$dashboard" >"$dir/dashboard_exprs.txt" <<'EOF'
import json, re, sys
def walk(o):
    if isinstance(o, dict):
        if isinstance(o.get("expr"), str): yield o["expr"]
        for v in o.values(): yield from walk(v)
    elif isinstance(o, list):
        for v in o: yield from walk(v)
d = json.load(open(sys.argv[1]))
for e in walk(d.get("panels", [])):
    e = re.sub(r"\$__(rate_)?interval|\$__range", "1m", e)
    e = re.sub(r"\$\{?\w+\}?", ".*", e)   # $job, ${job}, ...
    print(" ".join(e.split()))
EOF
nexpr=0
while IFS= read -r e; do
  r=$(query "$e")
  case "$r" in error*) fail "dashboard expression does not parse: $e -> $r" ;; esac
  nexpr=$((nexpr + 1))
done <"$dir/dashboard_exprs.txt"
[ "$nexpr" -gt 10 ] || fail "only $nexpr expressions found in $dashboard"
unknown=$(grep -oE 'ps_[a-z0-9_]+' "$dir/dashboard_exprs.txt" | sed -E 's/_(bucket|sum|count)$//' |
  sort -u | comm -23 - "$dir/names_code.txt")
[ -z "$unknown" ] || fail "the dashboard queries metrics no daemon registers: $unknown"
echo "ok: all $nexpr PromQL expressions of the dashboard parse and name known metrics"

all_up() { [ "$(query 'count(up{job="ps"} == 1)')" = 5 ]; }
wait_for 30 "Prometheus does not see 5 healthy targets: $(curl -s "$prom/api/v1/targets")" all_up
echo "ok: Prometheus scrapes 5 targets"

echo "== 4a. health: every daemon SERVING"
if [ "$health_ok" = 1 ]; then
  expect_serving scheduler "$sched"
  for i in 0 1; do expect_serving "server$i" "127.0.0.1:$(cat "$dir/server$i.port")"; done
  for i in 0 1; do expect_serving "worker$i" "127.0.0.1:${health_port[worker$i]}"; done
fi

echo "== 3. a fashion_mlp job (1 epoch) seen through Prometheus"
start_s=$SECONDS
job=$(psctl submit --model=fashion_mlp --name=metrics-test --num_workers=2 --num_servers=2 \
  --epochs=1) || fail "psctl submit failed"
echo "submitted $job"
job_state() {
  psctl --output=json status "$job" 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin).get("state",""))' 2>/dev/null || true
}
job_ended() { case "$(job_state)" in SUCCEEDED|FAILED|CANCELLED) return 0 ;; esac; return 1; }
wait_for 480 "job $job did not end (state $(job_state))" job_ended
[ "$(job_state)" = SUCCEEDED ] || fail "job $job ended $(job_state): $(psctl status "$job" 2>&1)"
echo "ok: $job SUCCEEDED after $((SECONDS - start_s))s"
range=$((SECONDS - start_s + 30))s

# The last scrapes after the end: wait until both sides are present and stable.
server_pushed="sum(ps_server_pushed_keys_total{job=\"$job\"})"
worker_pushed="sum(ps_worker_pushed_keys_total{job=\"$job\"})"
last=""
settled() {
  local now
  now="$(query "$server_pushed") $(query "$worker_pushed") $(query "sum(ps_worker_steps_total{job=\"$job\"})")"
  [ "$now" = "$last" ] && [[ $now != *none* ]] && return 0
  last=$now
  sleep 2  # > one scrape interval: two equal answers in a row mean the counters are final
  return 1
}
wait_for 60 "the job's counters did not settle in Prometheus (last: $last)" settled

steps=$(query "sum(ps_worker_steps_total{job=\"$job\"})")
increase=$(query "sum(increase(ps_worker_steps_total{job=\"$job\"}[$range]))")
echo "ps_worker_steps_total{job=\"$job\"}: $steps; increase over the run ($range): $increase"
python3 -c "import sys; sys.exit(0 if float('$steps') > 0 and float('$increase') > 0 else 1)" ||
  fail "ps_worker_steps_total did not rise: $steps, increase $increase"
sp=$(query "$server_pushed") wp=$(query "$worker_pushed")
echo "$server_pushed = $sp; $worker_pushed = $wp"
[ "$sp" = "$wp" ] || fail "servers counted $sp pushed keys, workers $wp"
python3 -c "import sys; sys.exit(0 if float('$sp') > 0 else 1)" || fail "no pushed keys counted"
for e in "sum(ps_server_pulled_keys_total{job=\"$job\"})" "sum(ps_worker_pulled_keys_total{job=\"$job\"})" \
         "sum by (method) (ps_server_requests_total)" "max(ps_worker_test_accuracy{job=\"$job\"})" \
         "sum by (state) (ps_scheduler_jobs)" "sum by (role, state) (ps_scheduler_nodes)"; do
  echo "  $e: $(query_all "$e")"
done
echo "ok: steps rose, pushed keys agree exactly"

echo "== 3b. the job's servers dropped it when it ended (docs/operations.md, When a job ends)"
# dropped_on NAME: the server counted a dropped job and exports no row series of the job.
dropped_on() {
  local text
  text=$(curl -sf --max-time 5 "http://${metrics[$1]}/metrics") || return 1
  grep -qE '^ps_server_dropped_jobs_total [1-9]' <<<"$text" &&
    ! grep -q "^ps_server_rows{job=\"$job\"" <<<"$text"
}
for n in server0 server1; do
  wait_for 30 "$n did not drop $job" dropped_on "$n"
  echo "ok: $n dropped $job: $(curl -sf --max-time 5 "http://${metrics[$n]}/metrics" |
    grep -E '^ps_server_dropped_(tables|bytes)_total' | tr '\n' ' ')"
done

echo "== 4b. health: a server stopped with SIGTERM stops answering SERVING"
if [ "$health_ok" = 1 ]; then
  addr=127.0.0.1:$(cat "$dir/server1.port")
  kill -TERM "${server_pid[1]}"
  not_serving() { h=$(health "$addr"); [ "$h" != SERVING ]; }
  wait_for 20 "server1 still answers SERVING after SIGTERM" not_serving
  echo "ok: server1 after SIGTERM: $h"
fi
echo "PASS"
