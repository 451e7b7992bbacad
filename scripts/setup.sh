#!/usr/bin/env bash
# Installs the Debian packages trainsnap needs to build, test and benchmark.
# Idempotent: does nothing (quickly) when everything is present.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache git
  librocksdb-dev libzstd-dev libxxhash-dev libboost-dev
  libtorch-dev libgtest-dev libgmock-dev libbenchmark-dev
  libprotobuf-dev protobuf-compiler libcli11-dev nlohmann-json3-dev libfmt-dev
  python3 python3-numpy python3-torch gnuplot-nox zstd
  pybind11-dev python3-pytest python3-zstandard
  clang-14 libclang-rt-14-dev
  libgloo-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "setup: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done" >&2
