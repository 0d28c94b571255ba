#!/usr/bin/python3
"""Compile time of a long chain: an N-node Tanh chain behind one trained Mul,
compiled for training (MSE loss) by cdp-compile; prints the seconds.

Usage: bench/compile_chain.py [N=100000] [BUILD_DIR=build]
"""

import os
import subprocess
import sys
import tempfile
import time

import onnx
from onnx import TensorProto, helper

n = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
build = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "build")
work = tempfile.mkdtemp(prefix="cdp-chain-")
nodes = [helper.make_node("Mul", ["x0", "w"], ["x"])]
nodes += [helper.make_node("Tanh", ["t%d" % i if i else "x"], ["t%d" % (i + 1) if i + 1 < n else "y"])
          for i in range(n)]
graph = helper.make_graph(nodes, "chain",
                          [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor("w", TensorProto.FLOAT, [4], [0.5] * 4)])
path = os.path.join(work, "chain.onnx")
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
started = time.perf_counter()
subprocess.run([os.path.join(build, "bin", "cdp-compile"), path, "--loss", "mse", "-o",
                os.path.join(work, "chain.cdp")], check=True)
print(f"{n}-node chain: cdp-compile (training plan) {time.perf_counter() - started:.2f} s")
