#!/usr/bin/python3
"""Reads the models save-onnx-external.test saved with external data and
prints, for each: the checker's verdict, which initializers are external,
and whether their values equal the dumped parameters and the model saved
inline."""
import json
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

work = sys.argv[1]
params = json.load(open(os.path.join(work, "params", "index.json")))
inline = {t.name: numpy_helper.to_array(t)
          for t in onnx.load(os.path.join(work, "inline.onnx")).graph.initializer}
for name in ["ext.onnx", "ext-eval.onnx"]:
    path = os.path.join(work, name)
    onnx.checker.check_model(path)
    bare = onnx.load(path, load_external_data=False)
    external = sorted(t.name for t in bare.graph.initializer
                      if t.data_location == onnx.TensorProto.EXTERNAL)
    values = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    trained = all(np.array_equal(values[n], np.load(os.path.join(work, "params", f)))
                  for n, f in params.items())
    same = values.keys() == inline.keys() and all(
        np.array_equal(values[n], inline[n]) for n in inline)
    print("%s: checker ok; external: %s; equal to the trained parameters: %s; "
          "to the inline model: %s" % (name, ", ".join(external), trained, same))
