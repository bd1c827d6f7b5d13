# Several hosts on one machine: a harness of network namespaces for the multi-host tests.
# Source it (bash, as root):
#   source "$(dirname "$0")/lib.sh" NAME      # NAME: the temp dir's prefix
#   netns_require                             # exits 77 (skip) without root or `ip netns`
#   netns_hosts sched s0 s1 w0                # one namespace (host) per name, on one switch
#   host_run s0 server0 "$server_bin" --listen="$(host_ip s0):7100" ...   # a daemon, log in $dir
# Layout (names unique per run: every namespace is psn<PID>-<name>, PID this shell's):
#   psn<PID>-switch   the switch: a bridge br0 with one port p-<host> per host
#   psn<PID>-<host>   a host: lo up, eth0 (the other end of p-<host>) with 10.77.<k>.<10+i>/24,
#                     k = PID % 200 + 20, i the host's position in netns_hosts
# The root namespace is not touched (no address, route or link is added there). Each run has
# its own bridge in its own namespace, so parallel runs never see each other's traffic.
#
# Faults:
#   host_cut HOST / host_heal HOST    the host's switch port down / up: the host keeps its
#                                     address and link, its packets are silently lost (a pulled
#                                     cable at the switch)
#   peer_block A B / peer_unblock A B traffic between A and B only, both directions: a
#                                     `blackhole` route to the other's /32 inside each
#                                     (local sends fail at once with EINVAL, nothing arrives)
#   host_shape HOST RATE [DELAY]      the host's link limited to RATE (tc: netem rate + delay,
#                                     or tbf where the kernel has no netem)
#   peer_block_silent A B / peer_unblock_silent A B   the same, silently lost instead: each side
#                                     resolves the other to an unused MAC (a permanent neighbour
#                                     entry), so frames leave but nobody takes them; connects
#                                     time out like across a real partition
# Always cleaned up (trap EXIT INT TERM): every process in the run's namespaces is SIGKILLed
# (`ip netns pids`), then the namespaces are deleted (their veths with them); the temp dir
# `dir` is removed unless `fail` ran (its logs are then kept and their tails printed). A run
# killed with SIGKILL leaves its namespaces behind: the next run removes those whose PID is gone.
#
# Also: mark MSG (a timeline line, seconds since the start; mark_t UNIX_MS MSG: at an earlier
# time), mark_at UNIX_MS MSG (an event stamped elsewhere, e.g. by the scheduler: not printed), timeline (prints them sorted), wait_until SECONDS
# DESC CMD... (polls CMD every 0.2 s; fail after SECONDS), now_ms.
set -uo pipefail

dir=$(mktemp -d "/tmp/${1:-ps_netns}_XXXXXX")
NETNS_PREFIX="psn$$-"
NETNS_SUBNET="10.77.$(($$ % 200 + 20))"
netns_names=()        # every namespace this run created (switch first)
declare -A netns_ip   # host -> address
netns_host_list=()
netns_t0_ms=$(date +%s%3N)
: >"$dir/timeline.txt"

now_ms() { date +%s%3N; }
# mark MSG: prints "[  12.3 s] MSG" and keeps it for `timeline`.
mark() { mark_t "$(now_ms)" "$@"; }
# mark_t UNIX_MS MSG: the same, at a time taken earlier (right after a fault, before asking
# psctl for the details the line shows).
mark_t() {
  local t=$1
  shift
  mark_at "$t" "$*"
  printf '[%7.1f s] %s\n' "$(awk -v a="$t" -v b="$netns_t0_ms" 'BEGIN{print (a-b)/1000}')" "$*"
}
mark_at() {  # mark_at UNIX_MS MSG
  printf '%s\t%s\n' "$1" "${*:2}" >>"$dir/timeline.txt"
}
timeline() {  # the timeline so far, sorted, seconds since the start
  echo "---- timeline (s since start) ----"
  sort -n -s -k1,1 "$dir/timeline.txt" | awk -F'\t' -v b="$netns_t0_ms" \
    '!seen[$0]++ { printf "%7.1f  %s\n", ($1-b)/1000, $2 }'
  echo "----------------------------------"
}

# fail MESSAGE: prints it, the timeline and the tail of every log; keeps $dir; exits 1.
fail() {
  echo "FAIL: $*"
  keep=1
  timeline
  for f in "$dir"/*.log; do
    [ -e "$f" ] && { echo "== $f"; grep -v "checkpoint" "$f" | tail -"${FAIL_LOG_LINES:-12}"; }
  done
  exit 1
}

# wait_until SECONDS DESC CMD...: until CMD succeeds (every 0.2 s); fail after SECONDS.
wait_until() {
  local limit=$1 desc=$2 deadline
  shift 2
  deadline=$(($(now_ms) + limit * 1000))
  until "$@" >/dev/null 2>&1; do
    [ "$(now_ms)" -lt "$deadline" ] || fail "timed out after ${limit}s waiting for: $desc"
    sleep 0.2
  done
}
# poll_until SECONDS CMD...: like wait_until, but returns 1 instead of failing.
poll_until() {
  local limit=$1 deadline
  shift
  deadline=$(($(now_ms) + limit * 1000))
  until "$@" >/dev/null 2>&1; do
    [ "$(now_ms)" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

# Kills every process of namespace $1 (SIGKILL), waits up to 5 s for them to go, deletes it.
netns_destroy() {
  local ns=$1 pids
  for _ in $(seq 25); do
    pids=$(ip netns pids "$ns" 2>/dev/null) || break
    [ -z "$pids" ] && break
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
    sleep 0.2
  done
  ip netns del "$ns" 2>/dev/null || true
}

netns_cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  exec 2>/dev/null  # no "Killed" notices of the daemons below
  local ns i
  # Hosts first (their daemons), the switch last.
  for ((i = ${#netns_names[@]} - 1; i >= 0; i--)); do netns_destroy "${netns_names[$i]}"; done
  wait 2>/dev/null || true
  if [ "${keep:-0}" = 1 ]; then echo "logs kept in $dir"; else rm -rf "$dir"; fi
  exit "$rc"
}
trap netns_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Namespaces left by runs that were SIGKILLed (their shell's PID is gone): removed.
netns_reap_stale() {
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^psn[0-9]+-'); do
    pid=${ns#psn}
    pid=${pid%%-*}
    [ "$pid" = $$ ] && continue
    kill -0 "$pid" 2>/dev/null && continue
    echo "removing namespace $ns left by an ended run (pid $pid)"
    netns_destroy "$ns"
  done
}

# Exits 77 (ctest: skipped) unless this runs as root and can make a namespace with a veth.
netns_require() {
  if [ "$(id -u)" != 0 ]; then echo "SKIP: needs root (network namespaces)"; exit 77; fi
  if ! command -v ip >/dev/null; then echo "SKIP: no ip (iproute2)"; exit 77; fi
  local probe="${NETNS_PREFIX}probe"
  if ! ip netns add "$probe" 2>/dev/null; then echo "SKIP: ip netns add fails here"; exit 77; fi
  netns_names+=("$probe")
  if ! ip -n "$probe" link add pa type veth peer name pb 2>/dev/null ||
    ! ip -n "$probe" link add pbr type bridge 2>/dev/null; then
    echo "SKIP: no veth or bridge in a namespace here"
    exit 77
  fi
  netns_destroy "$probe"
  unset 'netns_names[-1]'
  netns_reap_stale
}

ns_of() { echo "${NETNS_PREFIX}$1"; }
host_ip() { echo "${netns_ip[$1]:?unknown host $1}"; }
# hx HOST CMD...: runs CMD in the host's namespace (foreground).
hx() { local h=$1; shift; ip netns exec "$(ns_of "$h")" "$@"; }

# netns_hosts NAME...: the switch and one host per name (at most 200).
netns_hosts() {
  local sw i=0 h ns
  sw=$(ns_of switch)
  ip netns add "$sw" || fail "ip netns add $sw"
  netns_names+=("$sw")
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge || fail "bridge in $sw"
  ip -n "$sw" link set br0 up
  for h in "$@"; do
    ns=$(ns_of "$h")
    ip netns add "$ns" || fail "ip netns add $ns"
    netns_names+=("$ns")
    ip -n "$ns" link set lo up
    # Made inside the switch namespace (names are local there), the other end moved to the host.
    ip -n "$sw" link add "p-$h" type veth peer name eth0 netns "$ns" || fail "veth for $h"
    ip -n "$sw" link set "p-$h" master br0
    ip -n "$sw" link set "p-$h" up
    netns_ip[$h]="$NETNS_SUBNET.$((10 + i))"
    ip -n "$ns" addr add "${netns_ip[$h]}/24" dev eth0
    ip -n "$ns" link set eth0 up
    netns_host_list+=("$h")
    i=$((i + 1))
  done
  # Every host reaches every other (ARP through the bridge) before anything starts.
  local a=${netns_host_list[0]} b
  for b in "${netns_host_list[@]:1}"; do
    poll_until 10 host_reaches "$a" "$(host_ip "$b")" ||
      fail "host $a cannot reach $b ($(host_ip "$b"))"
  done
  echo "hosts on $NETNS_SUBNET.0/24 (namespaces ${NETNS_PREFIX}*):" \
    "$(for h in "${netns_host_list[@]}"; do printf '%s=%s ' "$h" "$(host_ip "$h")"; done)"
}

# host_run HOST LOGNAME CMD...: starts CMD as a daemon in HOST, stdout and stderr to
# $dir/LOGNAME.log; its pid in ${LOGNAME}_pid (LOGNAME: a shell identifier).
host_run() {
  local h=$1 name=$2
  shift 2
  ip netns exec "$(ns_of "$h")" "$@" >"$dir/$name.log" 2>&1 </dev/null &
  eval "${name}_pid=$!"
}
# host_kill PID: SIGKILL and reap one daemon started with host_run.
host_kill() { kill -9 "$1" 2>/dev/null; wait "$1" 2>/dev/null || true; }

host_cut() { ip -n "$(ns_of switch)" link set "p-$1" down; }
host_heal() { ip -n "$(ns_of switch)" link set "p-$1" up; }

peer_block() {
  hx "$1" ip route add blackhole "$(host_ip "$2")/32"
  hx "$2" ip route add blackhole "$(host_ip "$1")/32"
}
peer_unblock() {
  hx "$1" ip route del blackhole "$(host_ip "$2")/32" 2>/dev/null || true
  hx "$2" ip route del blackhole "$(host_ip "$1")/32" 2>/dev/null || true
}
peer_block_silent() {
  hx "$1" ip neigh replace "$(host_ip "$2")" lladdr 02:00:00:00:de:ad nud permanent dev eth0
  hx "$2" ip neigh replace "$(host_ip "$1")" lladdr 02:00:00:00:de:ad nud permanent dev eth0
}
peer_unblock_silent() {
  hx "$1" ip neigh del "$(host_ip "$2")" dev eth0 2>/dev/null || true
  hx "$2" ip neigh del "$(host_ip "$1")" dev eth0 2>/dev/null || true
}
# host_shape HOST RATE [DELAY]: limits what HOST sends on its link to RATE (a `tc` rate:
# 100mbit, 1gbit), with DELAY (e.g. 0.5ms) added where the kernel has netem (`netem rate`),
# else a token bucket (`tbf`) without delay. Both directions of a link between two shaped hosts
# are then limited (each host's egress).
host_shape() {
  local h=$1 rate=$2 delay=${3:-}
  if [ -n "$delay" ] &&
    hx "$h" tc qdisc replace dev eth0 root netem delay "$delay" rate "$rate" limit 100000 2>/dev/null; then
    return 0
  fi
  hx "$h" tc qdisc replace dev eth0 root tbf rate "$rate" burst 64kb latency 100ms ||
    fail "tc tbf on $h"
}
# host_reaches HOST IP: a TCP connect from HOST to IP's port 9 is answered within 2 s (accepted
# or refused; no ping needed).
host_reaches() {
  local err
  err=$(hx "$1" timeout 2 bash -c "exec 3<>/dev/tcp/$2/9" 2>&1) && return 0
  [[ "$err" == *refused* ]]
}
# tcp_open HOST IP:PORT: a TCP connect from HOST succeeds within 2 s.
tcp_open() {
  hx "$1" timeout 2 bash -c "exec 3<>/dev/tcp/${2%:*}/${2##*:}" 2>/dev/null
}
# log_marks FILE SINCE_MS PREFIX REGEX: a timeline line (at the line's own glog time, e.g.
# "I20261124 18:35:29.601730 ...") for each line of FILE matching REGEX at or after SINCE_MS.
log_marks() {
  local file=$1 since=$2 prefix=$3 regex=$4
  grep -E "$regex" "$file" 2>/dev/null | python3 -c '
import sys, time, datetime
since, prefix = int(sys.argv[1]), sys.argv[2]
for line in sys.stdin:
    try:
        t = datetime.datetime.strptime(line[1:25], "%Y%m%d %H:%M:%S.%f")
    except ValueError:
        continue
    ms = int(time.mktime(t.timetuple()) * 1000 + t.microsecond // 1000)
    if ms >= since:
        msg = line[25:].strip().split("] ", 1)[-1]
        print("%d\t%s%s" % (ms, prefix, msg[:240]))' "$since" "$prefix" >>"$dir/timeline.txt" || true
}
