"""Compares portable checkpoints (checkpoint.json and its .npy files) with
the first: each parameter, buffer and optimizer state by name, and each
update count. Prints, per checkpoint, "same as" the first when every value
is within 1e-6, else the largest difference and where."""
import json
import os
import sys

import numpy as np


def load(folder):
    index = json.load(open(os.path.join(folder, "checkpoint.json")))
    values = {}
    for t in index["tensors"]:
        values[t["name"]] = np.load(os.path.join(folder, t["file"]))
        values[t["name"] + " updates"] = np.array(t.get("updates", 0))
        for name, state in t.get("state", {}).items():
            values[t["name"] + "." + name] = np.load(os.path.join(folder, state["file"]))
    return values


first = load(sys.argv[1])
for other in sys.argv[2:]:
    values = load(other)
    if sorted(values) != sorted(first):
        print("%s: holds other tensors: %s" % (other, sorted(set(values) ^ set(first))))
        continue
    worst, where = max((float(np.abs(values[k].astype(np.float64) - first[k]).max()), k)
                       for k in first)
    print("%s: %s" % (other, "same as " + sys.argv[1] if worst <= 1e-6
                      else "differs by %.2e at %s" % (worst, where)))
