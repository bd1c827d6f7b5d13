#!/usr/bin/env bash
# Issue 14 (a): a cluster of 6 hosts on one machine (network namespaces: the scheduler, 3
# servers and 2 workers each on its own host with its own address, one switch). The daemons
# talk only through those addresses (servers listen on and advertise their host's address, the
# scheduler listens on 0.0.0.0), psctl runs on the scheduler's host. A sync Fashion-MNIST job
# over all of them SUCCEEDS with a sane test accuracy, and every node registered with its own
# host's address. Needs root (exits 77 otherwise).
# Usage: tests/netns/multihost_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh" ps_netns_multihost
netns_require
source "$here/cluster.sh"

netns_hosts sched s0 s1 s2 w0 w1
mark "hosts up"
start_scheduler sched
for i in 0 1 2; do start_server "s$i" "server$i"; done
for i in 0 1; do start_worker "w$i" "worker$i"; done
wait_alive 5
mark "5 nodes registered"
psctl nodes
# Every server registered at its own host's address; nothing at a loopback address.
for i in 0 1 2; do
  [ -n "$(node_of "$(host_ip "s$i"):7100")" ] || fail "server$i is not registered at $(host_ip "s$i"):7100"
done
if nodes_json | grep -qE '"(address|metricsAddress)": "(127\.|localhost)'; then
  fail "a node registered a loopback address"
fi

spec=$(job_spec multihost 2 'consistency { mode: SYNC }')
job=$(psctl submit "$spec")
mark "submitted $job"
wait_job_clock "$job" 1 60
mark "$job training (clock $(clock_of "$job"))"
# The job runs on the 3 servers at their hosts' addresses.
addrs=$(status_field "$job" "' '.join(sorted(d.get('serverAddresses', [])))")
want=$(for i in 0 1 2; do echo "$(host_ip "s$i"):7100"; done | sort | xargs)
[ "$addrs" = "$want" ] || fail "servers of the job: '$addrs', expected '$want'"
state=$(wait_job_end "$job" 300)
mark "$job ended $state"
job_events "$job" | while IFS=$'\t' read -r t m; do mark_at "$t" "event: $m"; done
psctl status "$job"
[ "$state" = SUCCEEDED ] || fail "$job ended $state: $(status_field "$job" "d.get('reason','')")"
acc=$(accuracy_of "$job")
python3 -c "import sys; sys.exit(not $acc >= 80)" || fail "test accuracy $acc% < 80%"
timeline
echo "PASS: $job SUCCEEDED across 6 hosts, test accuracy $acc%"
