#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/standalone, clang-14) and runs each
# for a bounded time, seeded from real encoded chunks and records, after
# replaying the saved crashers of tests/fuzz/regressions/<target>/.
#   tests/fuzz/run_fuzzers.sh <build dir> <seconds per target> [target...]
# Prints "[ fuzz ] <target>: <executions> executions in <s> s"; exits non-zero
# on any crash, sanitizer report or broken invariant (the input is saved in
# <build dir>/artifacts/: copy it to tests/fuzz/regressions/<target>/).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?build dir}"
seconds="${2:-20}"
shift 2 || true
targets=("$@")
((${#targets[@]})) || targets=(chunk_decoder record_parsers manifest_codec)
export CC="${CC:-clang-14}" CXX="${CXX:-clang++-14}"
if ! command -v "$CXX" >/dev/null; then
  echo "run_fuzzers: $CXX not found; install clang-14 and libclang-rt-14-dev (scripts/setup.sh)" >&2
  exit 1
fi
cmake -S "$here/standalone" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"${TRAINSNAP_JOBS:-2}" >/dev/null
mkdir -p "$build/seeds/chunk_decoder" "$build/seeds/record_parsers" "$build/seeds/manifest_codec" "$build/artifacts"
"$build/make_fuzz_seeds" "$build/seeds/chunk_decoder" "$build/seeds/record_parsers" "$build/seeds/manifest_codec"
status=0
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"
  mkdir -p "$corpus"
  # Regressions first: every saved crasher must now pass.
  regressions=("$here/regressions/$t"/*)
  if [[ -e "${regressions[0]}" ]]; then
    "$build/${t}_fuzzer" -runs=0 "${regressions[@]}" >"$build/$t.regressions.log" 2>&1 || {
      echo "[ fuzz ] $t: a saved crasher fails again (see $build/$t.regressions.log)"; status=1; continue; }
  fi
  log="$build/$t.log"
  if "$build/${t}_fuzzer" -max_total_time="$seconds" -seed=1 -rss_limit_mb=2048 -max_len=65536 \
      -artifact_prefix="$build/artifacts/$t-" -print_final_stats=1 "$corpus" "$build/seeds/$t" >"$log" 2>&1; then
    execs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
    echo "[ fuzz ] $t: ${execs:-?} executions in $seconds s, no crash"
  else
    echo "[ fuzz ] $t: FAILED (see $log; crashers in $build/artifacts/)"
    tail -n 40 "$log"
    status=1
  fi
done
exit $status
