#!/usr/bin/env python3
"""The Python binding's cost in a PyTorch training loop, against its peers
measured in the same run:

- overhead per step: the loop with capture_async every step against the
  same loop without snapshots;
- bytes per snapshot: the store's new bytes against torch.save(state dicts
  of model, optimizer and scheduler) and that file compressed with Zstd
  level 1 (python3-zstandard); the store commits with fsync, the peer's
  file is fsynced too;
- restore: Checkpointer.restore against torch.load (of that file, from the
  page cache) + load_state_dict.

Workloads: "full" (every parameter trains, AdamW; also "full_raw" with
Store(compress=False)) and "lora" (frozen base + adapters, model_state="trainable").

    PYTHONPATH=build/python /usr/bin/python3 bench/python_bench.py [--steps 40] [--json out.json]
"""

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time

import torch
from torch import nn

import trainsnap

try:
    import zstandard
except ImportError:  # python3-zstandard (scripts/setup.sh installs it)
    zstandard = None


class Block(nn.Module):
    def __init__(self, width, lora_rank=0):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)
        self.dropout = nn.Dropout(0.1)
        self.rank = lora_rank
        if lora_rank:
            for p in self.parameters():
                p.requires_grad_(False)
            self.lora_a = nn.Parameter(torch.randn(lora_rank, width) * 0.02)
            self.lora_b = nn.Parameter(torch.zeros(4 * width, lora_rank))

    def forward(self, x):
        h = self.up(self.norm(x))
        if self.rank:
            h = h + (x @ self.lora_a.t()) @ self.lora_b.t()
        return x + self.dropout(self.down(torch.relu(h)))


def make(workload, width, depth):
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(width, 16 if workload == "lora" else 0) for _ in range(depth)])
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.9)
    return model, opt, sched


def step(model, opt, sched, x):
    model(x).pow(2).mean().backward()
    opt.step()
    sched.step()
    opt.zero_grad()


def loop_seconds(workload, width, depth, steps, x, store_dir=None, compress=True):
    model, opt, sched = make(workload, width, depth)
    ckpt = store = None
    if store_dir:
        store = trainsnap.Store(store_dir, sync=True, compress=compress)
        ckpt = trainsnap.Checkpointer(store, model_state="trainable" if workload == "lora" else "trainable_and_buffers")
    times = []
    for s in range(1, steps + 1):
        start = time.perf_counter()
        step(model, opt, sched, x)
        if ckpt:
            ckpt.capture_async(s, model=model, optimizer=opt, scheduler=sched, rng=True)
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    if ckpt:
        ckpt.flush()
    drain = time.perf_counter() - start
    return times, drain, (model, opt, sched, ckpt, store)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    x = torch.randn(32, args.width)
    results = {"schema": "trainsnap.python_bench/1", "steps": args.steps, "width": args.width, "depth": args.depth,
               "torch": torch.__version__, "workloads": {}}
    work = tempfile.mkdtemp(prefix="trainsnap_python_bench_")
    try:
        # (name, workload, Store(compress=)): compress=False trades bytes for
        # encoder CPU (StoreOptions::compress), which a snapshot every step on
        # two cores runs short of.
        for name, workload, compress in (("full", "full", True), ("full_raw", "full", False), ("lora", "lora", True)):
            base, _, _ = loop_seconds(workload, args.width, args.depth, args.steps, x)
            store_dir = os.path.join(work, name)
            snap, drain, (model, opt, sched, ckpt, store) = loop_seconds(workload, args.width, args.depth,
                                                                         args.steps, x, store_dir, compress)
            # Medians: the first steps allocate (optimizer state, staging buffers).
            base_ms, snap_ms = statistics.median(base) * 1e3, statistics.median(snap) * 1e3
            infos = store.list()
            new_bytes = statistics.median(i["new_bytes"] for i in infos[1:])
            trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)

            # The peer: one torch.save file per snapshot, synced like the store's commits.
            peer = os.path.join(work, name + ".pt")
            start = time.perf_counter()
            with open(peer, "wb") as f:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                            "scheduler": sched.state_dict()}, f)
                f.flush()
                os.fsync(f.fileno())
            save_s = time.perf_counter() - start
            with open(peer, "rb") as f:
                saved = f.read()
            zstd_bytes = len(zstandard.ZstdCompressor(level=1).compress(saved)) if zstandard else None

            target_model, target_opt, target_sched = make(workload, args.width, args.depth)
            restore_s = []
            for _ in range(3):
                start = time.perf_counter()
                ckpt.restore(args.steps, model=target_model, optimizer=target_opt, scheduler=target_sched, rng=True)
                restore_s.append(time.perf_counter() - start)
            restored = target_model.state_dict()
            for key, value in model.state_dict().items():
                assert torch.equal(value, restored[key]), key
            load_s = []
            for _ in range(3):
                start = time.perf_counter()
                loaded = torch.load(peer)
                target_model.load_state_dict(loaded["model"])
                target_opt.load_state_dict(loaded["optimizer"])
                target_sched.load_state_dict(loaded["scheduler"])
                load_s.append(time.perf_counter() - start)
            ckpt.close()
            store.close()
            r = {
                "trainable_bytes": trainable,
                "step_ms_no_snapshot": base_ms, "step_ms_with_capture_async": snap_ms,
                "overhead_ms_per_step": snap_ms - base_ms, "flush_at_end_ms": drain * 1e3,
                "new_bytes_per_snapshot": new_bytes, "torch_save_bytes": len(saved), "torch_save_zstd1_bytes": zstd_bytes,
                "torch_save_ms": save_s * 1e3,
                "restore_ms": min(restore_s) * 1e3, "torch_load_and_load_state_dict_ms": min(load_s) * 1e3,
            }
            r["compress"] = compress
            results["workloads"][name] = r
            print(f"{name}: trainable {trainable / 2**20:.2f} MiB; step {base_ms:.2f} ms -> {snap_ms:.2f} ms with "
                  f"capture_async (+{snap_ms - base_ms:.2f} ms); new bytes/snapshot {new_bytes / 2**20:.3f} MiB vs "
                  f"torch.save {len(saved) / 2**20:.3f} MiB"
                  + (f", zstd-1 {zstd_bytes / 2**20:.3f} MiB" if zstd_bytes else "")
                  + f"; restore {min(restore_s) * 1e3:.1f} ms vs torch.load+load_state_dict {min(load_s) * 1e3:.1f} ms",
                  flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
