#!/usr/bin/env python3
"""LoRA fine-tuning in Python with a trainsnap snapshot every micro-step.

A frozen base (two Linear layers) with low-rank adapters, AdamW with a
warm-up LambdaLR, gradient accumulation over weighted micro-steps, dropout, a
DataLoader with 2 workers over a shuffled trainsnap.ResumableSampler whose
position (what the loop consumed, not what the workers prefetched) is in the
snapshot.
Kill it at any moment and run it again: it resumes from the latest snapshot
and ends bitwise where an uninterrupted run ends.

    finetune_lora.py train STORE --steps N [--out FILE] [--kill-at M]
    finetune_lora.py demo DIR [--steps N]

`demo` runs an uninterrupted reference, a run that SIGKILLs itself right
after queuing the snapshot of micro-step M (mid-window, commit in flight),
a resume in a fresh interpreter, and compares everything bitwise (exit 1
when anything differs).
"""

import argparse
import os
import random
import signal
import subprocess
import sys
import time

import torch
from torch import nn

import trainsnap

WIDTH, RANK, WINDOW = 256, 8, 4


class LoraLinear(nn.Module):
    def __init__(self, width, rank):
        super().__init__()
        self.base = nn.Linear(width, width)
        self.base.requires_grad_(False)  # the frozen base: never stored with model_state="trainable"
        self.lora_a = nn.Parameter(torch.randn(rank, width) / width ** 0.5)
        self.lora_b = nn.Parameter(torch.zeros(width, rank))

    def forward(self, x):
        return self.base(x) + (x @ self.lora_a.t()) @ self.lora_b.t()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = LoraLinear(WIDTH, RANK)
        self.dropout = nn.Dropout(0.1)
        self.l2 = LoraLinear(WIDTH, RANK)

    def forward(self, x):
        return self.l2(self.dropout(torch.relu(self.l1(x))))


def make_run():
    torch.manual_seed(0)
    random.seed(0)
    model = Model()
    data_gen = torch.Generator().manual_seed(1)
    x = torch.randn(256, WIDTH, generator=data_gen)
    y = torch.tanh(x @ torch.randn(WIDTH, WIDTH, generator=data_gen) / WIDTH ** 0.5)
    dataset = torch.utils.data.TensorDataset(x, y)
    sampler = trainsnap.ResumableSampler(dataset, shuffle=True, seed=2)
    # The loader's own generator: starting an epoch does not draw from torch's global RNG.
    loader = torch.utils.data.DataLoader(dataset, batch_size=16, sampler=sampler, num_workers=2,
                                         generator=torch.Generator().manual_seed(3))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 5))
    window = trainsnap.AccumulationWindow(size=WINDOW)
    return dict(model=model, optimizer=opt, scheduler=sched, accumulation=window, extra={"data": loader})


def micro_step(state, x, y):
    model, opt, sched, window = state["model"], state["optimizer"], state["scheduler"], state["accumulation"]
    weight = 1.0 + 0.1 * random.random()  # Python's RNG is part of the snapshot too
    loss = nn.functional.mse_loss(model(x), y) * weight
    loss.backward()
    window.weight_sum += weight
    window.micro_step += 1
    if window.micro_step == window.size:
        with torch.no_grad():
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.div_(window.weight_sum)
        opt.step()
        sched.step()
        opt.zero_grad()
        window.micro_step, window.weight_sum = 0, 0.0
    return loss.item()


def final_state(state):
    model, opt = state["model"], state["optimizer"]
    return {"params": {n: p.detach().clone() for n, p in model.named_parameters()},
            "grads": {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
            "optimizer": opt.state_dict(), "scheduler_last_epoch": state["scheduler"].last_epoch,
            "window": (state["accumulation"].micro_step, state["accumulation"].weight_sum),
            "sampler": state["extra"]["data"].sampler.state_dict(), "torch_rng": torch.get_rng_state(),
            "random": random.getstate()}


def train(args):
    state = make_run()
    total = args.steps * WINDOW
    done = 0
    ckpt = None
    if args.store:
        store = trainsnap.Store(args.store)
        ckpt = trainsnap.Checkpointer(store, model_state="trainable")
        if store.latest() is not None:
            done = ckpt.restore_latest(**state)
            print(f"resumed from micro-step {done}", flush=True)
    start = time.perf_counter()
    while done < total:
        for x, y in state["extra"]["data"]:  # each pass: the next epoch, or the rest of the restored one
            loss = micro_step(state, x, y)
            done += 1
            if ckpt:
                ckpt.capture_async(done, **state)
            if args.kill_at == done:
                print(f"micro-step {done}: loss {loss:.5f}, SIGKILL (snapshot {done} queued, maybe not committed)",
                      flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            if done == total:
                break
    if ckpt:
        ckpt.flush()
    print(f"{total} micro-steps done ({time.perf_counter() - start:.2f} s this run)", flush=True)
    if args.out:
        torch.save(final_state(state), args.out)


def bitwise_equal(a, b):
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)))
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(bitwise_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(bitwise_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def demo(args):
    os.makedirs(args.dir, exist_ok=True)
    store = os.path.join(args.dir, "store")
    me = [sys.executable, os.path.abspath(__file__), "train"]
    steps = ["--steps", str(args.steps)]
    kill_at = (args.steps // 2) * WINDOW + 2  # mid-window
    print("-- reference run (no snapshots)", flush=True)
    subprocess.run(me + ["", *steps, "--out", os.path.join(args.dir, "reference.pt")], check=True)
    print(f"-- run with a snapshot every micro-step, SIGKILLed at micro-step {kill_at}", flush=True)
    killed = subprocess.run(me + [store, *steps, "--kill-at", str(kill_at)])
    if killed.returncode != -signal.SIGKILL:
        print(f"demo: the run was not killed (exit {killed.returncode})", file=sys.stderr)
        return 1
    print("-- resumed in a fresh interpreter", flush=True)
    subprocess.run(me + [store, *steps, "--out", os.path.join(args.dir, "resumed.pt")], check=True)
    reference = torch.load(os.path.join(args.dir, "reference.pt"))
    resumed = torch.load(os.path.join(args.dir, "resumed.pt"))
    different = [k for k in reference if not bitwise_equal(reference[k], resumed[k])]
    reader = trainsnap.Store.open_read_only(store)
    infos = reader.list()
    logical = sum(i["logical_bytes"] for i in infos)
    new = sum(i["new_bytes"] for i in infos)
    print(f"-- store: {len(infos)} snapshots, {logical} logical bytes, {new} bytes written "
          f"(frozen base: 0 bytes), verify: {'ok' if reader.verify()['ok'] else 'FAILED'}")
    if different:
        print(f"demo: resumed run differs from the reference in {different}", file=sys.stderr)
        return 1
    print("-- bitwise identical: parameters, gradients, optimizer, scheduler, window, sampler position, RNG")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train")
    t.add_argument("store", help="store directory ('' = no snapshots)")
    t.add_argument("--steps", type=int, default=20, help="optimizer steps of 4 micro-steps")
    t.add_argument("--out", help="write the final state here (torch.save)")
    t.add_argument("--kill-at", type=int, default=0, help="SIGKILL itself after this micro-step")
    d = sub.add_parser("demo")
    d.add_argument("dir")
    d.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    return demo(args) if args.command == "demo" else train(args)


if __name__ == "__main__":
    sys.exit(main())
