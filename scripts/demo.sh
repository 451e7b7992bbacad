#!/usr/bin/env bash
# The trainsnap demo: installs what is missing, builds, then runs a LoRA
# fine-tune that snapshots every micro-step, kills it with SIGKILL mid-run,
# resumes it in a fresh process and proves the result bitwise identical to an
# uninterrupted run; ends with a summary of the store. Then the same in Python
# (examples/finetune_lora.py) when the binding is built, a Python DDP job under
# torchrun (examples/ddp_finetune.py: one rank killed, torchrun restarts every
# rank, each bitwise identical to an uninterrupted job), and with a 4-rank
# data-parallel job (examples/train_data_parallel.cc): one rank killed,
# every rank resumed from the same global step, each bitwise identical; then
# a 4-rank run restored on 2 ranks (a lost node), which train on.
#
#   ./scripts/demo.sh [STEPS]     STEPS optimizer steps of 4 micro-steps (default 40)
#
# Environment: TRAINSNAP_BUILD_DIR (default build), TRAINSNAP_DEMO_DIR (default:
# a fresh temporary directory, removed at exit).
set -euo pipefail
cd "$(dirname "$0")/.."

STEPS=${1:-40}
BUILD_DIR=${TRAINSNAP_BUILD_DIR:-build}

echo "== setup"
./scripts/setup.sh
echo "== build (${BUILD_DIR})"
./scripts/build.sh

BIN="${BUILD_DIR}/examples/finetune_lora"
if [[ ! -x "$BIN" ]]; then
  echo "demo: ${BIN} was not built (configure with -DTRAINSNAP_BUILD_EXAMPLES=ON)" >&2
  exit 1
fi

if [[ -n "${TRAINSNAP_DEMO_DIR:-}" ]]; then
  WORK_DIR=$TRAINSNAP_DEMO_DIR
  mkdir -p "$WORK_DIR"
else
  WORK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/trainsnap_demo.XXXXXX")
  trap 'rm -rf "$WORK_DIR"' EXIT
fi

echo "== demo in ${WORK_DIR}"
# finetune_lora exits non-zero unless the resumed run is bitwise identical.
"$BIN" demo "$WORK_DIR" --steps "$STEPS"

# The interpreter the binding was built for (python/CMakeLists.txt writes it).
if [[ -f "${BUILD_DIR}/python/interpreter" ]]; then
  PYTHON=$(cat "${BUILD_DIR}/python/interpreter")
  echo "== Python demo: examples/finetune_lora.py (${PYTHON})"
  PYTHONPATH="${BUILD_DIR}/python" "$PYTHON" examples/finetune_lora.py demo "$WORK_DIR/python" --steps 20
  echo "== Python under torchrun: examples/ddp_finetune.py (2 ranks, DDP on Gloo; one rank SIGKILLed, all restarted)"
  # Exits non-zero unless every rank ends bitwise identical to an
  # uninterrupted job.
  PYTHONPATH="${BUILD_DIR}/python" "$PYTHON" examples/ddp_finetune.py demo "$WORK_DIR/ddp" --steps 24
else
  echo "== no Python demo: the binding was not built (the configure output says why)"
fi

DP_BIN="${BUILD_DIR}/examples/train_data_parallel"
if [[ -x "$DP_BIN" ]]; then
  echo "== data parallel: 4 ranks, one SIGKILLed mid-run, every rank resumed"
  # Exits non-zero unless every rank's final state is bitwise identical to
  # an uninterrupted 4-rank run.
  "$DP_BIN" demo "$WORK_DIR/data_parallel" --ranks 4 --steps 24
  echo "== elastic: a 4-rank run restored on 2 ranks, which train on"
  # Exits non-zero unless every restored rank's state is bitwise the one it
  # (or its home rank) had at the restored step.
  "$DP_BIN" elastic "$WORK_DIR/elastic" --from 4 --to 2 --steps 24
fi
