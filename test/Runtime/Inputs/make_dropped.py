"""22 samples and what --partial-batch drop feeds from them with steps of 4
rows: each epoch its first 20 samples (5 whole steps), in file order or in
numpy.random.default_rng(SEED + e).permutation(22)'s (--shuffle), for 3
epochs, concatenated so that fed in order they are the run's rows.

Usage: make_dropped.py DIR SEED
"""
import os
import sys

import numpy as np

out, seed = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(321)
x = rng.standard_normal((22, 16)).astype(np.float32)
y = rng.integers(0, 16, 22)
np.save(os.path.join(out, "x.npy"), x)
np.save(os.path.join(out, "y.npy"), y)
kept = [np.arange(20)] * 3
np.save(os.path.join(out, "x_drop.npy"), np.concatenate([x[k] for k in kept]))
np.save(os.path.join(out, "y_drop.npy"), np.concatenate([y[k] for k in kept]))
perms = [np.random.default_rng(seed + e).permutation(22)[:20] for e in range(3)]
np.save(os.path.join(out, "x_shuf.npy"), np.concatenate([x[p] for p in perms]))
np.save(os.path.join(out, "y_shuf.npy"), np.concatenate([y[p] for p in perms]))
