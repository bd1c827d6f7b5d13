#!/usr/bin/env bash
# The client library as a program built elsewhere uses it: `cmake --install` of the client
# component into a temporary prefix, examples/cpp configured with find_package(paramserver)
# against that prefix and built, then run against 2 real ps_server processes on loopback. The
# installed library must export its public API only (nm -D: ps:: classes and functions of
# include/ps/, nothing of ps::v1, RpcClient, gRPC, protobuf or absl).
# Usage: tests/client_install_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
source "$(dirname "$0")/lib/daemons.sh" client_install

echo "== cmake --install --component client into $dir/prefix"
cmake --install "$build" --prefix "$dir/prefix" --component client >"$dir/install.log" 2>&1 ||
  fail "install failed"
ls "$dir/prefix"/lib*/libparamserver_client.so* >/dev/null 2>&1 ||
  fail "no libparamserver_client.so installed"
[ -f "$dir/prefix/include/ps/client.h" ] || fail "no include/ps/client.h installed"
# The public headers name no gRPC, protobuf or repository-internal header.
if grep -rnE '#include [<"](grpc|grpcpp|google/protobuf|ps/v1|common/|worker/)' \
    "$dir/prefix/include"; then
  fail "the installed headers include gRPC, protobuf or internal headers"
fi

echo "== the library exports its public API only (ps/*.h, PS_EXPORT)"
lib=$(ls "$dir/prefix"/lib*/libparamserver_client.so | head -1)
nm -D --defined-only -C "$lib" | awk '$2 ~ /^[TtWwVvDdBbRru]$/ { $1 = ""; $2 = ""; print substr($0, 3) }' |
  sort -u >"$dir/exported.txt"
[ -s "$dir/exported.txt" ] || fail "nm lists no symbol of $lib"
# The public classes and functions of include/ps/ (their members, typeinfo and vtables too).
public='ps::(Client|Pending|Session|Initializer|Optimizer|ClientOptions)(::|$|\b)'
public+='|ps::(TuneProcess|TableIdFor|IsStepInterrupted)\('
grep -vE "^((typeinfo|typeinfo name|vtable) for )?($public)" "$dir/exported.txt" |
  grep -vE '^(_init|_fini|_edata|_end|__bss_start)$' >"$dir/unexpected.txt" || true
if [ -s "$dir/unexpected.txt" ]; then
  echo "$(wc -l <"$dir/unexpected.txt") symbols beyond the public API, e.g.:"
  head -20 "$dir/unexpected.txt"
  fail "libparamserver_client.so exports more than ps/*.h"
fi
grep -qE '^(ps::v1::|ps::RpcClient|grpc|google::protobuf|absl::)' "$dir/exported.txt" &&
  fail "ps::v1, RpcClient, gRPC, protobuf or absl symbols exported"
grep -q '^ps::Client::Connect' "$dir/exported.txt" || fail "ps::Client::Connect is not exported"
grep -q '^ps::Session::FromEnv' "$dir/exported.txt" || fail "ps::Session::FromEnv is not exported"
echo "ok: $(wc -l <"$dir/exported.txt") symbols exported, all of the public API"

echo "== configuring and building examples/cpp against the prefix"
cmake -S "$src/examples/cpp" -B "$dir/example" -DCMAKE_PREFIX_PATH="$dir/prefix" \
  >"$dir/configure.log" 2>&1 || fail "examples/cpp does not configure against the install"
cmake --build "$dir/example" -j2 >"$dir/build.log" 2>&1 || fail "examples/cpp does not build"
# ldd's whole output first: `ldd | grep -q` under pipefail fails when grep exits before ldd has
# written everything (SIGPIPE), which happened in CI.
linked=$(ldd "$dir/example/train_logreg")
grep -q "$dir/prefix/lib.*/libparamserver_client.so" <<<"$linked" ||
  fail "train_logreg is not linked to the installed library: $linked"

echo "== 2 ps_server processes"
servers=()
for i in 0 1; do
  "$build/server/ps_server" --listen=127.0.0.1:0 --server_index=$i --num_servers=2 \
    --metrics_listen=off --port_file="$dir/server$i.port" >"$dir/server$i.log" 2>&1 &
  pids+=($!)
done
for i in 0 1; do
  for _ in $(seq 100); do [ -s "$dir/server$i.port" ] && break; sleep 0.1; done
  [ -s "$dir/server$i.port" ] || fail "server $i did not start"
  servers+=("127.0.0.1:$(cat "$dir/server$i.port")")
done
list=$(IFS=,; echo "${servers[*]}")

echo "== train_logreg --servers=$list (2 workers, sync)"
"$dir/example/train_logreg" --servers="$list" --workers=2 --worker=1 --consistency=sync \
  --steps=300 >"$dir/worker1.log" 2>&1 &
w1=$!
pids+=($w1)
timeout 300 "$dir/example/train_logreg" --servers="$list" --workers=2 --worker=0 \
  --consistency=sync --steps=300 2>&1 | tee "$dir/worker0.log"
status=${PIPESTATUS[0]}
wait $w1 || fail "worker 1 exited $?"
[ "$status" -eq 0 ] || fail "train_logreg exited $status"
grep -q "held-out accuracy" "$dir/worker0.log" || fail "no held-out accuracy printed"

echo "== a bad server list is a clear error, exit 2"
set +e
out=$("$dir/example/train_logreg" --servers=127.0.0.1:1 --steps=1 2>&1)
code=$?
set -e
[ "$code" -eq 2 ] || fail "exit $code for an unreachable server (want 2): $out"
echo "$out" | grep -q "declaring job 'logreg' on the servers" || fail "unclear error: $out"
echo "PASS"
