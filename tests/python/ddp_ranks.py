"""One rank of the DistributedCheckpointer tests (test_distributed.py starts
one process per rank, joined through a file:// rendezvous):

    ddp_ranks.py SCENARIO RANK WORLD DIR

Writes DIR/result-RANK.json: {"checks": {name: value}} for the parent to
assert on, and exits 0 (1 with a traceback on an unexpected error)."""

import json
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer

import trainsnap
from loop import _clone, first_difference

SAMPLES, BATCH = 48, 4


class Job:
    """A DDP model with dropout, AdamW (or ZeRO over Adam), StepLR, a
    distributed ResumableSampler and the step as a plain-value extra."""

    def __init__(self, rank, world, zero=False, optimizer_class=torch.optim.AdamW):
        torch.manual_seed(0)  # the same initial model on every rank
        self.model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Dropout(0.2), nn.Linear(12, 2))
        self.ddp = nn.parallel.DistributedDataParallel(self.model)
        if zero:
            self.opt = ZeroRedundancyOptimizer(self.ddp.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
        else:
            self.opt = optimizer_class(self.ddp.parameters(), lr=0.01)
        self.sched = torch.optim.lr_scheduler.StepLR(self.opt, step_size=2, gamma=0.5)
        data = torch.utils.data.TensorDataset(torch.randn(SAMPLES, 6, generator=torch.Generator().manual_seed(3)))
        self.sampler = trainsnap.ResumableSampler(data, seed=5, rank=rank, world_size=world)
        self.loader = torch.utils.data.DataLoader(data, batch_size=BATCH, sampler=self.sampler,
                                                  generator=torch.Generator().manual_seed(rank))
        self.batches = iter(self.loader)
        self.progress = {"step": 0}
        torch.manual_seed(100 + rank)  # dropout differs per rank

    def state(self):
        return dict(model=self.ddp, optimizer=self.opt, scheduler=self.sched,
                    extra={"data": self.sampler, "progress": self.progress})

    def step(self):
        try:
            (x,) = next(self.batches)
        except StopIteration:
            self.batches = iter(self.loader)
            (x,) = next(self.batches)
        self.ddp(x).pow(2).mean().backward()
        self.opt.step()
        self.opt.zero_grad()
        self.sched.step()
        self.progress["step"] += 1

    def restored(self):
        """After a restore: the next batch comes from a new iteration."""
        self.batches = iter(self.loader)

    def dump(self):
        local = self.opt.optim if isinstance(self.opt, ZeroRedundancyOptimizer) else self.opt
        return {"model": _clone(dict(self.model.state_dict())), "optimizer": _clone(local.state_dict()),
                "lr": [g["lr"] for g in self.opt.param_groups],
                "scheduler": {k: v for k, v in self.sched.state_dict().items() if not callable(v)},
                "sampler": self.sampler.state_dict(), "progress": dict(self.progress), "rng": torch.get_rng_state()}


def error_text(call):
    try:
        call()
    except trainsnap.Error as e:
        return f"{type(e).__name__}: {e}"
    return "OK"


def api(rank, world, run_dir, checks):
    job = Job(rank, world)
    ckpt = trainsnap.DistributedCheckpointer(run_dir, timeout=60, sync=False, threads=1)
    checks["rank"], checks["world_size"] = ckpt.rank, ckpt.world_size
    dumps = {}
    for step in range(1, 5):
        job.step()
        if step == 2 and rank == 1:
            time.sleep(1.5)  # rank 0's handle cannot complete before rank 1 captured
        handle = ckpt.capture_async(step, **job.state())
        dumps[step] = job.dump()
        if step == 2 and rank == 0:
            try:
                handle.result(timeout=0.1)
                checks["timeout"] = "completed"
            except TimeoutError:
                checks["timeout"] = "TimeoutError"
        if step == 2:
            checks["handle"] = [handle.result(timeout=60), handle.done(), handle.step]
    ckpt.flush()
    checks["steps"] = ckpt.steps()

    other = Job(rank, world)
    assert ckpt.restore(3, **other.state()) == 3
    other.restored()
    checks["restore_3"] = first_difference(other.dump(), dumps[3])
    # Training on from the restored step 3 gives step 4 bitwise (batch, dropout, update).
    job_4 = Job(rank, world)
    ckpt.restore(3, **job_4.state())
    job_4.restored()
    job_4.step()
    checks["train_on"] = first_difference(job_4.dump(), dumps[4])

    # Rank 1's target has another optimizer class: every rank fails with rank 1's error, nothing changes.
    bad = Job(rank, world, optimizer_class=torch.optim.Adam if rank == 1 else torch.optim.AdamW)
    before = bad.dump()
    checks["mismatch"] = error_text(lambda: ckpt.restore(3, **bad.state()))
    checks["mismatch_unchanged"] = first_difference(bad.dump(), before)

    # Roll back to 2, train on: step 3 is captured again, bitwise as before.
    for step in (5, 6):
        job.step()
        ckpt.capture(step, **job.state())
    assert ckpt.rollback_to(2, **job.state()) == 2
    job.restored()
    checks["after_rollback"] = ckpt.steps()
    job.step()
    ckpt.capture(3, **job.state())
    checks["recaptured_3"] = first_difference(job.dump(), dumps[3])
    checks["latest"] = ckpt.restore_latest(**other.state())
    checks["misuse"] = [error_text(lambda: ckpt.capture(True, **job.state())),
                        error_text(lambda: ckpt.restore(3, partial=True, **job.state()))]
    ckpt.close()
    if rank == 0:
        torch.save(dumps[3]["model"], os.path.join(os.path.dirname(run_dir), "model-3.pt"))

    # A bad replica_check_stride is refused before any collective.
    checks["stride_misuse"] = [error_text(lambda: trainsnap.DistributedCheckpointer(run_dir, replica_check_stride=s))
                               for s in (0, 2.5, True)]
    # The replica check is on by default: rank 1's drifted weight fails the
    # step on every rank, and the step does not become global.
    drift = trainsnap.DistributedCheckpointer(run_dir, timeout=60, sync=False, threads=1)
    if rank == 1:
        with torch.no_grad():
            next(job.model.parameters())[0, 0] += 1
    checks["drift"] = error_text(lambda: drift.capture(4, **job.state()))
    checks["after_drift"] = drift.steps()
    drift.close()


def zero(rank, world, run_dir, checks):
    job = Job(rank, world, zero=True)
    ckpt = trainsnap.DistributedCheckpointer(run_dir, optimizer_replicated=False, timeout=60, sync=False, threads=1)
    dumps = {}
    for step in range(1, 5):
        job.step()
        ckpt.capture_async(step, **job.state())
        dumps[step] = job.dump()
    ckpt.flush()
    checks["shard_sizes"] = [len(job.opt.optim.state_dict()["state"]), len(job.opt.param_groups[0]["params"])]
    other = Job(rank, world, zero=True)
    ckpt.restore(2, **other.state())
    other.restored()
    checks["restore_2"] = first_difference(other.dump(), dumps[2])
    for step in (3, 4):
        other.step()
        checks[f"train_on_{step}"] = first_difference(other.dump(), dumps[step])
    ckpt.close()
    # The layout is recorded: a replicated-optimizer checkpointer refuses the sharded steps.
    again = trainsnap.DistributedCheckpointer(run_dir, optimizer_replicated=True, timeout=60, sync=False, threads=1)
    checks["layout"] = error_text(lambda: again.restore(2, **Job(rank, world, zero=True).state()))
    again.close()


def main():
    scenario, rank, world, directory = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    checks = {}
    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{directory}/rendezvous", rank=rank, world_size=world)
        {"api": api, "zero": zero}[scenario](rank, world, os.path.join(directory, "run"), checks)
        dist.destroy_process_group()
        code = 0
    except BaseException:
        checks["traceback"] = traceback.format_exc()
        code = 1
    with open(os.path.join(directory, f"result-{rank}.json"), "w") as f:
        json.dump({"checks": checks}, f)
    return code


if __name__ == "__main__":
    sys.exit(main())
