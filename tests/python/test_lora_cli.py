"""LoRA-style fine-tuning from Python (frozen base + adapters): what each
snapshot costs in bytes, and the trainsnap CLI on a store written from Python."""

import json
import os
import subprocess

import pytest
import torch
from torch import nn

import trainsnap

CLI = os.environ.get("TRAINSNAP_CLI", "trainsnap")


class LoraLinear(nn.Module):
    def __init__(self, width, rank):
        super().__init__()
        self.base = nn.Linear(width, width)
        self.base.requires_grad_(False)
        self.lora_a = nn.Parameter(torch.randn(rank, width) * 0.1)
        self.lora_b = nn.Parameter(torch.randn(width, rank) * 0.01)

    def forward(self, x):
        return self.base(x) + x @ self.lora_a.t() @ self.lora_b.t()


def lora_model():
    torch.manual_seed(0)
    return nn.Sequential(LoraLinear(64, 4), nn.ReLU(), LoraLinear(64, 4))


def step(model, opt):
    model(torch.randn(8, 64)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()


def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def optimizer_state_bytes(opt):
    return nbytes(v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor))


def test_trainable_snapshots_hold_adapters_and_optimizer_state_only(tmp_path):
    store = trainsnap.Store(str(tmp_path / "s"), sync=False)
    ckpt = trainsnap.Checkpointer(store, model_state="trainable")
    model = lora_model()
    adapters = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(adapters, lr=1e-2)
    for s in range(1, 4):
        step(model, opt)
        ckpt.capture(s, model=model, optimizer=opt, rng=False)
    # 4 adapters of 256 floats; AdamW: exp_avg, exp_avg_sq (256 floats) and step (one float) each.
    assert nbytes(adapters) == 4 * 256 * 4
    assert optimizer_state_bytes(opt) == 4 * (2 * 256 * 4 + 4)
    for info in store.list():
        assert info["logical_bytes"] == nbytes(adapters) + optimizer_state_bytes(opt)
        assert info["tensors"] == 4 + 4 * 3


def test_full_snapshots_store_the_frozen_base_once(tmp_path):
    store = trainsnap.Store(str(tmp_path / "s"), sync=False, compress=False)
    ckpt = trainsnap.Checkpointer(store, model_state="full")
    model = lora_model()
    adapters = [p for p in model.parameters() if p.requires_grad]
    base = [p for p in model.parameters() if not p.requires_grad]
    opt = torch.optim.AdamW(adapters, lr=1e-2)
    step(model, opt)
    ckpt.capture(1, model=model, optimizer=opt, rng=False)
    first = store.info(1)
    step(model, opt)
    ckpt.capture(2, model=model, optimizer=opt, rng=False)
    second = store.info(2)
    changing = nbytes(adapters) + optimizer_state_bytes(opt)
    assert nbytes(base) == 2 * (64 * 64 + 64) * 4
    assert first["logical_bytes"] == second["logical_bytes"] == nbytes(base) + changing
    # Every tensor is one chunk, stored raw after a 16-byte header
    # (docs/format.md, "Chunk values"): the base is in the first snapshot's
    # new bytes and in none of the second's.
    # The four AdamW `step` tensors hold the same value: one chunk, 3 x 4 bytes deduplicated.
    header, steps_deduplicated = 16, 3 * 4
    assert first["new_chunks"] == 4 + 4 + 4 * 2 + 1
    assert first["new_bytes"] == nbytes(base) + changing - steps_deduplicated + header * first["new_chunks"]
    assert second["new_chunks"] == 4 + 4 * 2 + 1
    assert second["new_bytes"] == changing - steps_deduplicated + header * second["new_chunks"]


def cli(*args):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=60)


def test_cli_reads_a_store_written_from_python(tmp_path):
    path = str(tmp_path / "s")
    store = trainsnap.Store(path, sync=False)
    ckpt = trainsnap.Checkpointer(store, model_state="trainable")
    model = lora_model()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    window = trainsnap.AccumulationWindow(size=2)
    for s in range(1, 3):
        step(model, opt)
        sched.step()
        ckpt.capture(s, model=model, optimizer=opt, scheduler=sched, accumulation=window)
    ckpt.close()

    listed = cli("list", path, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [row["step"] for row in json.loads(listed.stdout)["snapshots"]] == [1, 2]

    shown = cli("show", path, "2")
    assert shown.returncode == 0, shown.stderr
    assert "python:optimizer (torch.optim.adamw.AdamW, 12 tensors" in shown.stdout
    assert "python:scheduler (torch.optim.lr_scheduler.StepLR, 0 tensors" in shown.stdout
    assert "0.lora_a" in shown.stdout and "accumulation window: micro-step 0 of 2" in shown.stdout

    verified = cli("verify", path, "--all")
    assert verified.returncode == 0, verified.stdout + verified.stderr

    out = tmp_path / "adapters.safetensors"
    exported = cli("export", path, "2", "--format", "safetensors", "--out", str(out), "--model", "")
    assert exported.returncode == 0, exported.stderr
    header_len = int.from_bytes(out.read_bytes()[:8], "little")
    header = json.loads(out.read_bytes()[8:8 + header_len])
    assert sorted(k for k in header if k != "__metadata__") == ["0.lora_a", "0.lora_b", "2.lora_a", "2.lora_b"]

    # A rollback by the CLI is what the next Python restore sees.
    store.close()
    rolled = cli("rollback", path, "1", "--yes")
    assert rolled.returncode == 0, rolled.stderr
    assert trainsnap.Store.open_read_only(path).latest() == 1
