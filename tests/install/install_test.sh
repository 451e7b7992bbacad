#!/usr/bin/env bash
# Installs the build into a scratch prefix and builds two consumers against it:
# a CMake project (find_package) and a plain g++ line (pkg-config).
set -euo pipefail
: "${TRAINSNAP_BUILD_DIR:?}" "${TRAINSNAP_CONSUMER_DIR:?}" "${TRAINSNAP_WORK_DIR:?}"
rm -rf "$TRAINSNAP_WORK_DIR"
mkdir -p "$TRAINSNAP_WORK_DIR"
prefix="$TRAINSNAP_WORK_DIR/prefix"

cmake --install "$TRAINSNAP_BUILD_DIR" --prefix "$prefix" >/dev/null
test -f "$prefix/include/trainsnap/store.h"
test -f "$prefix/lib/cmake/trainsnap/trainsnapConfig.cmake"
test -f "$prefix/lib/pkgconfig/trainsnap.pc"

echo "== CMake consumer (find_package(trainsnap))"
cmake -S "$TRAINSNAP_CONSUMER_DIR" -B "$TRAINSNAP_WORK_DIR/cmake-build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$TRAINSNAP_WORK_DIR/cmake-build" >/dev/null
"$TRAINSNAP_WORK_DIR/cmake-build/consumer" "$TRAINSNAP_WORK_DIR/store-cmake"

echo "== pkg-config consumer"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046
g++ -std=c++17 -O1 -o "$TRAINSNAP_WORK_DIR/store_consumer" "$TRAINSNAP_CONSUMER_DIR/store_consumer.cc" \
  $(pkg-config --cflags --libs trainsnap) -Wl,-rpath,"$prefix/lib"
"$TRAINSNAP_WORK_DIR/store_consumer" "$TRAINSNAP_WORK_DIR/store-pc"
echo "install test: OK"
