"""Compares --dump-params folders with the first: every tensor within 1e-6
absolute. Prints '<folder>: same as <first>' or the worst difference."""

import json
import os
import sys

import numpy as np


def load(folder):
    index = json.load(open(os.path.join(folder, "index.json")))
    return {name: np.load(os.path.join(folder, file)) for name, file in index.items()}


first = sys.argv[1]
reference = load(first)
for folder in sys.argv[2:]:
    other = load(folder)
    worst = max(float(np.max(np.abs(reference[n] - other[n]))) for n in reference)
    print(f"{folder}: same as {first}" if worst <= 1e-6 else f"{folder}: differs by {worst:.2e}")
