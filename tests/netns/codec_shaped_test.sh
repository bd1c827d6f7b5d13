#!/usr/bin/env bash
# Issue 33: compression on a bandwidth-limited network. 2 servers and 2 workers, each on its own
# host (tests/netns/lib.sh), every host's link shaped (host_shape: 100 Mbit/s, tbf; with netem
# where the kernel has it, 0.5 ms delay too). One short sync job per codec (none, fp16, topk 1%
# with fp16 pulls, sign with fp16 pulls, int8: topk pushes with int8 pulls, dgc: int8's with
# momentum correction and a warm-up, delta: dgc's with delta pulls; tests/netns/codec_train.py)
# runs across them; the bytes the workers' links sent (pushes) and received (pulls) are read
# from their interface counters. Asserts that, against no codec: fp16 sends and receives at
# least 1.7x fewer bytes, topk, sign, int8, dgc and delta send at least 8x fewer, and receive
# 1.7x fewer (fp16 pulls), 3.2x fewer (int8 pulls) or 10x fewer (delta), and that every run learns
# (held-out accuracy >= 0.75, loss below its first batch's). Prints a line per codec with step
# time and bytes. Needs root (exits 77 otherwise).
# Usage: tests/netns/codec_shaped_test.sh BUILD_DIR [STEPS] [RATE]
set -euo pipefail
build=$(cd "$1" && pwd)
steps=${2:-30}
rate=${3:-100mbit}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh" ps_netns_codec
netns_require
[ -d "$build/python/paramserver" ] || { echo "SKIP: no $build/python/paramserver"; exit 77; }
/usr/bin/python3 -c "import numpy" 2>/dev/null || { echo "SKIP: no numpy"; exit 77; }
mkdir -p "$dir/bin"
cp "$build/server/ps_server" "$dir/bin/"
cp -r "$build/python" "$dir/python"

netns_hosts s0 s1 w0 w1
for h in s0 s1 w0 w1; do host_shape "$h" "$rate" 0.5ms; done
mark "4 hosts up, links shaped: $rate ($(hx w0 tc qdisc show dev eth0 | head -1 | awk '{print $2}'))"
servers=""
for i in 0 1; do
  ip=$(host_ip "s$i")
  host_run "s$i" "server$i" "$dir/bin/ps_server" --listen="$ip:7100" --server_index="$i" \
    --num_servers=2 --max_pull_wait=60s
  servers="${servers:+$servers,}$ip:7100"
done
for i in 0 1; do wait_until 30 "server$i listens" tcp_open w0 "$(host_ip "s$i"):7100"; done

counter() { hx "$1" cat "/sys/class/net/eth0/statistics/$2"; }

declare -A tx rx secs
for codec in none fp16 topk sign int8 dgc delta; do
  declare -A before_tx before_rx
  for w in w0 w1; do before_tx[$w]=$(counter "$w" tx_bytes); before_rx[$w]=$(counter "$w" rx_bytes); done
  pids=()
  for i in 0 1; do
    hx "w$i" env PYTHONPATH="$dir/python" timeout 240 /usr/bin/python3 "$here/codec_train.py" \
      "$servers" "codec-$codec" "$i" 2 "$codec" "$steps" >"$dir/train-$codec-$i.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || fail "codec $codec: a worker failed ($(tail -3 "$dir"/train-"$codec"-*.log))"; done
  tx[$codec]=0 rx[$codec]=0
  for w in w0 w1; do
    tx[$codec]=$((tx[$codec] + $(counter "$w" tx_bytes) - before_tx[$w]))
    rx[$codec]=$((rx[$codec] + $(counter "$w" rx_bytes) - before_rx[$w]))
  done
  result=$(grep RESULT "$dir/train-$codec-0.log") || fail "codec $codec: no RESULT line"
  secs[$codec]=$(sed -E 's/.*seconds=([0-9.]+).*/\1/' <<<"$result")
  mark "$result workers_sent=${tx[$codec]} workers_received=${rx[$codec]}"
  /usr/bin/python3 - "$result" <<'EOF' || fail "codec did not learn: $result"
import sys
f = dict(kv.split("=") for kv in sys.argv[1].split()[1:])
sys.exit(not (float(f["accuracy"]) >= 0.75 and float(f["loss"]) < float(f["loss0"])))
EOF
done

# ratio NUM DEN MIN WHAT: fails unless NUM / DEN >= MIN.
ratio() {
  /usr/bin/python3 -c "import sys; r = $1 / $2; print(f'{r:.1f}'); sys.exit(not r >= $3)" ||
    fail "$4: ratio $1 / $2 below $3"
}
echo "codec  step_ms  sent_bytes  received_bytes  sent_ratio  received_ratio"
for codec in none fp16 topk sign int8 dgc delta; do
  printf '%-5s  %7.1f  %10d  %14d  %10s  %14s\n' "$codec" \
    "$(/usr/bin/python3 -c "print(${secs[$codec]} * 1000 / $steps)")" "${tx[$codec]}" \
    "${rx[$codec]}" "$(ratio "${tx[none]}" "${tx[$codec]}" 0 x)" \
    "$(ratio "${rx[none]}" "${rx[$codec]}" 0 x)"
done
ratio "${tx[none]}" "${tx[fp16]}" 1.7 "fp16 pushes" >/dev/null
ratio "${rx[none]}" "${rx[fp16]}" 1.7 "fp16 pulls" >/dev/null
for codec in topk sign int8 dgc delta; do
  ratio "${tx[none]}" "${tx[$codec]}" 8 "$codec pushes" >/dev/null
  pulls=1.7
  case $codec in int8 | dgc) pulls=3.2 ;; delta) pulls=10 ;; esac
  ratio "${rx[none]}" "${rx[$codec]}" "$pulls" "$codec pulls" >/dev/null
done
timeline
echo "PASS: every codec learned across 4 shaped hosts ($rate); bytes on the wire dropped as expected"
