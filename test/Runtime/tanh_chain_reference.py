#!/usr/bin/python3
"""Checks --save-outputs of a Gemm + Tanh chain (make_models.py's mlp4eq)
after one step against NumPy's forward pass with the model's initializers.

usage: tanh_chain_reference.py inputs DIR [ROWS]   (x.npy: ROWS x 16, default 2;
                                                    labels.npy)
       tanh_chain_reference.py check MODEL.onnx X.npy OUTPUT_DIR [LABELS.npy K]
The check prints the output's name, its shape, and whether its largest difference is
within 1e-6 (float32 products of 16 terms near 1). With LABELS and K it also prints
whether the saved loss is the mean over K equal slots of each slot's mean
cross-entropy (classes along the last axis), within 1e-6.
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

if sys.argv[1] == "inputs":
    rows = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    rng = np.random.default_rng(5)
    np.save(os.path.join(sys.argv[2], "x.npy"),
            rng.standard_normal((rows, 16)).astype(np.float32))
    labels = [3, 11] if rows == 2 else rng.integers(0, 16, rows)
    np.save(os.path.join(sys.argv[2], "labels.npy"), np.array(labels, np.int64))
    sys.exit(0)
model_path, x_path, out_dir = sys.argv[2:5]
model = onnx.load(model_path)
weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
h = np.load(x_path).astype(np.float64)
for node in model.graph.node:
    if node.op_type == "Gemm":
        h = h @ weights[node.input[1]].astype(np.float64) + weights[node.input[2]]
    elif node.op_type == "Tanh":
        h = np.tanh(h)
name = model.graph.output[0].name
with open(os.path.join(out_dir, "index.json")) as f:
    index = json.load(f)
saved = np.load(os.path.join(out_dir, index[name]))
error = float(np.abs(saved - h).max())
print("%s %s within 1e-6: %s" % (name, saved.shape, error <= 1e-6))
if len(sys.argv) > 5:
    labels, slots = np.load(sys.argv[5]), int(sys.argv[6])
    shifted = h - h.max(axis=-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    losses = -log_p[np.arange(len(labels)), labels]
    expected = losses.reshape(slots, -1).mean(axis=1).mean()
    loss = float(np.load(os.path.join(out_dir, index["loss"])))
    print("loss %s within 1e-6: %s" % (np.shape(loss), abs(loss - expected) <= 1e-6))
