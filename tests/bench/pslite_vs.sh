#!/bin/bash
# ps-lite (dmlc, ZeroMQ) beside ps_bench: the same dense push / pull / pushpull sizes, servers
# and clients, interleaved round by round, then the medians and ratios (ours / ps-lite).
#
#   PSLITE_SRC=/path/to/ps-lite tests/bench/pslite_vs.sh [options]
#   PSLITE_SRC=https://github.com/dmlc/ps-lite.git tests/bench/pslite_vs.sh --rounds=3
#
# PSLITE_SRC is a ps-lite checkout, a bare git repository or a git URL. It is cloned into a
# temporary directory, never into this repository, and built there with Debian's ZeroMQ and
# protobuf (apt-get install libzmq3-dev libprotobuf-dev protobuf-compiler), together with a small
# driver written by this script: ps-lite's KVServer keeps the rows (a push adds its values into
# them, a pull copies them out, as ps_server's SGD pass and answer do), its KVWorker times
# whole requests back to back, as ps_bench does. The temporary directory is removed at exit
# (--keep keeps it).
#
# Options (defaults in brackets):
#   --ps_bench=PATH   ps_bench binary [build/tests/bench/ps_bench]
#   --sizes=LIST      payload sizes [4K,1M,16M]
#   --ops=LIST        push,pull,pushpull [all three]
#   --layouts=LIST    SERVERSxCLIENTS [1x1,2x2]
#   --rounds=N        interleaved rounds [3]
#   --seconds=S       seconds a line [2]
#   --keep            keep the temporary directory (the ps-lite build, the raw output)
#   -- ARGS           passed to ps_bench (e.g. -- --http2_max_frame_bytes=0)
set -euo pipefail

ps_bench=build/tests/bench/ps_bench
sizes=4K,1M,16M
ops=push,pull,pushpull
layouts=1x1,2x2
rounds=3
seconds=2
keep=0
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ps_bench=*) ps_bench=${1#*=} ;;
    --sizes=*) sizes=${1#*=} ;;
    --ops=*) ops=${1#*=} ;;
    --layouts=*) layouts=${1#*=} ;;
    --rounds=*) rounds=${1#*=} ;;
    --seconds=*) seconds=${1#*=} ;;
    --keep) keep=1 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "pslite_vs.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "${PSLITE_SRC:-}" ]; then
  echo "pslite_vs.sh: set PSLITE_SRC to a ps-lite checkout, bare repository or git URL" >&2
  exit 2
fi
[ -x "$ps_bench" ] || { echo "pslite_vs.sh: no ps_bench at $ps_bench (build it)" >&2; exit 2; }
ps_bench=$(readlink -f "$ps_bench")
for tool in git g++ protoc python3; do
  command -v $tool >/dev/null || { echo "pslite_vs.sh: $tool is not on PATH" >&2; exit 2; }
done
[ -e /usr/include/zmq.h ] || { echo "pslite_vs.sh: apt-get install libzmq3-dev" >&2; exit 2; }

tmp=$(mktemp -d /tmp/pslite_vs.XXXXXX)
cleanup() {
  jobs -p | xargs -r kill 2>/dev/null || true
  if [ "$keep" = 1 ]; then echo "kept $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

# --- ps-lite: clone and build (library sources + this script's driver) ----------------------
git clone -q --depth 1 "$( [ -d "$PSLITE_SRC" ] && echo "file://$(readlink -f "$PSLITE_SRC")" \
  || echo "$PSLITE_SRC")" "$tmp/ps-lite"
src=$tmp/ps-lite
echo "ps-lite $(git -C "$src" log -1 --format='%h %cs')" >&2
mkdir -p "$tmp/gen"
protoc --proto_path="$src/src" --cpp_out="$tmp/gen" "$src/src/meta.proto"
cat > "$tmp/pslite_bench.cc" <<'CC'
// ps_bench's dense workloads on ps-lite (written by tests/bench/pslite_vs.sh). Environment:
// ps-lite's DMLC_* variables, and PSV_SIZES (4K,1M,...), PSV_OPS (push,pull,pushpull),
// PSV_SECONDS. Each worker prints "RESULT op size seconds bytes" per line of the run.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "ps/ps.h"

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> Split(const char* text) {
  std::vector<std::string> out;
  std::stringstream in(text == nullptr ? "" : text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

size_t ParseSize(const std::string& s) {
  size_t n = std::stoull(s);
  switch (s.back()) {
    case 'K': return n << 10;
    case 'M': return n << 20;
    case 'G': return n << 30;
    default: return n;
  }
}

// The rows, by key; a request's cmd is its rows' length in floats. SGD with lr 0.01.
std::unordered_map<ps::Key, std::vector<float>> rows;

void Handle(const ps::KVMeta& meta, const ps::KVPairs<float>& req, ps::KVServer<float>* server) {
  const size_t dim = static_cast<size_t>(meta.cmd);
  const size_t n = req.keys.size();
  ps::KVPairs<float> res;
  if (meta.pull) {
    res.keys = req.keys;
    res.vals.resize(n * dim);
  }
  for (size_t i = 0; i < n; ++i) {
    std::vector<float>& row = rows[req.keys[i]];
    if (row.size() != dim) row.assign(dim, 0.0f);
    if (meta.push) {
      const float* g = req.vals.data() + i * dim;
      for (size_t j = 0; j < dim; ++j) row[j] -= 0.01f * g[j];
    }
    if (meta.pull) std::copy(row.begin(), row.end(), res.vals.data() + i * dim);
  }
  server->Response(meta, res);
}

void RunWorker() {
  ps::KVWorker<float> kv(0, 0);
  const std::vector<std::string> sizes = Split(std::getenv("PSV_SIZES"));
  const std::vector<std::string> ops = Split(std::getenv("PSV_OPS"));
  const double seconds = std::atof(std::getenv("PSV_SECONDS"));
  for (const std::string& op : ops) {
    for (size_t si = 0; si < sizes.size(); ++si) {
      const size_t size = ParseSize(sizes[si]);
      const size_t dim = std::min<size_t>(1024, size / sizeof(float));
      const size_t n = size / sizeof(float) / dim;
      const ps::Key step = ps::kMaxKey / n;  // rows spread over every server's key range
      ps::SArray<ps::Key> keys(n);
      for (size_t r = 0; r < n; ++r) keys[r] = r * step + si;
      ps::SArray<float> vals(n * dim, 1e-3f);
      ps::SArray<float> outs(n * dim, 0.0f);
      auto issue = [&] {
        if (op == "push") {
          kv.Wait(kv.ZPush(keys, vals, {}, static_cast<int>(dim)));
        } else if (op == "pull") {
          kv.Wait(kv.ZPull(keys, &outs, nullptr, static_cast<int>(dim)));
        } else {
          kv.Wait(kv.ZPushPull(keys, vals, &outs, nullptr, static_cast<int>(dim)));
        }
      };
      issue();  // warm-up: rows created, buffers touched
      ps::Postoffice::Get()->Barrier(0, ps::kWorkerGroup);
      const auto start = Clock::now();
      const auto end = start + std::chrono::duration<double>(seconds);
      long n_ops = 0;
      do {
        issue();
        ++n_ops;
      } while (Clock::now() < end);
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      const double bytes = static_cast<double>(size) * n_ops * (op == "pushpull" ? 2 : 1);
      std::printf("RESULT %s %s %.6f %.0f\n", op.c_str(), sizes[si].c_str(), s, bytes);
      std::fflush(stdout);
      ps::Postoffice::Get()->Barrier(0, ps::kWorkerGroup);
    }
  }
}

}  // namespace

int main() {
  // The server's KVServer exists before any worker sends (else ps-lite may abort waiting for it).
  ps::StartAsync(0);
  if (ps::IsServer()) {
    auto* server = new ps::KVServer<float>(0);
    server->set_request_handle(Handle);
    ps::RegisterExitCallback([server] { delete server; });
  }
  ps::Postoffice::Get()->Barrier(0, ps::kWorkerGroup + ps::kServerGroup + ps::kScheduler);
  if (ps::IsWorker()) RunWorker();
  ps::Finalize(0, true);
  return 0;
}
CC
g++ -O2 -w -std=c++14 -DNDEBUG -I"$src/include" -I"$src/src" -I"$tmp/gen" -o "$tmp/pslite_bench" \
  "$tmp/pslite_bench.cc" "$src"/src/*.cc "$tmp/gen/meta.pb.cc" -lzmq -lprotobuf -pthread

# A free TCP port for ps-lite's scheduler.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Runs ps-lite's scheduler, servers and workers; the workers print RESULT lines.
run_pslite() {  # servers clients out
  local servers=$1 clients=$2 out=$3 port pids=() i limit
  port=$(free_port)
  # A bound on the whole run, so that a ps-lite node that died cannot leave the others waiting.
  limit=$(python3 -c "print(int(60 + 3 * $seconds * len('$ops'.split(',')) * len('$sizes'.split(','))))")
  export DMLC_NUM_SERVER=$servers DMLC_NUM_WORKER=$clients DMLC_PS_ROOT_URI=127.0.0.1
  export DMLC_PS_ROOT_PORT=$port DMLC_INTERFACE=lo PSV_SIZES=$sizes PSV_OPS=$ops
  export PSV_SECONDS=$seconds
  DMLC_ROLE=scheduler timeout "$limit" "$tmp/pslite_bench" >>"$tmp/pslite.log" 2>&1 & pids+=($!)
  for ((i = 0; i < servers; ++i)); do
    DMLC_ROLE=server timeout "$limit" "$tmp/pslite_bench" >>"$tmp/pslite.log" 2>&1 & pids+=($!)
  done
  for ((i = 0; i < clients; ++i)); do
    DMLC_ROLE=worker timeout "$limit" "$tmp/pslite_bench" >>"$out" 2>>"$tmp/pslite.log" & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { echo "ps-lite failed; see $tmp/pslite.log" >&2; keep=1; exit 1; }; done
}

workloads=$(echo "$ops" | sed 's/\([a-z]*\)/\1_dense/g')
: > "$tmp/results"
for ((r = 1; r <= rounds; ++r)); do
  for layout in ${layouts//,/ }; do
    s=${layout%x*}; c=${layout#*x}
    echo "round $r, $layout: ps_bench" >&2
    "$ps_bench" --servers="$s" --clients="$c" --sizes="$sizes" --workloads="$workloads" \
      --seconds="$seconds" --tcp_reference=false "${extra[@]}" 2>>"$tmp/ps_bench.log" |
      awk -v r="$r" '$1 ~ /_dense$/ { sub(/_dense$/, "", $1); print "ours", r, $1, $2, $3 "x" $4, $5 }' \
      >>"$tmp/results"
    echo "round $r, $layout: ps-lite" >&2
    : > "$tmp/worker.out"
    run_pslite "$s" "$c" "$tmp/worker.out"
    # RESULT op size seconds bytes: one line per worker; the layout's GB/s is their sum.
    awk -v r="$r" -v l="$layout" '$1 == "RESULT" { gbps[$2 " " $3] += $5 / $4 / 1e9 }
      END { for (k in gbps) { split(k, a, " "); printf "pslite %s %s %s %s %.3f\n", r, a[1], a[2], l, gbps[k] } }' \
      "$tmp/worker.out" >>"$tmp/results"
  done
done

python3 - "$tmp/results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    who, _, op, size, layout, gbps = line.split()
    runs.setdefault((op, size, layout), {}).setdefault(who, []).append(float(gbps))
def order(k):
    op, size, layout = k
    unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
    return (layout, ["push", "pull", "pushpull"].index(op), int(size.rstrip("KMG")) * unit)
print("%-9s %5s %6s %16s %16s %7s" % ("op", "size", "layout", "ours GB/s (med)", "ps-lite (med)", "ratio"))
for k in sorted(runs, key=order):
    ours, theirs = runs[k].get("ours", []), runs[k].get("pslite", [])
    if not ours or not theirs:
        continue
    mo, mt = statistics.median(ours), statistics.median(theirs)
    print("%-9s %5s %6s %16.3f %16.3f %7.2f" % (k[0], k[1], k[2], mo, mt, mo / mt if mt else 0))
PY
