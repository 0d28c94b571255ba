#!/usr/bin/env python3
"""Compares two --dump-params folders: every float32 tensor of the first
within TOL (absolute + relative) of the second's. Pure Python (no numpy), so
that it runs on a GPU machine's bare python3.

Usage: compare_params.py REFERENCE RESULT [TOL]
Prints 'same within TOL (worst D at NAME)' and exits 0, or the worst
difference and exits 1.
"""
import ast
import json
import os
import struct
import sys


def read_npy(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        raise ValueError(f"{path}: not a .npy file")
    major = data[6]
    size_bytes = 2 if major == 1 else 4
    header_len = int.from_bytes(data[8:8 + size_bytes], "little")
    start = 8 + size_bytes
    header = ast.literal_eval(data[start:start + header_len].decode("latin1"))
    body = data[start + header_len:]
    kind = header["descr"]
    count = 1
    for d in header["shape"]:
        count *= d
    formats = {"<f4": "f", "<i8": "q", "|b1": "?", "|u1": "B"}
    if kind not in formats:
        raise ValueError(f"{path}: dtype {kind} not handled")
    return struct.unpack("<%d%s" % (count, formats[kind]), body[:count * struct.calcsize(formats[kind])])


def load(folder):
    index = json.load(open(os.path.join(folder, "index.json")))
    return {name: read_npy(os.path.join(folder, file)) for name, file in index.items()}


def main():
    reference, result = load(sys.argv[1]), load(sys.argv[2])
    tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-4
    worst, where, failing = 0.0, "-", None
    for name, values in reference.items():
        if name not in result:
            print(f"missing tensor {name}")
            return 1
        other = result[name]
        if len(other) != len(values):
            print(f"{name}: {len(other)} elements, expected {len(values)}")
            return 1
        for a, b in zip(values, other):
            difference = abs(float(a) - float(b))
            if difference != difference:  # NaN
                difference = float("inf")
            if difference > worst:
                worst, where = difference, name
            if difference > tol + tol * abs(float(a)) and failing is None:
                failing = (name, float(a), float(b))
    if failing is None:
        print(f"within {tol} abs + rel (largest difference {worst:.2e} at {where})")
        return 0
    name, a, b = failing
    print(f"differs at {name}: {b!r} against {a!r} (largest difference {worst:.2e} at {where})")
    return 1


sys.exit(main())
