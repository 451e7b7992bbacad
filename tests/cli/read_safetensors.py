#!/usr/bin/env python3
"""Independent safetensors reader for the CLI's export test.

Usage: read_safetensors.py FILE EXPECTED_JSON STEP

Parses FILE per the published safetensors layout (8-byte little-endian
header length, JSON header, contiguous data without holes) using only json
and numpy, and compares every tensor bitwise with the raw bytes listed in
EXPECTED_JSON: {"name": {"dtype": "F32", "shape": [..], "file": "raw.bin"}}.
Checks __metadata__["trainsnap.step"] == STEP. Exit 0 when all match.
"""
import json
import os
import struct
import sys

import numpy as np

# numpy has no bfloat16: compare its bit patterns as uint16.
NUMPY_DTYPES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2",
    "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?",
}


def main(path, expected_path, step):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    errors = []
    if (8 + n) % 8 != 0:
        errors.append("data does not start 8-byte aligned (header length %d)" % n)
    metadata = header.pop("__metadata__", {})
    if metadata.get("trainsnap.step") != step:
        errors.append("metadata step %r != %r" % (metadata.get("trainsnap.step"), step))
    with open(expected_path) as f:
        expected = json.load(f)
    if sorted(header) != sorted(expected):
        errors.append("names differ: file %s, expected %s" % (sorted(header), sorted(expected)))
    spans = sorted(tuple(v["data_offsets"]) for v in header.values())
    position = 0
    for begin, end in spans:
        if begin != position or end < begin:
            errors.append("hole or overlap at byte %d (span %d..%d)" % (position, begin, end))
        position = end
    if position != len(data):
        errors.append("data is %d bytes, tensors cover %d" % (len(data), position))
    for name, want in expected.items():
        if name not in header:
            continue
        got = header[name]
        if got["dtype"] != want["dtype"] or got["shape"] != want["shape"]:
            errors.append("%s: dtype/shape %s %s != %s %s" % (name, got["dtype"], got["shape"],
                                                              want["dtype"], want["shape"]))
            continue
        dtype = np.dtype(NUMPY_DTYPES[got["dtype"]])
        begin, end = got["data_offsets"]
        if begin % dtype.itemsize != 0:
            errors.append("%s: offset %d not aligned to %d" % (name, begin, dtype.itemsize))
        count = int(np.prod(got["shape"], dtype=np.int64)) if got["shape"] else 1
        if end - begin != count * dtype.itemsize:
            errors.append("%s: %d bytes for %d elements" % (name, end - begin, count))
            continue
        array = np.frombuffer(data[begin:end], dtype=dtype).reshape(got["shape"])
        raw = os.path.join(os.path.dirname(expected_path), want["file"])
        reference = np.fromfile(raw, dtype=dtype).reshape(want["shape"])
        if array.tobytes() != reference.tobytes():  # raw bytes: a bitwise comparison
            errors.append("%s: values differ" % name)
    for e in errors:
        print(e)
    if errors:
        return 1
    print("OK %d tensors" % len(expected))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3]))
