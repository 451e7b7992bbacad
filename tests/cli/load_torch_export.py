#!/usr/bin/env python3
"""Loads a `trainsnap export --format torch` file as a PyTorch user would.

Usage: load_torch_export.py FILE MODULE OUT

torch.load(FILE) must give a plain dict of tensors (not a TorchScript
module), without a warning, and MODULE's load_state_dict(strict=True) must take it as is.
MODULE is "generator" or "discriminator", the modules of
tests/cli/checkpointer_store_test.cc written with torch.nn. Writes the
loaded module's state_dict tensors' bytes, keys in sorted order, to OUT for
a bitwise comparison, and prints "OK <n> tensors".
"""
import sys
import warnings

import torch
from torch import nn


def build(name):
    if name == "generator":
        return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))
    if name == "discriminator":
        return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
    raise SystemExit("unknown module " + name)


def main():
    path, module_name, out = sys.argv[1:4]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = torch.load(path)
    if caught:
        raise SystemExit("torch.load warned: " + "; ".join(str(w.message) for w in caught))
    if type(loaded) is not dict:
        raise SystemExit("torch.load gave %s, not a dict" % type(loaded).__name__)
    for key, value in loaded.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise SystemExit("entry %r is not str -> Tensor" % (key,))
    module = build(module_name)
    module.load_state_dict(loaded, strict=True)
    state = module.state_dict()
    with open(out, "wb") as f:
        for key in sorted(state):
            f.write(state[key].contiguous().numpy().tobytes())
    print("OK %d tensors" % len(state))


if __name__ == "__main__":
    main()
