#!/usr/bin/python3
"""Feeds for npy-types.test: the same data as float64/int32 and as
float32/int64, and three files whose headers are hostile.

Usage: make_npy.py OUT_DIR
"""
import os
import sys

import numpy as np

out = sys.argv[1]
rng = np.random.default_rng(0)
x = rng.standard_normal((4, 16)).astype(np.float32)
y = rng.integers(0, 16, 4)
np.save(os.path.join(out, "x64.npy"), x.astype(np.float64))
np.save(os.path.join(out, "x32.npy"), x)
np.save(os.path.join(out, "y32.npy"), y.astype(np.int32))
np.save(os.path.join(out, "y64.npy"), y.astype(np.int64))


def raw(name, shape_text, payload=b""):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % shape_text
    header = header.ljust(118) + "\n"
    with open(os.path.join(out, name), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + payload)


raw("word.npy", "('a', 16)")
raw("huge.npy", "(99999999999999999999, 16)")
raw("overflow.npy", "(4611686018427387904, 4611686018427387904)")
