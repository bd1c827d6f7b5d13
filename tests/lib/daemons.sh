# Shared by the multi-process test scripts (source it; bash):
#   source "$(dirname "$0")/lib/daemons.sh" NAME
# makes a temp dir `dir` (/tmp/NAME_XXXXXX) and an array `pids`: at exit every pid in it is
# SIGKILLed and reaped and the dir removed, unless `fail` ran (then its logs are kept and
# their tails printed). Also defines free_port.
dir=$(mktemp -d "/tmp/${1:-ps_test}_XXXXXX")
pids=()
cleanup() {
  kill -9 "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  if [ "${keep:-0}" = 1 ]; then echo "logs kept in $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT
# fail MESSAGE: prints it and the tail of every log in $dir, keeps $dir, exits 1.
fail() {
  echo "FAIL: $*"
  keep=1
  for f in "$dir"/*.log; do [ -e "$f" ] && { echo "== $f"; tail -25 "$f"; }; done
  exit 1
}
# A TCP port of 127.0.0.1 that is free now.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
