#!/bin/bash
# A client built from the .proto by protoc (Python grpcio, no paramserver code) against a real
# ps_server: the server's hand-built answers and its parsing are the protobuf wire format.
# Usage: tests/wire_compat_test.sh BUILD_DIR. Exits 77 (skipped) without protoc,
# grpc_python_plugin or python3's grpc module.
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v protoc >/dev/null || ! command -v grpc_python_plugin >/dev/null ||
  ! /usr/bin/python3 -c 'import grpc' 2>/dev/null; then
  echo "SKIP: needs protoc, grpc_python_plugin and python3-grpcio"
  exit 77
fi
dir=$(mktemp -d /tmp/ps-wire-compat.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
mkdir -p "$dir/py"
(cd "$repo/proto" && protoc -I. --python_out="$dir/py" --grpc_out="$dir/py" \
  --plugin=protoc-gen-grpc="$(command -v grpc_python_plugin)" ps/v1/*.proto)

"$build/server/ps_server" --listen=127.0.0.1:0 --port_file="$dir/port" >"$dir/server.log" 2>&1 &
pid=$!
for ((i = 0; i < 300; i++)); do
  [ -s "$dir/port" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$dir/server.log"; echo "FAIL: ps_server exited"; exit 1; }
  sleep 0.1
done
[ -s "$dir/port" ] || { echo "FAIL: ps_server wrote no port"; exit 1; }
if ! /usr/bin/python3 "$repo/tests/wire_compat_client.py" "$dir/py" "127.0.0.1:$(cat "$dir/port")"; then
  echo "--- ps_server log"
  tail -20 "$dir/server.log"
  echo "FAIL"
  exit 1
fi
kill -0 "$pid" || { echo "FAIL: ps_server died"; exit 1; }
echo "PASS"
