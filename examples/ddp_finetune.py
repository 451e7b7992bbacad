#!/usr/bin/env python3
"""Data-parallel LoRA fine-tuning under torchrun, with a trainsnap snapshot
every step across all ranks (trainsnap.DistributedCheckpointer).

A frozen base with low-rank adapters wrapped in DistributedDataParallel
(Gloo, CPU), AdamW with a warm-up LambdaLR, dropout, and a DataLoader over a
distributed trainsnap.ResumableSampler (each rank its share of one shuffled
order). Every rank resumes from the latest step all ranks committed.

    python3 -m torch.distributed.run --standalone --nproc_per_node=2 \\
        examples/ddp_finetune.py train RUN_DIR --steps 24 [--out PREFIX]
    python3 examples/ddp_finetune.py demo DIR [--steps 24] [--nproc 2] [--seed S]

`demo` runs an uninterrupted reference job, then a job in which one rank
SIGKILLs itself at a random step (captures in flight) and torchrun restarts
every rank (--max_restarts=1), which resume from the latest global step; it
compares every rank's final state bitwise with the reference (exit 1 when
anything differs).
"""

import argparse
import os
import random
import signal
import subprocess
import sys

import torch
import torch.distributed as dist
from torch import nn

import trainsnap

WIDTH, RANK, SAMPLES, BATCH = 64, 4, 96, 4


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


def warmup(step):
    return min(1.0, (step + 1) / 5)


class Job:
    """One rank's training state."""

    def __init__(self, rank, world):
        torch.manual_seed(0)  # the same model on every rank (DDP also broadcasts rank 0's)
        self.model = Model()
        self.ddp = nn.parallel.DistributedDataParallel(self.model)
        data = torch.Generator().manual_seed(1)
        x = torch.randn(SAMPLES, WIDTH, generator=data)
        y = torch.tanh(x @ torch.randn(WIDTH, WIDTH, generator=data) / WIDTH ** 0.5)
        dataset = torch.utils.data.TensorDataset(x, y)
        self.sampler = trainsnap.ResumableSampler(dataset, shuffle=True, seed=2, rank=rank, world_size=world)
        # The loader's own generator: starting an epoch does not draw from torch's global RNG.
        self.loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, sampler=self.sampler, num_workers=1,
                                                  generator=torch.Generator().manual_seed(3))
        self.optimizer = torch.optim.AdamW([p for p in self.ddp.parameters() if p.requires_grad], lr=1e-2)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, warmup)
        self.progress = {"step": 0}
        torch.manual_seed(100 + rank)  # dropout differs per rank

    def state(self):
        return dict(model=self.ddp, optimizer=self.optimizer, scheduler=self.scheduler,
                    extra={"data": self.loader, "progress": self.progress})

    def step(self, x, y):
        loss = nn.functional.mse_loss(self.ddp(x), y)
        loss.backward()  # DDP averages the adapters' gradients over the ranks
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad()
        self.progress["step"] += 1
        return loss.item()

    def final_state(self):
        return {"model": {k: v.clone() for k, v in self.model.state_dict().items()},
                "optimizer": self.optimizer.state_dict(), "scheduler_last_epoch": self.scheduler.last_epoch,
                "sampler": self.sampler.state_dict(), "progress": dict(self.progress),
                "torch_rng": torch.get_rng_state()}


def event(directory, text):
    """One line in DIR/events (appended by every rank: O_APPEND keeps lines whole)."""
    with open(os.path.join(directory, "events"), "a") as f:
        f.write(text + "\n")


def train(args):
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    job = Job(rank, world)
    ckpt = trainsnap.DistributedCheckpointer(args.run_dir, model_state="trainable", timeout=120)
    if ckpt.steps():
        step = ckpt.restore_latest(**job.state())
        event(args.run_dir, f"resume rank {rank} step {step} restart {restart}")
    while job.progress["step"] < args.steps:
        for x, y in job.loader:
            loss = job.step(x, y)
            step = job.progress["step"]
            ckpt.capture_async(step, **job.state())
            if rank == 0 and step % 8 == 0:
                print(f"step {step}: loss {loss:.5f}, lr {job.scheduler.get_last_lr()[0]:.5f}", flush=True)
            if step == args.kill_at and rank == args.kill_rank and restart == 0:
                event(args.run_dir, f"kill rank {rank} step {step}")
                os.kill(os.getpid(), signal.SIGKILL)  # the captures in flight may or may not commit
            if step == args.steps:
                break
    ckpt.flush()
    ckpt.close()
    if args.out:
        torch.save(job.final_state(), f"{args.out}-rank{rank}.pt")
    dist.destroy_process_group()
    return 0


def bitwise_equal(a, b):
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)))
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(bitwise_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(bitwise_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def torchrun(nproc, log_dir, *args):
    """python3 -m torch.distributed.run on this machine, on a free port
    (--standalone). torch 1.13's launcher under Python >= 3.11 cannot parse
    its own default "0" for --redirects/--tee (enum.Flag no longer iterates
    the zero member): give it values it parses, which also tee the workers'
    output to the console."""
    from torch.distributed.elastic.multiprocessing.api import Std
    fix = ["--redirects", "1", "--tee", "1", "--log_dir", log_dir] if Std.from_str("0") is None else []
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "--monitor_interval=1", *fix,
               *args]
    return subprocess.run(command).returncode


def demo(args):
    if os.path.isdir(args.dir) and os.listdir(args.dir):
        print(f"demo: {args.dir} is not empty (its runs would resume)", file=sys.stderr)
        return 2
    os.makedirs(args.dir, exist_ok=True)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    kill_at, kill_rank = rng.randrange(3, args.steps - 1), rng.randrange(args.nproc)
    me = os.path.abspath(__file__)
    steps = ["--steps", str(args.steps)]
    print(f"-- reference: {args.nproc} ranks, {args.steps} steps, a snapshot every step", flush=True)
    reference = os.path.join(args.dir, "reference")
    if torchrun(args.nproc, os.path.join(args.dir, "logs-reference"), me, "train", os.path.join(args.dir, "run-ref"),
                *steps, "--out", reference) != 0:
        print("demo: the reference job failed", file=sys.stderr)
        return 1
    print(f"-- rank {kill_rank} SIGKILLs itself at step {kill_at} (seed {seed}); torchrun restarts every rank",
          flush=True)
    run_dir, resumed = os.path.join(args.dir, "run"), os.path.join(args.dir, "resumed")
    code = torchrun(args.nproc, os.path.join(args.dir, "logs-killed"), "--max_restarts=1", me, "train", run_dir,
                    *steps, "--out", resumed, "--kill-at", str(kill_at), "--kill-rank", str(kill_rank))
    events = open(os.path.join(run_dir, "events")).read().splitlines() if os.path.exists(
        os.path.join(run_dir, "events")) else []
    print("\n".join("   " + e for e in events), flush=True)
    if code != 0 or not any(e.startswith("kill ") for e in events) or not any(e.startswith("resume ") for e in events):
        print(f"demo: the killed job did not resume and finish (exit {code})", file=sys.stderr)
        return 1
    different = []
    for r in range(args.nproc):
        a, b = torch.load(f"{reference}-rank{r}.pt"), torch.load(f"{resumed}-rank{r}.pt")
        different += [f"rank {r}: {k}" for k in a if not bitwise_equal(a[k], b[k])]
    global_steps = trainsnap.Store.open_read_only(os.path.join(run_dir, "global")).list()
    print(f"-- run directory: {len(global_steps)} global steps, {args.nproc} rank stores "
          f"(`trainsnap list {run_dir}`)")
    if different:
        print(f"demo: the resumed job differs from the reference: {different}", file=sys.stderr)
        return 1
    print(f"-- every rank bitwise identical to the reference: adapters, frozen base, optimizer, scheduler, "
          f"sampler position, RNG (TRAINSNAP_DDP_SEED={seed} replays this run)")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="one rank (run it under torchrun)")
    t.add_argument("run_dir")
    t.add_argument("--steps", type=int, default=24)
    t.add_argument("--out", help="write each rank's final state to OUT-rankR.pt")
    t.add_argument("--kill-at", type=int, default=-1, help="SIGKILL rank --kill-rank after this step (first attempt)")
    t.add_argument("--kill-rank", type=int, default=0)
    d = sub.add_parser("demo")
    d.add_argument("dir")
    d.add_argument("--steps", type=int, default=24)
    d.add_argument("--nproc", type=int, default=2)
    d.add_argument("--seed", type=int, default=int(os.environ["TRAINSNAP_DDP_SEED"])
                   if "TRAINSNAP_DDP_SEED" in os.environ else None)
    args = parser.parse_args()
    return demo(args) if args.command == "demo" else train(args)


if __name__ == "__main__":
    sys.exit(main())
