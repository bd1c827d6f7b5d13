# Shared by the multi-process test scripts that follow jobs through psctl (source it after
# defining psctl(), e.g. psctl() { "$psctl_bin" --scheduler="$sched" "$@"; }, and sourcing
# lib/daemons.sh for fail):
#   wait_nodes N          until N nodes are alive (bounded; fail otherwise)
#   json CMD... EXPR      a field of psctl's JSON answer ('' if absent), EXPR over `d`
#   clock_of JOB          the job's clock
#   wait_clock JOB N      until the job's clock passes N (bounded; fail otherwise)
#   wait_done JOB [SECS]  until the job ends; prints its state, or TIMEOUT after SECS (600)
#   accuracy_of JOB       its test accuracy in percent
wait_nodes() {  # wait_nodes N: until N nodes are alive
  for _ in $(seq 100); do
    [ "$(psctl nodes | grep -c ALIVE)" -ge "$1" ] && return 0
    sleep 0.1
  done
  fail "fewer than $1 nodes alive"
}
json() {  # json COMMAND... EXPR: a field of psctl's JSON answer ('' if absent)
  local expr=${*: -1}
  psctl --output=json "${@:1:$#-1}" 2>/dev/null |
    python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$expr" \
      2>/dev/null || true
}
clock_of() { json status "$1" "d.get('progress',{}).get('clock','0')"; }
# Each json call starts a psctl and a python3 process (about 65 ms of CPU): the waits below ask
# a few times a second at most, or let one psctl process follow the job.
wait_clock() {  # wait_clock JOB N: until the job's clock passes N (bounded: 5 minutes)
  for _ in $(seq 1200); do
    [ "$(clock_of "$1")" -gt "$2" ] 2>/dev/null && return 0
    sleep 0.25
  done
  fail "job $1 did not reach clock $2"
}
wait_done() {  # wait_done JOB [SECONDS]: until the job ends (bounded: 600 s); prints its state
  local s w deadline=$((SECONDS + ${2:-600}))
  while :; do
    s=$(json status "$1" "d.get('state','')")
    case "$s" in SUCCEEDED|FAILED|CANCELLED) echo "$s"; return 0 ;; esac
    [ "$SECONDS" -lt "$deadline" ] || break
    # One process asking the scheduler once a second until the job ends (it rides out a
    # restarted scheduler for a minute); then the loop reads the state again.
    psctl status "$1" --watch >/dev/null 2>&1 &
    w=$!
    while kill -0 "$w" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.5; done
    pkill -P "$w" 2>/dev/null || true  # the psctl itself, where the subshell did not exec it
    kill "$w" 2>/dev/null || true
    wait "$w" 2>/dev/null || true
    sleep 0.2
  done
  echo TIMEOUT
}
accuracy_of() { json status "$1" "round(100 * d['progress']['testAccuracy'], 2)"; }
