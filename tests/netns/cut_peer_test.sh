#!/usr/bin/env bash
# Issue 14 (c): one worker cut from one server only. 6 hosts (scheduler, 3 servers, 2 workers;
# heartbeat every 500 ms, dead after 2 s; workers: --rpc_timeout=20s --recovery_wait=20s). A
# sync Fashion-MNIST job on the 3 servers (a checkpoint every 50 steps); at clock 100 worker 0's
# host and server 0's host stop reaching each other, both directions (MODE=blackhole, the
# default: a blackhole route to the other's /32 in each, so sends fail at once; MODE=silent: each
# resolves the other to an unused MAC, packets are lost and connects time out). Everyone else
# still reaches everyone, so the scheduler sees every node alive. Two trials, one job each, the
# cut healed after 8 s (shorter than --rpc_timeout) and after 30 s (longer; HOLD_S="8 30" to
# choose). Checked per trial, within a bound (the job ends within 180 s of the cut):
#   - nothing hangs: the job ends, SUCCEEDED, or FAILED with a reason that names the server
#     worker 0 cannot reach (its address or node id); which one is printed;
#   - nothing applied twice: no server counts a duplicate push it applied (the servers' dedup
#     counters are printed: a duplicate is a retry that was recognised and NOT applied again),
#     and a SUCCEEDED job has a sane test accuracy.
# Prints a timeline: cut, the worker's first error, what the scheduler did, healed, the end.
# Usage: tests/netns/cut_peer_test.sh BUILD_DIR     (needs root; 77 otherwise)
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh" ps_netns_cut_peer
netns_require
source "$here/cluster.sh"
mode=${MODE:-blackhole}

netns_hosts sched s0 s1 s2 w0 w1
start_scheduler sched
for i in 0 1 2; do start_server "s$i" "server$i"; done
WORKER_RPC_TIMEOUT=20s WORKER_RECOVERY_WAIT=20s
for i in 0 1; do start_worker "w$i" "worker$i"; done
wait_alive 5
mark "5 nodes alive"

saddr=$(host_ip s0):7100
snode=$(node_of "$saddr")
results=()
# trial HOLD_S: a job, the cut at its clock 100, healed HOLD_S later; checks its end.
trial() {
  local hold_s=$1 job spec cut_at wid cut_lines healed=0 deadline seen_error=0 last_clock=-1
  local moving=0
  local stalled_since c state reason m i
  spec=$(job_spec "cut-peer-$hold_s" 4 'consistency { mode: SYNC }' 'checkpoint { every_steps: 50 }')
  job=$(psctl submit "$spec")
  mark "== trial: cut for ${hold_s}s: submitted $job"
  wait_job_clock "$job" 100 120
  case $mode in
    blackhole) peer_block w0 s0 ;;
    silent) peer_block_silent w0 s0 ;;
    *) fail "MODE must be blackhole or silent" ;;
  esac
  cut_at=$(now_ms)
  wid=$(grep -E "$job worker [0-9]+ epoch" "$dir/worker0.log" | head -1 |
    grep -oE "worker [0-9]+" | grep -oE "[0-9]+" || true)
  mark_t "$cut_at" "CUT ($mode): worker host w0 ($job worker ${wid:-?}) <-> server $saddr (node $snode) at clock $(clock_of "$job")"
  cut_lines=$(wc -l <"$dir/worker0.log")
  deadline=$((cut_at + 180 * 1000))
  stalled_since=$cut_at
  while ! job_ended "$job"; do
    [ "$(now_ms)" -lt "$deadline" ] || break
    if [ $seen_error = 0 ] && tail -n +"$((cut_lines + 1))" "$dir/worker0.log" |
      grep -qE "^[EW][0-9]"; then
      seen_error=1
      mark "worker0's first error or warning after the cut: $(tail -n +"$((cut_lines + 1))" \
        "$dir/worker0.log" | grep -E "^[EW][0-9]" | head -1 | cut -c1-240)"
    fi
    c=$(clock_of "$job")
    if [ "$c" != "$last_clock" ]; then
      [ $healed = 1 ] && [ $moving = 0 ] && mark "training again: clock $last_clock -> $c" && moving=1
      last_clock=$c stalled_since=$(now_ms)
    fi
    if [ $healed = 0 ] && [ "$(now_ms)" -ge $((cut_at + hold_s * 1000)) ]; then
      case $mode in blackhole) peer_unblock w0 s0 ;; silent) peer_unblock_silent w0 s0 ;; esac
      healed=1
      mark_t "$(now_ms)" "HEALED: w0 <-> s0 again ($job $(job_state "$job") at clock $c, unchanged for $(((
        $(now_ms) - stalled_since) / 1000)) s)"
    fi
    sleep 0.5
  done
  if [ $healed = 0 ]; then
    case $mode in blackhole) peer_unblock w0 s0 ;; silent) peer_unblock_silent w0 s0 ;; esac
    mark "HEALED: w0 <-> s0 again (after the job's end)"
  fi
  if job_ended "$job"; then state=$(job_state "$job"); else state=TIMEOUT; fi
  reason=$(status_field "$job" "d.get('reason','')")
  mark "$job ended $state at clock $(clock_of "$job"), $(((
    $(now_ms) - cut_at) / 1000)) s after the cut: $reason"
  job_events "$job" | while IFS=$'\t' read -r t m; do mark_at "$t" "event: $m"; done
  for i in 0 1 2; do
    m=$(hx "s$i" curl -s --max-time 3 "http://$(host_ip "s$i"):9101/metrics" 2>/dev/null |
      grep -E '^ps_server_duplicate_pushes_total' | awk '{s += $2} END {print s + 0}') || m='?'
    echo "server$i ($(host_ip "s$i")): duplicate pushes recognised (not applied again), so far: ${m:-?}"
  done
  echo "worker0's log after the cut (errors and warnings):"
  { tail -n +"$((cut_lines + 1))" "$dir/worker0.log" | grep -E "^[EW][0-9]" | cut -c1-300 |
    head -12; } || true
  case $state in
    SUCCEEDED)
      m=$(accuracy_of "$job")
      python3 -c "import sys; sys.exit(not $m >= 80)" || fail "test accuracy $m% < 80%"
      results+=("cut ${hold_s}s ($mode): $job SUCCEEDED (test accuracy $m%)") ;;
    FAILED)
      echo "$reason" | grep -qE "$saddr|node $snode\b" ||
        fail "$job FAILED with a reason that does not name $saddr (node $snode): $reason"
      results+=("cut ${hold_s}s ($mode): $job FAILED naming the unreachable server: $reason") ;;
    *) fail "$job did not end within 180 s of the cut ($state)" ;;
  esac
}

# Shorter than the workers' --rpc_timeout (20 s), then longer.
for hold in ${HOLD_S:-8 30}; do trial "$hold"; done
timeline
for r in "${results[@]}"; do echo "PASS $r"; done
