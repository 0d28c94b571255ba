#!/usr/bin/python3
"""Writes a tiny IDX data set into OUT_DIR: 160 training and 40 test images
of 28x28 whose class k is a bright square at one of 10 positions, images
gzipped and labels plain (the reader takes both)."""
import gzip
import os
import struct
import sys

import numpy as np

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(0)


def make(count):
    labels = rng.integers(0, 10, count).astype(np.uint8)
    images = rng.integers(0, 40, (count, 28, 28)).astype(np.uint8)
    for i, k in enumerate(labels):
        r, c = divmod(int(k), 5)
        images[i, 4 + r * 12:10 + r * 12, 1 + c * 5:6 + c * 5] = 255
    return images, labels


for prefix, count in [("train", 160), ("t10k", 40)]:
    images, labels = make(count)
    with gzip.open(os.path.join(out, prefix + "-images-idx3-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, count, 28, 28) + images.tobytes())
    with open(os.path.join(out, prefix + "-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, count) + labels.tobytes())
