#!/usr/bin/env bash
# --cpus on the daemons: a ps_server started with the last CPU this test may use runs every one
# of its threads there and serves; lists that are malformed or name CPUs the process may not use
# stop each daemon at start (a non-zero exit) with a message naming the flag.
# Usage: daemon_cpus_test.sh PS_SERVER PS_WORKER PS_SCHEDULER
set -uo pipefail
server_bin=$1 worker_bin=$2 scheduler_bin=$3
source "$(dirname "$0")/lib/daemons.sh" daemon_cpus  # dir, pids, fail, cleanup

allowed=$(awk '/^Cpus_allowed_list/{print $2}' /proc/self/status)
last=$(taskset -pc $$ | sed 's/.*: //' | tr ',' '\n' | sed 's/.*-//' | sort -n | tail -1)
echo "this test may use CPUs $allowed; the server gets CPU $last"

"$server_bin" --listen=127.0.0.1:0 --port_file="$dir/port" --metrics_listen=off \
  --health_listen=off --cpus="$last" >"$dir/server.log" 2>&1 &
pid=$!
pids+=("$pid")
for _ in $(seq 100); do [ -s "$dir/port" ] && break; sleep 0.1; done
if [ ! -s "$dir/port" ]; then
  fail "ps_server --cpus=$last did not start"
else
  threads=$(ls /proc/$pid/task | wc -l)
  others=$(grep -h Cpus_allowed_list /proc/$pid/task/*/status | awk -v c="$last" '$2 != c' | wc -l)
  [ "$others" -eq 0 ] || fail "$others of $threads threads run outside CPU $last"
  grep -q "running on CPUs $last (1 of" "$dir/server.log" || fail "the log does not say the CPUs"
  echo "ok: ps_server's $threads threads all on CPU $last, serving on port $(cat "$dir/port")"
fi

for bin in "$server_bin" "$worker_bin" "$scheduler_bin"; do
  # Reversed, not a number, named twice, a CPU this host lacks (1023), beyond any (5000).
  for bad in "3-1" "x" "0,0" "1023" "5000"; do
    "$bin" --cpus="$bad" >"$dir/out" 2>&1 </dev/null &
    p=$!
    for _ in $(seq 100); do kill -0 $p 2>/dev/null || break; sleep 0.1; done
    if kill -0 $p 2>/dev/null; then
      kill $p; wait $p 2>/dev/null
      fail "$(basename "$bin") --cpus=$bad kept running"
    fi
    wait $p
    rc=$?
    if [ "$rc" -eq 0 ] || ! grep -q -- "--cpus: " "$dir/out"; then
      fail "$(basename "$bin") --cpus=$bad: exit $rc, want an error naming --cpus: $(cat "$dir/out")"
    else
      echo "ok: $(basename "$bin") --cpus=$bad: $(grep -- '--cpus: ' "$dir/out" | head -1)"
    fi
  done
done
echo "PASS"
