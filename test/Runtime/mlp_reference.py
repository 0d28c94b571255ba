#!/usr/bin/python3
"""Checks --save-outputs of make_models.py's mlp784 (Gemm, Relu, Gemm)
compiled with --precision bf16, after one step, against NumPy's forward
pass in float64 with autocast's rounding points: each product's operands
and its result rounded to bf16.

usage: mlp_reference.py inputs MODEL.onnx DIR   (x.npy: 8 x 784, labels.npy,
                                                 x_eval.npy: 64 x 784, labels_eval.npy)
       mlp_reference.py check MODEL.onnx X.npy OUTPUT_DIR
       mlp_reference.py eval PARAMS_DIR X.npy LABELS.npy RUN_LOG
The check prints the output's dtype and shape, whether every value is a
bf16 value, and whether each is within one bf16 rounding (2^-8 of its
size) of the reference: the float32 sums of 784 or 32 products may round
the other way. The eval mode reads cdp-run's held-out line and compares
its accuracy (the same) and test loss (within 0.02: logits one bf16
rounding apart) with the forward pass on --dump-params' weights.
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def bf16(a):
    """float32 values rounded to the nearest bf16 (ties to even)."""
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)




def forward(w, x):
    h = np.maximum(bf16(bf16(x) @ bf16(w["w0"]).T + w["b0"]), 0)
    return bf16(bf16(h) @ bf16(w["w1"]).T + w["b1"])


def initializers(model_path):
    model = onnx.load(model_path)
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}


if sys.argv[1] == "inputs":
    # Held-out labels are the model's own predictions, so that the accuracy
    # is high and one read of 2-byte scores as float32 would show.
    model_path, out = sys.argv[2:]
    rng = np.random.default_rng(7)
    x = rng.standard_normal((72, 784)).astype(np.float32)
    np.save(os.path.join(out, "x.npy"), x[:8])
    np.save(os.path.join(out, "labels.npy"), rng.integers(0, 10, 8))
    np.save(os.path.join(out, "x_eval.npy"), x[8:])
    np.save(os.path.join(out, "labels_eval.npy"),
            forward(initializers(model_path), x[8:]).argmax(axis=1))
    sys.exit(0)


if sys.argv[1] == "eval":
    params, x_path, labels_path, log = sys.argv[2:]
    with open(os.path.join(params, "index.json")) as f:
        w = {n: np.load(os.path.join(params, file)) for n, file in json.load(f).items()}
    y, labels = forward(w, np.load(x_path)), np.load(labels_path)
    shifted = y - y.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -log_p[np.arange(len(labels)), labels].mean()
    accuracy = (y.argmax(axis=1) == labels).mean()
    line = [l for l in open(log) if "test accuracy" in l][0].split()
    got_accuracy = float(line[line.index("accuracy") + 1].rstrip(","))
    got_loss = float(line[line.index("loss") + 1])
    print("accuracy %.2f equal: %s, loss within 0.02: %s"
          % (accuracy, abs(got_accuracy - accuracy) < 1e-4, abs(got_loss - loss) <= 0.02))
    sys.exit(0)
model_path, x_path, out_dir = sys.argv[2:]
y = forward(initializers(model_path), np.load(x_path))
with open(os.path.join(out_dir, "index.json")) as f:
    saved = np.load(os.path.join(out_dir, json.load(f)["logits"]))
is_bf16 = bool(np.all(saved.view(np.uint32) & 0xFFFF == 0))
close = bool(np.all(np.abs(saved - y) <= 2.0**-8 * np.abs(y) + 1e-30))
print("logits %s %s bf16 values: %s within one bf16 rounding: %s"
      % (saved.dtype, saved.shape, is_bf16, close))
