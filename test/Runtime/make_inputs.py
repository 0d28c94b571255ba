#!/usr/bin/python3
"""Writes the .npy inputs of the cdp-run tests into OUT_DIR.

For the `gemm` model of test/Import/make_models.py: input `a` (4, 8) float32,
16 classes; `a12` (12 rows) goes with `labels12`.
"""
import os
import sys

import numpy as np

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(0)
a = rng.standard_normal((4, 8)).astype(np.float32)
np.save(os.path.join(out, "a.npy"), a)
np.save(os.path.join(out, "a12.npy"), rng.standard_normal((12, 8)).astype(np.float32))
np.save(os.path.join(out, "labels.npy"), np.array([0, 3, 15, 7], np.int64))
np.save(os.path.join(out, "labels_bad.npy"), np.array([0, 3, 16, 7], np.int64))
# a12's labels: the 4 above repeated, the pairing feeds of different lengths
# once got by wrapping each modulo its own length (now refused).
np.save(os.path.join(out, "labels12.npy"), np.tile(np.array([0, 3, 15, 7], np.int64), 3))
nan = a.copy()
nan[1, 2] = np.nan
np.save(os.path.join(out, "a_nan.npy"), nan)
np.save(os.path.join(out, "a_int.npy"), a.astype(np.int64))
np.save(os.path.join(out, "a_shape.npy"), rng.standard_normal((4, 9)).astype(np.float32))
