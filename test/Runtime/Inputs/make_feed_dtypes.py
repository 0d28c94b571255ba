"""Feeds of every .npy element type cdp converts, each beside the float32 or
int64 file it must train exactly like: image bytes (uint8) beside
(bytes * (1/255) - 0.5) computed in float64 and rounded to float32 once, as
cdp does; float16 beside its float32 widening; labels as uint8, int8,
int16, uint16, uint32 and int32 beside int64. And the refusals: float
labels, labels beyond int64, big-endian data.

Usage: make_feed_dtypes.py DIR
"""
import os
import sys

import numpy as np

out = sys.argv[1]
rng = np.random.default_rng(0)
pixels = rng.integers(0, 256, (24, 16)).astype(np.uint8)
np.save(os.path.join(out, "x_u8.npy"), pixels)
np.save(os.path.join(out, "x_u8_as_f32.npy"),
        (pixels.astype(np.float64) * (1 / 255) + -0.5).astype(np.float32))
half = rng.standard_normal((24, 16)).astype(np.float16)
# The corners of the format: subnormals, the largest, the smallest normal, -0.
half[0, :7] = np.array([6e-8, 1e-7, 3e-5, 6.104e-5, 65504, -65504, -0.0], np.float16)
np.save(os.path.join(out, "x_f16.npy"), half)
np.save(os.path.join(out, "x_f16_as_f32.npy"), half.astype(np.float32))
labels = rng.integers(0, 16, 24)
np.save(os.path.join(out, "y_i64.npy"), labels.astype(np.int64))
for dtype in ["uint8", "int8", "int16", "uint16", "uint32", "int32"]:
    np.save(os.path.join(out, "y_%s.npy" % dtype), labels.astype(dtype))
np.save(os.path.join(out, "y_f32.npy"), labels.astype(np.float32))
np.save(os.path.join(out, "y_u64_huge.npy"), np.full(24, 2**63, dtype=np.uint64))
np.save(os.path.join(out, "x_big_endian.npy"), pixels.astype(">f4"))
