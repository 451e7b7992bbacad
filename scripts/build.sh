#!/usr/bin/env bash
# Configures and builds trainsnap into ./build (Release, Ninja, -j2).
# Extra arguments are passed to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${TRAINSNAP_BUILD_DIR:-build}
JOBS=${TRAINSNAP_JOBS:-2}
# ccache (used when installed): paths relative to the checkout, so that
# clones in other directories share hits, and the sloppiness without which
# ccache never caches a source that uses a precompiled header.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release} "$@" >/dev/null
cmake --build "$BUILD_DIR" -j"$JOBS"
