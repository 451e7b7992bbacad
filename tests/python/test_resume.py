"""Kill and resume: the training loop of loop.py, snapshotted every micro-step
with capture_async, is SIGKILLed at random micro-steps (3 times) and resumed
each time in a fresh interpreter; its final parameters, gradients, optimizer
and scheduler state, accumulation window, data cursor and every RNG are
bitwise equal to those of a run that never stopped.
TRAINSNAP_KILL_SEED fixes the kill points (the seed is printed on failure)."""

import os
import random
import subprocess
import sys

import pytest
import torch

from loop import Run, first_difference

LOOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loop.py")
STEPS = 30


def run_to_end(args, out):
    subprocess.run([sys.executable, LOOP, *args, "--out", str(out)], check=True, timeout=120,
                   stdout=subprocess.DEVNULL)
    return torch.load(str(out))


def run_until_killed(args, out, kill_at):
    """Starts the loop, SIGKILLs it once it reports micro-step >= kill_at (or
    resumed at or past it); returns the step it had reported last."""
    child = subprocess.Popen([sys.executable, LOOP, *args, "--hold", "--out", str(out)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    last = None
    try:
        for line in child.stdout:
            word, step = line.split()
            last = int(step)
            if last >= kill_at:
                break
        child.kill()
        assert child.wait(timeout=60) == -9
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
        child.stdin.close()
    return last


@pytest.mark.parametrize("config", ["adamw", "sgd"])
def test_sigkill_at_random_micro_steps_then_resume_is_bitwise_equal(tmp_path, config):
    """CTest runs the two configurations as separate tests (in parallel)."""
    seed = int(os.environ.get("TRAINSNAP_KILL_SEED", random.randrange(1 << 30)))
    kills = sorted(random.Random(seed).sample(range(1, STEPS - 1), 3))
    print(f"TRAINSNAP_KILL_SEED={seed} kill points {kills}")
    reference = Run(config)  # the uninterrupted run, in this process (the same code as loop.py's main)
    for _ in range(STEPS):
        reference.micro_step()
    reference = reference.snapshot()

    args = ["--config", config, "--steps", str(STEPS), "--store", str(tmp_path / "store")]
    reported = [run_until_killed(args, tmp_path / "killed.pt", k) for k in kills]
    assert not (tmp_path / "killed.pt").exists()
    assert all(r is not None for r in reported), reported
    resumed = run_to_end(args, tmp_path / "resumed.pt")
    assert first_difference(resumed, reference) == "", f"TRAINSNAP_KILL_SEED={seed}"
