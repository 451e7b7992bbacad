#!/usr/bin/env bash
# CTest: train_gan with trainsnap's defaults, SIGKILLed twice -- in the middle
# of an epoch and at an epoch boundary, each time with DataLoader batches
# prefetched -- and resumed in fresh processes, must end bit for bit where an
# uninterrupted run ends.
#   gan_kill_resume_test.sh TRAIN_GAN_BINARY WORK_DIR
set -euo pipefail
bin=$1
dir=$2
rm -rf "$dir"
mkdir -p "$dir"

fail() { echo "gan_kill_resume_test: $*" >&2; exit 1; }

# Expects the run to die of SIGKILL (exit status 128 + 9) after the snapshot of step $1.
crash_after() {
  local step=$1 out
  set +e
  out=$("$bin" --store "$dir/run" --crash-after "$step" 2>&1)
  local rc=$?
  set -e
  echo "$out"
  [ "$rc" -eq 137 ] || fail "the run meant to crash after step $step exited with $rc"
  grep -q "SIGKILL after the snapshot of step $step committed" <<<"$out" || fail "no crash at step $step"
}

"$bin" --store "$dir/reference" --final "$dir/reference.bin"

# Epoch 1, its 3rd of 8 batches.
crash_after 10
# Resumes at step 11, then dies after the last batch of epoch 2.
out=$(crash_after 23)
echo "$out"
grep -q "resumed from step 10 (epoch 1, 96 samples into it)" <<<"$out" || fail "did not resume after step 10"

out=$("$bin" --store "$dir/run" --final "$dir/resumed.bin")
echo "$out"
grep -q "resumed from step 23 (epoch 3, 0 samples into it)" <<<"$out" || fail "did not resume after step 23"

cmp "$dir/reference.bin" "$dir/resumed.bin" || fail "the resumed run's final state differs from the reference"
echo "gan_kill_resume_test: killed after steps 10 and 23, resumed twice: final state identical to the reference" \
     "($(stat -c %s "$dir/reference.bin") bytes compared)"
