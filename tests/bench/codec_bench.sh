#!/usr/bin/env bash
# Compression on a bandwidth-limited network, measured on a real program job (issue 33): a
# scheduler, 2 servers and 2 worker daemons, each on its own host (network namespaces,
# tests/netns/lib.sh and cluster.sh), every server's and worker's link shaped to RATE (tc; tbf
# where the kernel has no netem). One job per codec, run one after the other on the same
# cluster; per job it prints the median step time (the programs' own, worker 0), samples/s
# (rank 0, psctl status), the bytes the workers' links sent (pushes) and received (pulls) and
# their ratios against the first codec's, the ratios the servers counted (psctl tables, summed
# over the job's tables and servers), and the result (test accuracy or AUC).
#
# Usage: tests/bench/codec_bench.sh BUILD_DIR WORKLOAD [RATE]     (as root)
#   WORKLOAD  wide_mlp  examples/python/fashion_torch.py --layers=784,4096,4096,10 (20M
#                       parameters, sync, Adam, batch 256 per worker) for BENCH_STEPS steps
#                       (default 20; 0: BENCH_EPOCHS epochs, default 1, of 117 steps each);
#                       codecs: none, fp16 (pushes and pulls), topk (1% pushes with error
#                       feedback, fp16 pulls);
#                       topk_int8 (topk pushes, int8 pulls) on request in BENCH_CODECS;
#                       BENCH_OPTIMIZER replaces the tables' optimizer (default "kind: ADAM
#                       learning_rate: 0.0003");
#                       dgc and dgc_int8 (on request): topk and topk_int8 with Deep Gradient
#                       Compression's momentum correction (push_codec momentum: BENCH_OPTIMIZER's
#                       momentum, default 0.9) on tables whose optimizer is SGD at
#                       BENCH_OPTIMIZER's learning rate, and warmup_steps: BENCH_WARMUP
#                       (default 0); compare them with none under BENCH_OPTIMIZER="kind: MOMENTUM
#                       learning_rate: LR momentum: M";
#                       any codec with "_delta" appended (e.g. dgc_int8_delta): its pulls are
#                       delta pulls (pull_codec delta: true)
#             ctr       examples/python/ctr_torch.py (deploy/jobs/ctr_torch.textproto, sync)
#                       for BENCH_STEPS steps (default 400) of 1024; codecs: none, fp16 (the
#                       sparse embedding tables ctr_wide and ctr_emb sent in fp16 both ways)
#   RATE      a tc rate for every link (default 100mbit), or "none" (unshaped)
# BENCH_CODECS picks and orders the codecs (e.g. "none topk"); the first is the reference of
# the ratios. A benchmark: it asserts nothing but that each job SUCCEEDED (exit 1 otherwise).
set -euo pipefail
build=$(cd "${1:?usage: codec_bench.sh BUILD_DIR wide_mlp|ctr [RATE]}" && pwd)
workload=${2:?usage: codec_bench.sh BUILD_DIR wide_mlp|ctr [RATE]}
rate=${3:-100mbit}
repo=$(cd "$(dirname "$0")/../.." && pwd)
case "$workload" in
  wide_mlp) steps=${BENCH_STEPS:-20} epochs=${BENCH_EPOCHS:-1} codecs=${BENCH_CODECS:-none fp16 topk}
    optimizer=${BENCH_OPTIMIZER:-kind: ADAM learning_rate: 0.0003}
    # dgc: the momentum moves to the workers; the servers apply SGD at the same learning rate.
    dgc_momentum=$(sed -n 's/.*momentum: *\([0-9.e-]*\).*/\1/p' <<<"$optimizer")
    dgc_momentum=${dgc_momentum:-0.9}
    dgc_optimizer="kind: SGD learning_rate: $(sed -n 's/.*learning_rate: *\([0-9.e-]*\).*/\1/p' \
      <<<"$optimizer")" ;;
  ctr) steps=${BENCH_STEPS:-400} codecs=${BENCH_CODECS:-none fp16} ;;
  *) echo "unknown workload '$workload' (wide_mlp or ctr)" >&2; exit 2 ;;
esac
source "$repo/tests/netns/lib.sh" ps_codec_bench
netns_require
[ -d "$build/python/paramserver" ] || { echo "SKIP: no $build/python/paramserver"; exit 77; }
/usr/bin/python3 -c "import numpy, torch" 2>/dev/null || { echo "SKIP: no numpy or torch"; exit 77; }
source "$repo/tests/netns/cluster.sh"
cp -r "$build/python" "$dir/python"  # a rebuild meanwhile changes nothing

netns_hosts sched s0 s1 w0 w1
if [ "$rate" != none ]; then
  for h in s0 s1 w0 w1; do host_shape "$h" "$rate" 0.5ms; done
fi
qdisc=$(hx w0 tc qdisc show dev eth0 | head -1 | awk '{print $2}')
mark "5 hosts up; servers' and workers' links: $rate ($qdisc)"
start_scheduler sched
start_server s0 server0
start_server s1 server1
start_worker w0 worker0 --work_dir="$dir/w0"
start_worker w1 worker1 --work_dir="$dir/w1"
wait_alive 4

# codec_lines CODEC TABLE_KIND: the textproto lines of a table's codecs. CODEC_delta: CODEC with
# delta pulls (pull_codec delta: true).
codec_lines() {
  case "$1" in
    *_delta)
      local lines
      lines=$(codec_lines "${1%_delta}")
      if [[ "$lines" == *pull_codec*"{ codec:"* ]]; then
        sed 's/pull_codec { codec: \([A-Z0-9_]*\)/pull_codec { codec: \1 delta: true/' <<<"$lines"
      else
        echo "$lines pull_codec { delta: true }"
      fi ;;
    none) ;;
    fp16) echo "push_codec { codec: CODEC_FP16 } pull_codec { codec: CODEC_FP16 }" ;;
    topk) echo "push_codec { codec: CODEC_TOPK ratio: 0.01 } pull_codec { codec: CODEC_FP16 }" ;;
    topk_int8) echo "push_codec { codec: CODEC_TOPK ratio: 0.01 } pull_codec { codec: CODEC_INT8 }" ;;
    dgc | dgc_int8)
      local pull=CODEC_FP16
      [ "$1" = dgc ] || pull=CODEC_INT8
      echo "push_codec { codec: CODEC_TOPK ratio: 0.01 momentum: $dgc_momentum" \
        "warmup_steps: ${BENCH_WARMUP:-0} } pull_codec { codec: $pull }" ;;
    *) fail "unknown codec $1" ;;
  esac
}

# The job file of WORKLOAD with CODEC: printed.
wide_mlp_spec() {
  local c widths=(784 4096 4096 10) k optimizer=$optimizer
  c=$(codec_lines "$1")
  case "$1" in dgc*) optimizer=$dgc_optimizer ;; esac
  cat <<SPEC
name: "wide-mlp-$1"
program {
  argv: ["/usr/bin/python3", "examples/python/fashion_torch.py", "--layers=784,4096,4096,10",
         "--batch=256", "--epochs=$epochs", "--steps=$steps"]
  working_dir: "$repo"
  env { key: "PYTHONPATH" value: "$dir/python" }
  progress_timeout_seconds: 600
}
consistency { mode: SYNC }
num_servers: 2
num_workers: 2
SPEC
  for k in 1 2 3; do
    local in=${widths[$((k - 1))]} out=${widths[$k]} bound
    bound=$(/usr/bin/python3 -c "print(f'{(6 / ($in + $out)) ** 0.5:.6f}')")  # Glorot uniform
    echo "tables { name: \"fc$k.weight\" kind: DENSE num_rows: $out dim: $in"
    echo "  initializer { kind: UNIFORM low: -$bound high: $bound seed: $k }"
    echo "  optimizer { $optimizer } $c }"
    echo "tables { name: \"fc$k.bias\" kind: DENSE num_rows: 1 dim: $out"
    echo "  optimizer { $optimizer } $c }"
  done
}
ctr_spec() {
  local c
  c=$(codec_lines "$1")
  # The sparse tables' lines end with their dim: the codec goes after it.
  sed -e "s#working_dir: \".\"#working_dir: \"$repo\"#" \
    -e "s#value: \"build/python\"#value: \"$dir/python\"#" \
    -e "s#\"--steps=400\"#\"--steps=$steps\"#" -e "s#^name: .*#name: \"ctr-$1\"#" \
    -e "s#\(name: \"ctr_\(wide\|emb\)\"  kind: SPARSE  dim: [0-9]*\)#\1 $c#" \
    "$repo/deploy/jobs/ctr_torch.textproto"
}

counter() { hx "$1" cat "/sys/class/net/eth0/statistics/$2"; }
# The servers' codec ratios over every table and server (the last psctl tables answer):
# "push RAW/WIRE pull RAW/WIRE" as ratios, "-" where nothing was encoded.
table_ratios() {
  /usr/bin/python3 - "$1" <<'PY'
import json, sys
last = None
for line in open(sys.argv[1]):
    try:
        last = json.loads(line)
    except ValueError:
        pass
out = []
for d in ("push", "pull"):
    raw = sum(int(r["stats"].get(d + "RawBytes", 0)) for r in last or [])
    wire = sum(int(r["stats"].get(d + "WireBytes", 0)) for r in last or [])
    out.append(f"{raw / wire:.2f}" if wire else "-")
print(" ".join(out))
PY
}

declare -A tx rx line
echo "workload $workload, $steps steps per job, links $rate; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for codec in $codecs; do
  "${workload}_spec" "$codec" >"$dir/$codec.textproto"
  before_tx=$(($(counter w0 tx_bytes) + $(counter w1 tx_bytes)))
  before_rx=$(($(counter w0 rx_bytes) + $(counter w1 rx_bytes)))
  start=$(now_ms)
  job=$(psctl submit "$dir/$codec.textproto") || fail "$codec: not submitted"
  mark "$codec: $job submitted"
  : >"$dir/$codec.tables"
  until job_ended "$job"; do
    psctl --output=json tables "$job" 2>/dev/null | tr -d '\n' >>"$dir/$codec.tables" || true
    echo >>"$dir/$codec.tables"
    sleep 2
  done
  seconds=$(( ($(now_ms) - start) / 1000 ))
  state=$(job_state "$job")
  [ "$state" = SUCCEEDED ] || fail "$codec: $job $state: $(status_field "$job" "d.get('reason','')")"
  tx[$codec]=$(($(counter w0 tx_bytes) + $(counter w1 tx_bytes) - before_tx))
  rx[$codec]=$(($(counter w0 rx_bytes) + $(counter w1 rx_bytes) - before_rx))
  samples=$(status_field "$job" "round(d['progress']['samplesPerSecond'])")
  if [ "$workload" = ctr ]; then
    result="auc $(status_field "$job" "d['progress']['metrics']['auc']")"
    result+=" (teacher $(status_field "$job" "d['progress']['metrics']['teacher_auc']"))"
    step=$(/usr/bin/python3 -c "print(f'{1024 / $samples:.3f}')")  # rank 0's samples/s
  else
    result="test accuracy $(accuracy_of "$job")%"
    step=$(psctl logs "$job" --worker=0 2>/dev/null | sed -n 's/^median step \([0-9.]*\) s.*/\1/p')
  fi
  line[$codec]="$step $samples $(table_ratios "$dir/$codec.tables") $seconds $result"
  mark "$codec: $job $state in ${seconds}s: ${line[$codec]}"
done

first=${codecs%% *}
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %8s %8s %9s %12s %6s %12s %6s %8s %8s %6s  %s\n' codec step_s speedup samples/s \
  sent_bytes ratio recv_bytes ratio srv_push srv_pull job_s result
for codec in $codecs; do
  read -r step samples push pull seconds result <<<"${line[$codec]}"
  read -r step0 _ <<<"${line[$first]}"
  printf '%-6s %8s %8s %9s %12d %6s %12d %6s %8s %8s %6s  %s\n' "$codec" "$step" \
    "$(/usr/bin/python3 -c "print(f'{$step0 / $step:.2f}x')")" "$samples" "${tx[$codec]}" \
    "$(/usr/bin/python3 -c "print(f'{${tx[$first]} / ${tx[$codec]}:.2f}')")" "${rx[$codec]}" \
    "$(/usr/bin/python3 -c "print(f'{${rx[$first]} / ${rx[$codec]}:.2f}')")" "$push" "$pull" \
    "$seconds" "$result"
done
timeline
