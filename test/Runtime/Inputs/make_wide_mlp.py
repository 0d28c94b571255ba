"""An MLP whose middle weight (2304 x 2100 floats, 19.4 MB) passes the
16 MiB in which the root reads trained tensors for its outputs, and data
for it: argv[1] is the folder."""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
r = np.random.default_rng(0)
weights = {"w0": (r.standard_normal((64, 2304)) * 0.05).astype(np.float32),
           "w1": (r.standard_normal((2304, 2100)) * 0.02).astype(np.float32),
           "w2": (r.standard_normal((2100, 16)) * 0.02).astype(np.float32)}
nodes = [helper.make_node("MatMul", ["x", "w0"], ["h0"]), helper.make_node("Tanh", ["h0"], ["t0"]),
         helper.make_node("MatMul", ["t0", "w1"], ["h1"]), helper.make_node("Tanh", ["h1"], ["t1"]),
         helper.make_node("MatMul", ["t1", "w2"], ["y"])]
graph = helper.make_graph(nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
                          [numpy_helper.from_array(w, n) for n, w in weights.items()])
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), out + "/wide.onnx")
np.save(out + "/x.npy", r.standard_normal((64, 64)).astype(np.float32))
np.save(out + "/y.npy", r.integers(0, 16, 64))
