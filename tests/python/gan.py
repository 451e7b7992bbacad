"""A small GAN for the binding's tests: G and D with BatchNorm, two Adams
with a scheduler each (OneCycleLR for G, StepLR for D), dropout in D, a
DataLoader with 2 workers drawing from a shuffled trainsnap.ResumableSampler,
and the loop's progress as a plain-value extra. Also a script (the
kill/resume test runs it in fresh interpreters):

    gan.py --steps 15 --out final.pt --store DIR [--hold-at N]

It resumes from the latest snapshot and captures every step with
capture_async, printing "step N" after each; with --hold-at N it waits
for the capture of step N to commit, prints "held N" and blocks (until
killed).
"""

import argparse
import sys

import torch
from torch import nn

import trainsnap

SAMPLES, BATCH, NOISE, WIDTH = 40, 8, 8, 4  # 5 batches per epoch


class Gan:
    def __init__(self, seed=0):
        torch.manual_seed(seed)
        self.G = nn.Sequential(nn.Linear(NOISE, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, WIDTH))
        self.D = nn.Sequential(nn.Linear(WIDTH, 16), nn.BatchNorm1d(16), nn.LeakyReLU(0.2), nn.Dropout(0.1),
                               nn.Linear(16, 1))
        self.opt_G = torch.optim.Adam(self.G.parameters(), lr=2e-3, betas=(0.5, 0.999))
        self.opt_D = torch.optim.Adam(self.D.parameters(), lr=2e-3, betas=(0.5, 0.999))
        self.sched_G = torch.optim.lr_scheduler.OneCycleLR(self.opt_G, max_lr=5e-3, total_steps=40)
        self.sched_D = torch.optim.lr_scheduler.StepLR(self.opt_D, step_size=4, gamma=0.7)
        data = torch.randn(SAMPLES, WIDTH, generator=torch.Generator().manual_seed(1)) * 0.5 + 1.0
        dataset = torch.utils.data.TensorDataset(data)
        self.sampler = trainsnap.ResumableSampler(dataset, shuffle=True, seed=11)
        # The loader's own generator: starting an epoch draws its workers'
        # base seed from it, not from torch's global RNG.
        self.loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, sampler=self.sampler, num_workers=2,
                                                  generator=torch.Generator().manual_seed(5))
        self.progress = {"step": 0, "seen": []}  # plain values: the loop's own counters
        self.bce = nn.BCEWithLogitsLoss()

    def state(self):
        return dict(model={"G": self.G, "D": self.D}, optimizer={"G": self.opt_G, "D": self.opt_D},
                    scheduler={"G": self.sched_G, "D": self.sched_D},
                    extra={"data": self.loader, "progress": self.progress})

    def train_step(self, real):
        ones, zeros = torch.ones(real.size(0), 1), torch.zeros(real.size(0), 1)
        fake = self.G(torch.randn(real.size(0), NOISE))
        loss_D = self.bce(self.D(real), ones) + self.bce(self.D(fake.detach()), zeros)
        self.opt_D.zero_grad()
        loss_D.backward()
        self.opt_D.step()
        loss_G = self.bce(self.D(fake), ones)
        self.opt_G.zero_grad()
        loss_G.backward()
        self.opt_G.step()
        self.sched_G.step()
        self.sched_D.step()
        self.progress["step"] += 1
        self.progress["seen"].append(round(float(real.sum()), 4))

    def train(self, steps, on_step=None):
        while self.progress["step"] < steps:
            for (real,) in self.loader:
                self.train_step(real)
                if on_step is not None:
                    on_step(self.progress["step"])
                if self.progress["step"] == steps:
                    return

    def snapshot(self):
        """Every value of the run, for bitwise comparison (fresh copies)."""
        from loop import _clone
        scheduler = {k: {n: v for n, v in s.state_dict().items() if not callable(v)}
                     for k, s in (("G", self.sched_G), ("D", self.sched_D))}
        return {"G": _clone(self.G.state_dict()), "D": _clone(self.D.state_dict()),
                "opt_G": _clone(self.opt_G.state_dict()), "opt_D": _clone(self.opt_D.state_dict()),
                "scheduler": scheduler, "sampler": self.sampler.state_dict(), "progress": _clone(self.progress),
                "torch_rng": torch.get_rng_state()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--hold-at", type=int, default=-1)
    args = parser.parse_args()
    gan = Gan()
    store = trainsnap.Store(args.store, sync=False)  # SIGKILL keeps the page cache: no fsync needed
    ckpt = trainsnap.Checkpointer(store, gradients="never")
    if store.latest() is not None:
        ckpt.restore_latest(**gan.state())
    print(f"resumed {gan.progress['step']}", flush=True)

    def on_step(step):
        handle = ckpt.capture_async(step, **gan.state())
        print(f"step {step}", flush=True)
        if step == args.hold_at:
            handle.result()
            print(f"held {step}", flush=True)
            sys.stdin.read()

    gan.train(args.steps, on_step)
    ckpt.flush()
    torch.save(gan.snapshot(), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
