#!/usr/bin/python3
"""Inputs for the GPU bundle's cases: x.npy and labels.npy of a model's
input shape with enough rows for every step and micro-batch.

Usage: make_inputs.py OUT_DIR SHAPE BATCH_AXIS ROWS CLASSES SEED
(SHAPE as 8,1,28,28: one micro-batch; ROWS micro-batches are drawn.)
"""
import os
import sys

import numpy as np

out, shape_text, axis, rows, classes, seed = sys.argv[1:7]
shape = [int(s) for s in shape_text.split(",")]
axis, rows, classes = int(axis), int(rows), int(classes)
rng = np.random.default_rng(int(seed))
batch = shape[axis]
full = list(shape)
full[axis] = batch * rows
np.save(os.path.join(out, "x.npy"), rng.standard_normal(full).astype(np.float32))
np.save(os.path.join(out, "labels.npy"), rng.integers(0, classes, batch * rows).astype(np.int64))
