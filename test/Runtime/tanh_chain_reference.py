#!/usr/bin/python3
"""Checks --save-outputs of a Gemm + Tanh chain (make_models.py's mlp4eq)
after one step against NumPy's forward pass with the model's initializers.

usage: tanh_chain_reference.py inputs DIR   (x.npy: 2 x 16, labels.npy)
       tanh_chain_reference.py check MODEL.onnx X.npy OUTPUT_DIR
The check prints the output's name, its largest difference and whether it is within
1e-6 (float32 products of 16 terms near 1).
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

if sys.argv[1] == "inputs":
    rng = np.random.default_rng(5)
    np.save(os.path.join(sys.argv[2], "x.npy"),
            rng.standard_normal((2, 16)).astype(np.float32))
    np.save(os.path.join(sys.argv[2], "labels.npy"), np.array([3, 11], np.int64))
    sys.exit(0)
model_path, x_path, out_dir = sys.argv[2:]
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
    saved = np.load(os.path.join(out_dir, json.load(f)[name]))
error = float(np.abs(saved - h).max())
print("%s %s within 1e-6: %s" % (name, saved.shape, error <= 1e-6))
