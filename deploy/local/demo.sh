#!/usr/bin/env bash
# The main demo, the way a cluster is used: builds the daemons, starts a scheduler, 2 parameter
# servers and 2 worker daemons on loopback (deploy/local/cluster.sh), submits the Fashion-MNIST
# MLP job (deploy/jobs/fashion_mlp.textproto: sync, 5 epochs) with psctl, follows its progress
# and prints the final test accuracy. The cluster is stopped on exit (Ctrl-C included).
# Usage: deploy/local/demo.sh [psctl submit flags, e.g. --epochs=2 --consistency=ssp]
# Logs go to run/cluster/.
set -euo pipefail
cd "$(dirname "$0")/../.."
deploy/install-deps.sh
build=${BUILD_DIR:-build}
export BUILD_DIR=$build
echo "== building ps_scheduler, ps_server, ps_worker and psctl in $build/"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target ps_scheduler ps_server ps_worker psctl -j"$(nproc)" |
  grep -E "error|Built target" || true
for b in scheduler/ps_scheduler server/ps_server worker/ps_worker tools/psctl; do
  [ -x "$build/$b" ] || { echo "build failed: no $build/$b"; exit 1; }
done
psctl=$build/tools/psctl

trap 'deploy/local/cluster.sh down >/dev/null 2>&1 || true' EXIT
trap 'exit 130' INT TERM
echo "== starting the cluster: 1 scheduler, 2 servers, 2 workers"
deploy/local/cluster.sh up --servers=2 --workers=2 --fresh
# shellcheck disable=SC1091
source run/cluster/env
export PS_SCHEDULER

echo "== submitting deploy/jobs/fashion_mlp.textproto $*"
job=$("$psctl" submit deploy/jobs/fashion_mlp.textproto "$@")
echo "== $job: following it (psctl status $job --watch)"
start=$(date +%s)
status=0
"$psctl" status "$job" --watch | tee run/cluster/watch.log || status=$?
if [ "$status" -ne 0 ]; then
  echo "== $job did not succeed (psctl exit $status); its events:"
  "$psctl" events "$job" || true
  exit "$status"
fi
echo "== $job's checkpoints (psctl checkpoints $job)"
"$psctl" checkpoints "$job" || true
accuracy=$(grep -o 'test accuracy [0-9.]*%' run/cluster/watch.log | tail -n 1)
echo "== done in $(($(date +%s) - start)) s: final ${accuracy:-test accuracy not reported}"
