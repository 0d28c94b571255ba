#!/usr/bin/python3
"""Prints where a model's initializers went: each found whole in the
plan's weights file at a 64-byte aligned offset, and none in the plan
itself (neither as a tensor's value nor in the embedded source model).

Usage: plan_weights_size.py MODEL.onnx PLAN.cdp
"""
import sys

import onnx
from onnx import numpy_helper


def aligned_find(data, value):
    at = data.find(value)
    while at >= 0 and at % 64:
        at = data.find(value, at + 1)
    return at


def main():
    model = onnx.load(sys.argv[1])
    plan = open(sys.argv[2], "rb").read()
    weights = open(sys.argv[2] + ".weights", "rb").read()
    values = [numpy_helper.to_array(t).tobytes() for t in model.graph.initializer]
    print("%d initializers: in the weights file %d, in the plan %d" % (
        len(values), sum(aligned_find(weights, v) >= 0 for v in values),
        sum(v in plan for v in values)))


if __name__ == "__main__":
    main()
