#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test through CTest.
# The I/O-fault sweep (tests/reliability/io_fault_test.cc) is timing-sensitive
# while issue 7 is open (a fault in a RocksDB background job can race the
# recovery): it runs only with TRAINSNAP_IOFAULT_SWEEP=1. Extra arguments go
# to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
cd "${TRAINSNAP_BUILD_DIR:-build}"
exclude=()
if [[ "${TRAINSNAP_IOFAULT_SWEEP:-0}" != "1" ]]; then
  exclude=(-E IoFaultSweepTest)
fi
ctest --output-on-failure -j2 --timeout 900 "${exclude[@]}" "$@"
