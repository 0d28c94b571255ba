"""Inputs of checkpoint-portable.test: mlp4eq (MODEL) at batch 2 and 4
(the same parameters: a plan of 8 devices at batch 2 takes the 16 samples
a step that 4 devices at batch 4 do), 96 samples of data, and the same data
without its first 48 rows (a fresh run that starts where a checkpoint
after 48 samples left off)."""
import sys

import numpy as np
import onnx

model, out = sys.argv[1], sys.argv[2]
for batch in (2, 4):
    m = onnx.load(model)
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = batch
    m.graph.output[0].type.tensor_type.shape.dim[0].dim_value = batch
    onnx.save(m, "%s/b%d.onnx" % (out, batch))
rng = np.random.default_rng(0)
x = rng.standard_normal((96, 16)).astype(np.float32)
y = rng.integers(0, 16, 96)
np.save(out + "/x.npy", x)
np.save(out + "/y.npy", y)
np.save(out + "/x48.npy", x[48:])
np.save(out + "/y48.npy", y[48:])
