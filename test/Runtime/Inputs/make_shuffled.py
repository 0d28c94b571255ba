"""20 samples (x, labels) and, for each of 3 epochs from --seed SEED, the
same samples in numpy.random.default_rng(SEED + e).permutation(20)'s order,
concatenated: fed in file order they are what --shuffle must feed.

Usage: make_shuffled.py DIR SEED
"""
import os
import sys

import numpy as np

out, seed = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(123)
x = rng.standard_normal((20, 16)).astype(np.float32)
y = rng.integers(0, 16, 20)
np.save(os.path.join(out, "x.npy"), x)
np.save(os.path.join(out, "y.npy"), y)
orders = [np.random.default_rng(seed + e).permutation(20) for e in range(3)]
np.save(os.path.join(out, "x_perm.npy"), np.concatenate([x[o] for o in orders]))
np.save(os.path.join(out, "y_perm.npy"), np.concatenate([y[o] for o in orders]))
