#!/usr/bin/env bash
# Replicas on a real local cluster (deploy/local/cluster.sh: 2 servers, 2 workers): the same
# sync fashion_mlp job without and with `--replicas=1` ends with the same loss and accuracies
# (sync is deterministic: forwarding changes no row), and while the replicated job runs each
# server holds every row of the job's first layer (its own slots and the other's backups).
# Specs that cannot have backups are refused at submit. Failover (a dead server's backups
# promoted) is tested by tests/failover_test.sh.
# Usage: replicas_test.sh BUILD_DIR
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
source "$(dirname "$0")/lib/daemons.sh" ps_replicas
export BUILD_DIR=$build CLUSTER_RUN_DIR=$dir/cluster CLUSTER_GRACE_S=5
unset PS_SCHEDULER
down() { (cd "$repo" && deploy/local/cluster.sh down >"$dir/down.log" 2>&1) || true; cleanup; }
trap down EXIT
cd "$repo"
psctl=$build/tools/psctl

deploy/local/cluster.sh up --servers=2 --workers=2 --worker_flags="--work_dir=$dir/w" \
  >"$dir/up.log" 2>&1 && source "$CLUSTER_RUN_DIR/env" ||
  fail "cluster.sh up failed: $(tail -5 "$dir/up.log")"
# The servers' /metrics addresses (psctl nodes: NODE ROLE STATE ADDRESS METRICS ...).
metrics=$("$psctl" nodes | awk '$2 == "server" && $3 == "ALIVE" { print $5 }')
[ "$(wc -l <<<"$metrics")" = 2 ] || fail "want 2 live servers: $("$psctl" nodes)"

echo "== specs that cannot have backups are refused"
for flags in "--num_servers=2 --replicas=2" "--num_servers=0 --replicas=1"; do
  # shellcheck disable=SC2086
  if out=$("$psctl" submit --model=fashion_mlp --num_workers=2 $flags 2>&1); then
    fail "submit $flags was accepted: $out"
  fi
  grep -q "replication.replicas" <<<"$out" || fail "submit $flags: $out"
  echo "  $flags: $out"
done

job_args=(--model=fashion_mlp --consistency=sync --num_workers=2 --num_servers=2 --epochs=2
  --seed=3)

# Waits for job $1 to end; prints its progress lines. With $2 = "rows", also watches the servers'
# rows of table weights0 while it runs and prints "rows A B" once both held all 784.
run_job() {
  local job=$1 watch=${2:-} seen=""
  for _ in $(seq 1 1200); do
    local state
    state=$("$psctl" status "$job" | awk '$1 == "state:" { print $2 }')
    case "$state" in SUCCEEDED | FAILED | CANCELLED) break ;; esac
    if [ -n "$watch" ] && [ -z "$seen" ]; then
      local counts=()
      for m in $metrics; do
        counts+=("$(curl -s "http://$m/metrics" |
          awk -v j="$job" '$1 == "ps_server_rows{job=\"" j "\",table=\"weights0\"}" { print $2 }')")
      done
      [ "${counts[0]:-0}" = 784 ] && [ "${counts[1]:-0}" = 784 ] && seen="rows ${counts[*]}"
    fi
    sleep 0.2
  done
  "$psctl" status "$job" | grep -E "^state:|loss" || true
  [ -z "$seen" ] || echo "$seen"
}

echo "== the job without replicas"
plain=$("$psctl" submit "${job_args[@]}" --name=plain)
plain_out=$(run_job "$plain")
echo "$plain_out"
grep -q "SUCCEEDED" <<<"$plain_out" || fail "$plain did not succeed"

echo "== the same job with --replicas=1"
replicated=$("$psctl" submit "${job_args[@]}" --name=replicated --replicas=1)
replicated_out=$(run_job "$replicated" rows)
echo "$replicated_out"
grep -q "SUCCEEDED" <<<"$replicated_out" || fail "$replicated did not succeed"
grep -q "^rows 784 784" <<<"$replicated_out" ||
  fail "the servers never held every row of weights0 (no backup copies seen)"
"$psctl" status "$replicated" | grep -q "^replicas: *1 backup per slot" ||
  fail "psctl status shows no replicas line: $("$psctl" status "$replicated")"
# Same losses and accuracies: the numbers after "loss" and "accuracy" (throughput aside).
numbers() { grep -E "loss" <<<"$1" | sed -E 's/[0-9]+ samples\/s//' | grep -oE "[0-9]+\.[0-9]+%?"; }
[ "$(numbers "$plain_out")" = "$(numbers "$replicated_out")" ] ||
  fail "the replicated job trained differently: $plain_out vs $replicated_out"
if grep -h "left out of replication" "$CLUSTER_RUN_DIR"/*.log; then
  fail "a primary gave up on a backup"
fi
echo "PASS"
