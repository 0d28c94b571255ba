#!/usr/bin/python3
"""Tiny models whose shape arithmetic the importer folds at compile time,
each hostile in one way: int64 division INT64_MIN / -1 and additions that
overflow, a binary op with its second input left empty, Gather with no
indices, Slice with a step of 2^63 - 1; and Clip whose min is an empty
tensor (a fuzzer finding: the bound was read past its end).

Usage: make_hostile.py OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

INT64_MIN, INT64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


def const(name, values):
    return helper.make_node("Constant", [], [name],
                            value=numpy_helper.from_array(np.array(values, dtype=np.int64)))


def save(out, name, nodes):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes + [helper.make_node("Reshape", ["x", "s"], ["y"])], name, [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]),
              os.path.join(out, name + ".onnx"))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    save(out, "div_overflow", [const("a", [INT64_MIN]), const("b", [-1]),
                               helper.make_node("Div", ["a", "b"], ["s"])])
    save(out, "add_overflow", [const("a", [INT64_MAX]), const("b", [1]),
                               helper.make_node("Add", ["a", "b"], ["s"])])
    save(out, "mul_overflow", [const("a", [2**62]), const("b", [4]),
                               helper.make_node("Mul", ["a", "b"], ["s"])])
    save(out, "add_empty", [const("a", [6]), helper.make_node("Add", ["a", ""], ["s"])])
    save(out, "gather_empty", [const("d", [2, 3]), const("i", np.zeros((0,), dtype=np.int64)),
                               helper.make_node("Gather", ["d", "i"], ["s"])])
    save(out, "slice_step", [const("d", [2, 3, 1]), const("b", [0]), const("e", [3]), const("a", [0]),
                             const("p", [INT64_MAX]),
                             helper.make_node("Slice", ["d", "b", "e", "a", "p"], ["s"])])
    # Float indices (ONNX allows int32 and int64 only), one of them beyond int64.
    float_indices = helper.make_node(
        "Constant", [], ["i"], value=numpy_helper.from_array(np.array([1.0, 2.8e29], np.float32)))
    save(out, "gather_float_indices", [const("d", [2, 3]), float_indices,
                                       helper.make_node("Gather", ["d", "i"], ["s"])])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    empty = numpy_helper.from_array(np.zeros((0,), dtype=np.float32), "low")
    graph = helper.make_graph([helper.make_node("Clip", ["x", "low"], ["y"])], "clip_empty",
                              [x], [y], [empty])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]),
              os.path.join(out, "clip_empty.onnx"))


if __name__ == "__main__":
    main()
