#!/usr/bin/env bash
# Configuring with an interpreter whose torch differs (major.minor) from the
# LibTorch that libtrainsnap is built against must stop, naming both.
# Usage: torch_version_check.sh SOURCE_DIR LIBTORCH_VERSION
set -u
src=$1
libtorch=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/python3" <<'PY'
#!/bin/sh
# A stand-in interpreter: Python 3.11 with torch 99.1.0.
echo "3;11;99.1.0;/nonexistent/torch"
PY
chmod +x "$work/python3"
out=$(cmake -S "$src" -B "$work/build" -G Ninja -DTRAINSNAP_PYTHON="$work/python3" 2>&1)
rc=$?
# CMake wraps the message: compare it with its line breaks folded.
flat=$(printf '%s' "$out" | tr -s ' \n' '  ')
expected="trainsnap Python: $work/python3 imports torch 99.1.0 (from /nonexistent/torch), but libtrainsnap is built against LibTorch $libtorch"
if [[ $rc -eq 0 ]]; then
  echo "FAIL: configure succeeded"; exit 1
fi
if [[ $flat != *"$expected"* || $flat != *"major.minor must match"* ]]; then
  echo "FAIL: configure output lacks: $expected"; printf '%s\n' "$out"; exit 1
fi
echo "ok: configure refused (rc $rc)"
