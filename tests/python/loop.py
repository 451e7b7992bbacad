"""A small Python training loop for the binding's tests: a transformer-like
model (embedding tied to the output head, attention, dropout, a buffer),
AdamW + LambdaLR or SGD-momentum + StepLR, weighted gradient accumulation, a
DataLoader shuffled by a seeded generator with its cursor in `extra`, and
Python/NumPy randomness in the loss. Also a script (the kill/resume test runs
it in fresh interpreters):

    loop.py --config adamw --steps 24 --out final.pt [--store DIR] [--hold]

With --store it resumes from the latest snapshot and captures every
micro-step with capture_async, printing "step N" after each.
"""

import argparse
import random
import sys

import numpy as np
import torch
from torch import nn

VOCAB, WIDTH, SEQ, BATCH, SAMPLES = 32, 16, 6, 4, 40


class TinyTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.attn = nn.MultiheadAttention(WIDTH, 2, dropout=0.1, batch_first=True)
        self.norm = nn.LayerNorm(WIDTH)
        self.ff = nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(), nn.Dropout(0.2), nn.Linear(2 * WIDTH, WIDTH))
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.register_buffer("position", torch.linspace(-1, 1, SEQ).unsqueeze(-1))

    def forward(self, tokens):
        x = self.embed(tokens) + self.position
        a, _ = self.attn(x, x, x, need_weights=False)
        x = self.norm(x + a)
        return self.head(x + self.ff(x))


class DataCursor:
    """Where the shuffled DataLoader stands: epoch, batches taken, and the
    loader generator's state at the start of the epoch (replayed on resume)."""

    def __init__(self, loader, generator):
        self.loader, self.generator = loader, generator
        self.epoch, self.position = 0, 0
        self.epoch_start = generator.get_state()
        self._it = None

    def next_batch(self):
        if self._it is None:
            self.generator.set_state(self.epoch_start)
            self._it = iter(self.loader)
            for _ in range(self.position):
                next(self._it)
        try:
            batch = next(self._it)
        except StopIteration:
            self.epoch, self.position = self.epoch + 1, 0
            self.epoch_start = self.generator.get_state()
            self._it = iter(self.loader)
            batch = next(self._it)
        self.position += 1
        return batch

    def state_dict(self):
        return {"epoch": self.epoch, "position": self.position, "epoch_start": self.epoch_start.clone(),
                "generator": self.generator.get_state()}

    def load_state_dict(self, state):
        self.epoch, self.position = state["epoch"], state["position"]
        self.epoch_start = state["epoch_start"].clone()
        self.generator.set_state(state["generator"])
        self._it = None


class Run:
    """Everything one training run holds; `config` is "adamw" (AdamW +
    LambdaLR) or "sgd" (SGD with momentum + StepLR)."""

    def __init__(self, config="adamw", seed=0, window_size=4):
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed)
        self.model = TinyTransformer()
        data = torch.randint(0, VOCAB, (SAMPLES, SEQ + 1), generator=torch.Generator().manual_seed(1))  # the same data in every run
        self.generator = torch.Generator().manual_seed(seed + 2)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data), batch_size=BATCH, shuffle=True,
                                             generator=self.generator)
        self.cursor = DataCursor(loader, self.generator)
        if config == "adamw":
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=3e-3, weight_decay=0.01)
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda step: 1.0 / (1 + 0.1 * step))
        elif config == "sgd":
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
            self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=2, gamma=0.5)
        else:
            raise ValueError(config)
        import trainsnap
        self.window = trainsnap.AccumulationWindow(size=window_size)
        self.model.train()

    def state(self):
        return dict(model=self.model, optimizer=self.optimizer, scheduler=self.scheduler, accumulation=self.window,
                    extra={"data": self.cursor})

    def micro_step(self):
        (batch,) = self.cursor.next_batch()
        inputs, targets = batch[:, :-1], batch[:, 1:]
        weight = 1.0 + 0.5 * self.window.micro_step + 0.01 * random.random() + 0.01 * float(np.random.rand())
        logits = self.model(inputs)
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1)) * weight
        loss.backward()
        self.window.weight_sum += weight
        self.window.micro_step += 1
        if self.window.micro_step == self.window.size:
            with torch.no_grad():
                for p in self.model.parameters():
                    p.grad.div_(self.window.weight_sum)
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad()
            self.window.micro_step, self.window.weight_sum = 0, 0.0
        return loss.item()

    def snapshot(self):
        """Every value of the run, for bitwise comparison (fresh copies)."""
        params = {n: p.detach().clone() for n, p in self.model.named_parameters()}
        grads = {n: (p.grad.clone() if p.grad is not None else None) for n, p in self.model.named_parameters()}
        buffers = {n: b.clone() for n, b in self.model.named_buffers()}
        return {
            "params": params, "grads": grads, "buffers": buffers,
            "optimizer": _clone(self.optimizer.state_dict()),
            "scheduler": {k: v for k, v in self.scheduler.state_dict().items() if k != "lr_lambdas"},
            "window": (self.window.micro_step, self.window.size, self.window.weight_sum, self.window.scale),
            "cursor": _clone(self.cursor.state_dict()),
            "torch_rng": torch.get_rng_state(), "random": random.getstate(), "numpy": _numpy_state(),
        }


def _numpy_state():
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return (name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached)


def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    return value


def bits(t):
    """A tensor's bytes as uint8 (bitwise comparison: -0.0 != 0.0, NaN == NaN)."""
    t = t.detach().contiguous().reshape(-1)
    return t.view(torch.uint8) if t.dtype != torch.bool else t.to(torch.uint8)


def first_difference(a, b, path="state"):
    """'' when a and b are bitwise equal (tensors by bytes, dtype and shape;
    everything else by ==, types included), else where they first differ."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{path}: tensor vs {type(a).__name__}/{type(b).__name__}"
        if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(bits(a), bits(b)):
            return f"{path}: tensors differ"
        return ""
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        if list(a) != list(b):
            return f"{path}: keys {list(a)} vs {list(b)}"
        for k in a:
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return ""
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{path}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return ""
    return "" if a == b else f"{path}: {a!r} vs {b!r}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="adamw")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--store")
    parser.add_argument("--hold", action="store_true", help="after the last step, wait for EOF on stdin")
    args = parser.parse_args()
    run = Run(args.config)
    done = 0
    if args.store:
        import trainsnap
        store = trainsnap.Store(args.store, sync=False)  # SIGKILL keeps the page cache: no fsync needed
        ckpt = trainsnap.Checkpointer(store, model_state="trainable_and_buffers")
        if store.latest() is not None:
            done = ckpt.restore_latest(**run.state())
        print(f"resumed {done}", flush=True)
    while done < args.steps:
        run.micro_step()
        done += 1
        if args.store:
            ckpt.capture_async(done, **run.state())
            print(f"step {done}", flush=True)
    if args.store:
        ckpt.flush()
    if args.hold:
        sys.stdin.read()
    torch.save(run.snapshot(), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
