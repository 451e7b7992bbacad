#!/usr/bin/env python3
"""The Python binding's cost in a PyTorch training loop, against its peers
measured in the same run:

- overhead per step: the loop with capture_async every step against the
  same loop without snapshots, in interleaved rounds (without, with, without,
  with, ...; --rounds, default 3) so that load drift on a shared machine hits
  both; medians and ranges over the rounds, and the CPU time per snapshot on
  the training thread and on every other thread (the pipeline's, the store's);
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


class Pass:
    """One loop: per-step wall times, the final flush, and CPU seconds of the
    training thread and of the whole process over the loop (flush included)."""

    def __init__(self, times, drain, thread_cpu, process_cpu):
        self.times, self.drain = times, drain
        self.thread_cpu, self.process_cpu = thread_cpu, process_cpu

    @property
    def wall(self):
        return sum(self.times) + self.drain


def loop_seconds(workload, width, depth, steps, x, store_dir=None, compress=True):
    model, opt, sched = make(workload, width, depth)
    ckpt = store = None
    if store_dir:
        store = trainsnap.Store(store_dir, sync=True, compress=compress)
        ckpt = trainsnap.Checkpointer(store, model_state="trainable" if workload == "lora" else "trainable_and_buffers")
    times = []
    thread0, process0 = time.thread_time(), time.process_time()
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
    measured = Pass(times, drain, time.thread_time() - thread0, time.process_time() - process0)
    return measured, (model, opt, sched, ckpt, store)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds of the overhead measurement (each: without, then with snapshots)")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    torch.set_num_threads(1)
    x = torch.randn(32, args.width)
    results = {"schema": "trainsnap.python_bench/2", "steps": args.steps, "width": args.width, "depth": args.depth,
               "rounds": args.rounds, "torch": torch.__version__, "workloads": {}}
    work = tempfile.mkdtemp(prefix="trainsnap_python_bench_")
    try:
        # (name, workload, Store(compress=)): compress=False trades bytes for
        # encoder CPU (StoreOptions::compress), which a snapshot every step on
        # two cores runs short of.
        for name, workload, compress in (("full", "full", True), ("full_raw", "full", False), ("lora", "lora", True)):
            rounds = []
            for r in range(args.rounds):
                base, _ = loop_seconds(workload, args.width, args.depth, args.steps, x)
                store_dir = os.path.join(work, f"{name}-{r}")
                snap, (model, opt, sched, ckpt, store) = loop_seconds(workload, args.width, args.depth, args.steps, x,
                                                                      store_dir, compress)
                committed = len(store.list())
                rounds.append({
                    # Medians of the steps: the first steps allocate (optimizer state, staging buffers).
                    "step_ms_no_snapshot": statistics.median(base.times) * 1e3,
                    "step_ms_with_capture_async": statistics.median(snap.times) * 1e3,
                    "loop_s_no_snapshot": base.wall, "loop_s_with_capture_async": snap.wall,
                    "overhead_pct": 100.0 * (snap.wall - base.wall) / base.wall,
                    "flush_at_end_ms": snap.drain * 1e3, "snapshots_committed": committed,
                    "training_thread_cpu_ms_per_snapshot": 1e3 * (snap.thread_cpu - base.thread_cpu) / committed,
                    "other_threads_cpu_ms_per_snapshot":
                        1e3 * ((snap.process_cpu - snap.thread_cpu) - (base.process_cpu - base.thread_cpu)) / committed,
                })
                if r + 1 < args.rounds:  # the last round's store is measured below
                    ckpt.close()
                    store.close()
                    shutil.rmtree(store_dir, ignore_errors=True)

            def median_of(key):
                return statistics.median(r[key] for r in rounds)

            base_ms, snap_ms = median_of("step_ms_no_snapshot"), median_of("step_ms_with_capture_async")
            overheads = [r["overhead_pct"] for r in rounds]
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
                "overhead_ms_per_step": snap_ms - base_ms, "flush_at_end_ms": median_of("flush_at_end_ms"),
                "overhead_pct": statistics.median(overheads), "overhead_pct_min": min(overheads),
                "overhead_pct_max": max(overheads),
                "training_thread_cpu_ms_per_snapshot": median_of("training_thread_cpu_ms_per_snapshot"),
                "other_threads_cpu_ms_per_snapshot": median_of("other_threads_cpu_ms_per_snapshot"),
                "rounds": rounds,
                "new_bytes_per_snapshot": new_bytes, "torch_save_bytes": len(saved), "torch_save_zstd1_bytes": zstd_bytes,
                "torch_save_ms": save_s * 1e3,
                "restore_ms": min(restore_s) * 1e3, "torch_load_and_load_state_dict_ms": min(load_s) * 1e3,
            }
            r["compress"] = compress
            results["workloads"][name] = r
            print(f"{name}: trainable {trainable / 2**20:.2f} MiB; step {base_ms:.2f} ms -> {snap_ms:.2f} ms with "
                  f"capture_async (+{snap_ms - base_ms:.2f} ms); loop overhead {statistics.median(overheads):+.1f} % "
                  f"(median of {len(rounds)} interleaved rounds, range {min(overheads):+.1f}..{max(overheads):+.1f} %); "
                  f"CPU per snapshot: training thread {r['training_thread_cpu_ms_per_snapshot']:.1f} ms, "
                  f"other threads {r['other_threads_cpu_ms_per_snapshot']:.1f} ms; "
                  f"new bytes/snapshot {new_bytes / 2**20:.3f} MiB vs "
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
