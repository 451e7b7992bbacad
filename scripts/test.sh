#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test through CTest.
# Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
cd "${TRAINSNAP_BUILD_DIR:-build}"
ctest --output-on-failure -j2 --timeout 900 "$@"
