#!/usr/bin/python3
"""Compile time of long chains: an N-node Tanh chain behind one trained Mul
(single device), and chains of N MatMuls, each with its own trained 4 x 4
weight, under dp on 2 devices and gpipe on 2 stages (2 micro-batches);
every compile is a training plan (MSE loss). Prints seconds per compile.

Usage: bench/compile_chain.py [--tanh N ...] [--matmul N ...] [--build DIR]
Defaults: --tanh 100000, --matmul 10000 30000.
"""

import argparse
import os
import subprocess
import tempfile
import time

import onnx
from onnx import TensorProto, helper

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--tanh", type=int, nargs="*", default=[100000])
parser.add_argument("--matmul", type=int, nargs="*", default=[10000, 30000])
parser.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "build"))
args = parser.parse_args()
work = tempfile.mkdtemp(prefix="cdp-chain-")


def save(name, nodes, initializers):
    graph = helper.make_graph(nodes, name,
                              [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                              initializers)
    path = os.path.join(work, name + ".onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def tanh_chain(n):
    nodes = [helper.make_node("Mul", ["x0", "w"], ["x"])]
    nodes += [helper.make_node("Tanh", ["t%d" % i if i else "x"],
                               ["t%d" % (i + 1) if i + 1 < n else "y"]) for i in range(n)]
    return save("tanh%d" % n, nodes, [helper.make_tensor("w", TensorProto.FLOAT, [4], [0.5] * 4)])


def matmul_chain(n):
    # Near the identity, not 0/1 (which the importer would question as a mask).
    eye = [0.9 if i == j else 0.01 for i in range(4) for j in range(4)]
    nodes = [helper.make_node("MatMul", ["x0" if i == 0 else "m%d" % i, "w%d" % i],
                              ["m%d" % (i + 1) if i + 1 < n else "y"]) for i in range(n)]
    weights = [helper.make_tensor("w%d" % i, TensorProto.FLOAT, [4, 4], eye) for i in range(n)]
    return save("matmul%d" % n, nodes, weights)


def timed(path, flags):
    started = time.perf_counter()
    subprocess.run([os.path.join(args.build, "bin", "cdp-compile"), path, "--loss", "mse", "-o",
                    os.path.join(work, "chain.cdp")] + flags, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


print("%-8s %8s %-34s %9s" % ("chain", "nodes", "strategy", "seconds"))
for n in args.tanh:
    print("%-8s %8d %-34s %9.2f" % ("Tanh", n, "single", timed(tanh_chain(n), [])))
for n in args.matmul:
    path = matmul_chain(n)
    for label, flags in [("dp, 2 devices", ["--strategy", "dp", "--devices", "2"]),
                         ("gpipe, 2 stages, 2 micro-batches",
                          ["--strategy", "gpipe", "--stages", "2", "--micro-batches", "2"])]:
        print("%-8s %8d %-34s %9.2f" % ("MatMul", n, label, timed(path, flags)))
