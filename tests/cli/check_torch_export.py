#!/usr/bin/env python3
"""Checks a `trainsnap export --format torch` file with Python's torch.load.

Usage: check_torch_export.py FILE EXPECTED_JSON

EXPECTED_JSON maps each tensor name to {"dtype": "torch.float16", "shape":
[...], "file": "<raw bytes file, relative to EXPECTED_JSON>"}. The file is
loaded twice, with torch.load(FILE) and torch.load(FILE, weights_only=True)
(the restricted unpickler: only tensors, storages and plain containers);
the zip must hold exactly archive/{data.pkl,version,data/0..n-1}, stored,
with valid CRCs and each entry's data aligned to 64 bytes;
each load must give a plain dict with exactly these names, each a
contiguous CPU tensor of that dtype and shape whose bytes equal the file's,
without a warning. Prints "OK <n> tensors".
"""
import json
import os
import sys
import warnings
import zipfile

import torch


def tensor_bytes(t):
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def check(loaded, expected, base, how):
    if type(loaded) is not dict:
        raise SystemExit("%s gave %s, not a dict" % (how, type(loaded).__name__))
    if sorted(loaded) != sorted(expected):
        raise SystemExit("%s: names %r, expected %r" % (how, sorted(loaded), sorted(expected)))
    for name, want in expected.items():
        t = loaded[name]
        if type(t) is not torch.Tensor:
            raise SystemExit("%s: %r is a %s" % (how, name, type(t).__name__))
        if str(t.dtype) != want["dtype"] or list(t.shape) != want["shape"]:
            raise SystemExit("%s: %r is %s %s, expected %s %s" % (how, name, t.dtype, list(t.shape),
                                                                  want["dtype"], want["shape"]))
        if not t.is_contiguous() or t.device.type != "cpu" or t.requires_grad:
            raise SystemExit("%s: %r is not a contiguous CPU tensor without grad" % (how, name))
        with open(os.path.join(base, want["file"]), "rb") as f:
            data = f.read()
        if tensor_bytes(t) != data:
            raise SystemExit("%s: %r differs from the stored bytes" % (how, name))


def check_zip(path, count):
    """Stored entries with correct CRCs, each one's data 64-byte aligned."""
    with zipfile.ZipFile(path) as z:
        bad = z.testzip()
        if bad is not None:
            raise SystemExit("zip entry %s has a bad CRC" % bad)
        names = sorted(i.filename for i in z.infolist())
        want = sorted(["archive/data.pkl", "archive/version"] + ["archive/data/%d" % i for i in range(count)])
        if names != want:
            raise SystemExit("zip entries %r, expected %r" % (names, want))
        if z.read("archive/version") != b"3\n":
            raise SystemExit("version entry is %r" % z.read("archive/version"))
        with open(path, "rb") as f:
            for info in z.infolist():
                if info.compress_type != zipfile.ZIP_STORED:
                    raise SystemExit("%s is compressed" % info.filename)
                f.seek(info.header_offset + 26)
                name_len = int.from_bytes(f.read(2), "little")
                extra_len = int.from_bytes(f.read(2), "little")
                if (info.header_offset + 30 + name_len + extra_len) % 64 != 0:
                    raise SystemExit("%s data is not 64-byte aligned" % info.filename)


def main():
    path, expected_path = sys.argv[1:3]
    with open(expected_path) as f:
        expected = json.load(f)
    base = os.path.dirname(expected_path)
    check_zip(path, len(expected))
    for how, kwargs in (("torch.load", {}), ("torch.load(weights_only=True)", {"weights_only": True})):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loaded = torch.load(path, **kwargs)
        if caught:
            raise SystemExit("%s warned: %s" % (how, "; ".join(str(w.message) for w in caught)))
        check(loaded, expected, base, how)
    print("OK %d tensors" % len(expected))


if __name__ == "__main__":
    main()
