#!/usr/bin/python3
"""Reads what outputs.test made cdp-run write and prints facts to check."""
import json
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

work, original = sys.argv[1], sys.argv[2]
trained = onnx.load(os.path.join(work, "trained.onnx"))
onnx.checker.check_model(trained)
print("checker ok")
before = {t.name: numpy_helper.to_array(t) for t in onnx.load(original).graph.initializer}
after = {t.name: numpy_helper.to_array(t) for t in trained.graph.initializer}
params = json.load(open(os.path.join(work, "params", "index.json")))
for name in ["w", "c"]:
    dumped = np.load(os.path.join(work, "params", params[name]))
    print("%s trained and saved: %s" % (name, bool(np.array_equal(after[name], dumped)
                                                   and not np.array_equal(before[name], dumped))))
grads = json.load(open(os.path.join(work, "grads", "index.json")))
print("grads: " + ", ".join(sorted(grads)))
outputs = json.load(open(os.path.join(work, "outputs", "index.json")))
print("outputs: " + ", ".join("%s %s" % (k, np.load(os.path.join(work, "outputs", v)).shape)
                              for k, v in sorted(outputs.items())))
lines = [json.loads(l) for l in open(os.path.join(work, "metrics.jsonl"))]
print("metrics: %d lines, steps %s, loss falls: %s" % (
    len(lines), [l["step"] for l in lines], lines[-1]["loss"] < lines[0]["loss"]))
