#!/usr/bin/env bash
# docs/jobs.md's first commands, as a newcomer types them: deploy/local/cluster.sh up, `source`
# of the env file it writes, then psctl without --scheduler (it must find the cluster through
# the exported PS_SCHEDULER): psctl nodes, and a tiny program job (tests/programs/probe.py)
# submitted, watched and its log read when the Python package is built. The cluster runs in a
# temporary CLUSTER_RUN_DIR and is taken down at the end, whatever happens.
# Usage: local_cluster_test.sh BUILD_DIR
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
source "$(dirname "$0")/lib/daemons.sh" ps_local_cluster
export BUILD_DIR=$build CLUSTER_RUN_DIR=$dir/cluster CLUSTER_GRACE_S=5
unset PS_SCHEDULER
down() { (cd "$repo" && deploy/local/cluster.sh down >"$dir/down.log" 2>&1) || true; cleanup; }
trap down EXIT
cd "$repo"

echo "== deploy/local/cluster.sh up --servers=2 --workers=2 && source \$CLUSTER_RUN_DIR/env"
deploy/local/cluster.sh up --servers=2 --workers=2 --worker_flags="--work_dir=$dir/w" >"$dir/up.log" 2>&1 &&
  source "$CLUSTER_RUN_DIR/env" ||
  fail "cluster.sh up failed: $(tail -5 "$dir/up.log")"
[ -n "${PS_SCHEDULER:-}" ] || fail "the env file set no PS_SCHEDULER: $(cat "$CLUSTER_RUN_DIR/env")"
[ "$(bash -c 'echo "${PS_SCHEDULER:-}"')" = "$PS_SCHEDULER" ] ||
  fail "PS_SCHEDULER is not exported by the env file: $(cat "$CLUSTER_RUN_DIR/env")"

echo "== psctl nodes (no --scheduler)"
nodes=$("$build/tools/psctl" nodes 2>&1) || fail "psctl nodes failed: $nodes"
echo "$nodes"
[ "$(grep -c ALIVE <<<"$nodes")" -ge 4 ] || fail "fewer than 4 nodes alive"

if [ -d "$build/python/paramserver" ] && /usr/bin/python3 -c "import numpy" 2>/dev/null; then
  echo "== psctl submit, status --watch, logs (a 2-worker probe job)"
  cat >"$dir/probe.textproto" <<SPEC
name: "docs-probe"
program {
  argv: ["/usr/bin/python3", "tests/programs/probe.py", "--steps=5"]
  working_dir: "."
  env { key: "PYTHONPATH" value: "$build/python" }
}
tables { name: "w" kind: DENSE num_rows: 8 dim: 4 optimizer { kind: SGD learning_rate: 0.1 } }
num_workers: 2
num_servers: 2
SPEC
  JOB=$("$build/tools/psctl" submit "$dir/probe.textproto") || fail "psctl submit failed"
  # --watch exits 0 once the job SUCCEEDED.
  timeout 120 "$build/tools/psctl" status "$JOB" --watch --output=text >"$dir/watch.out" 2>&1 ||
    fail "$JOB did not succeed: $(tail -5 "$dir/watch.out")"
  tail -2 "$dir/watch.out"
  "$build/tools/psctl" logs "$JOB" | tee "$dir/logs.out"
  grep -q "probe done" "$dir/logs.out" || fail "psctl logs lacks the program's output"
else
  echo "(no Python package or numpy: no job submitted)"
fi

echo "== deploy/local/cluster.sh down"
deploy/local/cluster.sh down
echo "PASS"
