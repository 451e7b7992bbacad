"""Two models, two optimizers, two schedulers and a resumable DataLoader
with 2 workers: a GAN (tests/python/gan.py) SIGKILLed mid-epoch and at an
epoch boundary, resumed each time in a fresh interpreter, ends bitwise equal
to a run that never stopped."""

import os
import sys

import torch

import trainsnap
from gan import Gan
from kit import HERE, first_difference, run_to_end, run_until_held

GAN = os.path.join(HERE, "gan.py")
STEPS = 15  # 3 epochs of 5 batches


def test_gan_killed_mid_epoch_and_at_an_epoch_boundary_resumes_bitwise(tmp_path):
    reference = Gan()
    reference.train(STEPS)
    expected = reference.snapshot()
    assert expected["sampler"]["epoch"] == 2 and expected["progress"]["step"] == STEPS

    args = [sys.executable, GAN, "--steps", str(STEPS), "--store", str(tmp_path / "store"),
            "--out", str(tmp_path / "final.pt")]
    # Step 7: two batches into epoch 1, with the workers' prefetched batches
    # (2 workers x prefetch_factor 2) not yet consumed. Step 10: the last
    # batch of epoch 1.
    assert run_until_held(args + ["--hold-at", "7"]) == 7
    assert run_until_held(args + ["--hold-at", "10"]) == 10
    run_to_end(args)
    assert first_difference(torch.load(str(tmp_path / "final.pt")), expected) == ""

    # The snapshots hold what the loop consumed, not what the workers fetched
    # (a fully consumed epoch loads as the start of the next).
    store = trainsnap.Store.open_read_only(str(tmp_path / "store"))
    ckpt = trainsnap.Checkpointer(store)
    for step, epoch, position in ((7, 1, 16), (10, 2, 0), (15, 3, 0)):
        probe = Gan(seed=step)
        ckpt.restore(step, extra={"data": probe.sampler}, partial=True)
        assert (probe.sampler.state_dict()["epoch"], probe.sampler.state_dict()["position"]) == (epoch, position)
    ckpt.close()
    store.close()
