#!/usr/bin/env bash
# Configures and builds trainsnap into ./build (Release, Ninja, -j2).
# Extra arguments are passed to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${TRAINSNAP_BUILD_DIR:-build}
JOBS=${TRAINSNAP_JOBS:-2}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release} "$@" >/dev/null
cmake --build "$BUILD_DIR" -j"$JOBS"
