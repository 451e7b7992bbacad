#!/usr/bin/env bash
# Installs the build into a scratch prefix, MOVES the prefix elsewhere (a
# relocatable package works from wherever it is unpacked), checks the
# exported CMake target (no absolute LibTorch paths, one include directory,
# C++17 required), then builds consumers against the moved prefix: a CMake
# project (find_package, with Gloo hidden: only the component needs it), a
# CMake project of the optional component `distributed` (a one-rank
# DistributedCheckpointer, run), and a plain g++ line (pkg-config).
set -euo pipefail
: "${TRAINSNAP_BUILD_DIR:?}" "${TRAINSNAP_CONSUMER_DIR:?}" "${TRAINSNAP_WORK_DIR:?}"
rm -rf "$TRAINSNAP_WORK_DIR"
mkdir -p "$TRAINSNAP_WORK_DIR"
installed="$TRAINSNAP_WORK_DIR/installed"
prefix="$TRAINSNAP_WORK_DIR/moved/prefix"

fail() { echo "install test: $*" >&2; exit 1; }

cmake --install "$TRAINSNAP_BUILD_DIR" --prefix "$installed" >/dev/null
mkdir -p "$(dirname "$prefix")"
mv "$installed" "$prefix"
test -f "$prefix/include/trainsnap/store.h"
test -f "$prefix/include/trainsnap/sampler.h"
test -f "$prefix/lib/cmake/trainsnap/trainsnapConfig.cmake"
test -f "$prefix/lib/pkgconfig/trainsnap.pc"

echo "== the trainsnap tool runs from the moved prefix, without LibTorch"
"$prefix/bin/trainsnap" --version | grep -qx "trainsnap [0-9.]*" || fail "bin/trainsnap --version failed"
if ldd "$prefix/bin/trainsnap" | grep -E 'libtorch|libc10|libtrainsnap'; then
  fail "bin/trainsnap links LibTorch or libtrainsnap"
fi

echo "== exported target"
targets="$prefix/lib/cmake/trainsnap/trainsnapTargets.cmake"
test -f "$targets"
# Nothing installed may name the prefix it was installed to.
if grep -rl -- "$installed" "$prefix/lib/cmake" "$prefix/lib/pkgconfig"; then
  fail "installed files name the original prefix $installed"
fi
grep -q 'libc10\.so' "$targets" && fail "the exported target hard-codes libc10.so: $(grep -o '[^"]*libc10\.so' "$targets")"
includes=$(grep 'INTERFACE_INCLUDE_DIRECTORIES' "$targets")
[ "$includes" = '  INTERFACE_INCLUDE_DIRECTORIES "${_IMPORT_PREFIX}/include"' ] ||
  fail "include directories are not exactly \${_IMPORT_PREFIX}/include: $includes"
grep -q 'INTERFACE_COMPILE_FEATURES "cxx_std_17"' "$targets" || fail "the exported target does not require C++17"
links=$(grep 'INTERFACE_LINK_LIBRARIES' "$targets")
[ "$links" = '  INTERFACE_LINK_LIBRARIES "torch"' ] || fail "unexpected link interface: $links"

echo "== CMake consumer (find_package(trainsnap)), C++14 project, Gloo hidden (only the component needs it)"
cmake -S "$TRAINSNAP_CONSUMER_DIR" -B "$TRAINSNAP_WORK_DIR/cmake-build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_DISABLE_FIND_PACKAGE_Gloo=TRUE >/dev/null
cmake --build "$TRAINSNAP_WORK_DIR/cmake-build" >/dev/null
"$TRAINSNAP_WORK_DIR/cmake-build/consumer" "$TRAINSNAP_WORK_DIR/store-cmake"

echo "== CMake consumer of the component (find_package(trainsnap COMPONENTS distributed))"
dist_targets="$prefix/lib/cmake/trainsnap/trainsnapDistributedTargets.cmake"
test -f "$dist_targets" || fail "trainsnapDistributedTargets.cmake is not installed"
dist_links=$(grep 'INTERFACE_LINK_LIBRARIES' "$dist_targets")
[ "$dist_links" = '  INTERFACE_LINK_LIBRARIES "trainsnap::trainsnap;gloo"' ] ||
  fail "unexpected link interface of trainsnap::distributed: $dist_links"
cmake -S "$TRAINSNAP_CONSUMER_DIR/../consumer_distributed" -B "$TRAINSNAP_WORK_DIR/dist-build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$TRAINSNAP_WORK_DIR/dist-build" >/dev/null
"$TRAINSNAP_WORK_DIR/dist-build/distributed_consumer" "$TRAINSNAP_WORK_DIR/run-dist" | grep -qx "distributed consumer: OK" ||
  fail "the distributed consumer failed"

echo "== pkg-config consumer"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046
g++ -std=c++17 -O1 -o "$TRAINSNAP_WORK_DIR/store_consumer" "$TRAINSNAP_CONSUMER_DIR/store_consumer.cc" \
  $(pkg-config --cflags --libs trainsnap) -Wl,-rpath,"$prefix/lib"
"$TRAINSNAP_WORK_DIR/store_consumer" "$TRAINSNAP_WORK_DIR/store-pc"
if [ -n "${TRAINSNAP_PYTHON:-}" ]; then
  echo "== Python: import trainsnap from the moved prefix"
  PYTHONPATH="$prefix/$TRAINSNAP_PYTHON_DIR" "$TRAINSNAP_PYTHON" -c '
import sys, trainsnap
assert trainsnap.__file__.startswith(sys.argv[1]), trainsnap.__file__
store = trainsnap.Store(sys.argv[2], sync=False)
ckpt = trainsnap.Checkpointer(store)
ckpt.capture(1, rng=False)
assert store.latest() == 1
' "$prefix" "$TRAINSNAP_WORK_DIR/store-py" || fail "import trainsnap from the moved prefix failed"
fi
echo "install test: OK (from a prefix moved after installation)"
