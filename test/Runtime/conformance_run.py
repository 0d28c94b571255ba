#!/usr/bin/python3
"""Runs ONNX's conformance models through cdp and compares the outputs.

Usage: conformance_run.py BIN_DIR ONNX_NODE_TESTS_DIR REFUSALS_FILE WORK_DIR

Every model the importer accepts (all but those listed in REFUSALS_FILE) is
compiled with `cdp-compile --inference` (shape-like inputs bound with
--const-input, as the import test does), run once with `cdp-run --feed` on
its test_data_set_0 inputs, and each output compared with the expected one:
|got - want| <= ATOL + RTOL * |want|. Prints the counts; exits 1 on any
mismatch, crash or unexpected refusal.

It also counts the node tests in scope: every op in SUPPORTED (the user
guide's list), every graph input and output float32 or int64. Each of those
must have run and matched (a refusal of one is a failure too).
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

# float32 kernels against ONNX's numpy references (float64 internally for
# some ops): differences of a few ulps in values up to ~100.
ATOL = 1e-5
RTOL = 1e-4

# Outputs that cannot match by construction, with the reason.
EXCLUDED = {
    "node/test_training_dropout": "random mask from numpy's RNG (README)",
    "node/test_training_dropout_default": "random mask from numpy's RNG (README)",
    "node/test_training_dropout_default_mask": "random mask from numpy's RNG (README)",
    "node/test_training_dropout_mask": "random mask from numpy's RNG (README)",
}

# Expected outputs written with fewer digits than float32 holds.
TOLERANCE = {
    # The data lists 0.1511 for 0.15105554 (= sum / 9): four decimals.
    "node/test_averagepool_2d_ceil_last_window_starts_on_pad": (1e-4, 0.0),
}

# The ops the user guide lists as importing.
SUPPORTED = set("""Gemm MatMul Conv MaxPool AveragePool GlobalAveragePool
BatchNormalization LayerNormalization Softmax LogSoftmax Relu Gelu Erf Tanh
Sigmoid Clip HardSigmoid HardSwish Neg Pad Add Sub Mul Div Pow Sqrt Reshape
Flatten Transpose Concat Split Slice Squeeze Unsqueeze Expand Gather Cast
Shape ConstantOfShape ReduceMean ReduceSum Dropout Identity Constant
SoftmaxCrossEntropyLoss NegativeLogLikelihoodLoss""".split())
FLOAT32, INT64 = 1, 7


def in_scope(suite, op_types, model):
    """A node test of supported ops with float32/int64 inputs and outputs."""
    if suite != "node" or not op_types:
        return False
    if any(":" in op or op not in SUPPORTED for op in op_types):
        return False  # another domain (ai.onnx.preview.training), or unsupported
    values = list(model.graph.input) + list(model.graph.output)
    return all(v.type.tensor_type.elem_type in (FLOAT32, INT64) for v in values)


NOT_CONSTANT = re.compile(r"input '([^']+)' is not a constant")


def load_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def main():
    bin_dir, root, refusals_file, work = sys.argv[1:5]
    refused = set()
    for line in open(refusals_file):
        if line.strip() and not line.startswith("#"):
            refused.add(line.split("\t")[0])
    tests, op_types = [], {}
    with open(os.path.join(root, "INDEX.tsv")) as f:
        next(f)
        for line in f:
            suite, test, _, _, ops = line.split("\t")[:5]
            tests.append("%s/%s" % (suite, test))
            op_types[tests[-1]] = [op for op in ops.split(",") if op]
    compiler = os.path.join(bin_dir, "cdp-compile")
    runner = os.path.join(bin_dir, "cdp-run")
    os.makedirs(work, exist_ok=True)
    passed, excluded, problems = 0, 0, []
    scope, matched = [], set()
    for name in tests:
        if in_scope(name.split("/")[0], op_types[name],
                    onnx.load(os.path.join(root, name, "model.onnx"))):
            scope.append(name)
        if name in refused:
            continue
        if name in EXCLUDED:
            excluded += 1
            continue
        test_dir = os.path.join(root, name)
        data = os.path.join(test_dir, "test_data_set_0")
        model = onnx.load(os.path.join(test_dir, "model.onnx"))
        inits = {t.name for t in model.graph.initializer}
        inputs = [i.name for i in model.graph.input if i.name not in inits]
        outputs = [o.name for o in model.graph.output]
        plan = os.path.join(work, name.replace("/", "_") + ".cdp")
        bound = []
        for _ in range(8):
            args = [compiler, os.path.join(test_dir, "model.onnx"), "--inference",
                    "-o", plan, "--bn-running-var", "biased"]
            for b in bound:
                args += ["--const-input", "%s=%s" % (b, os.path.join(data, "input_%d.pb" % inputs.index(b)))]
            proc = subprocess.run(args, capture_output=True, text=True)
            match = NOT_CONSTANT.search(proc.stderr)
            if proc.returncode == 0 or not match or match.group(1) in bound:
                break
            bound.append(match.group(1))
        if proc.returncode != 0:
            problems.append("COMPILE %s: %s" % (name, proc.stderr.strip()))
            continue
        out_dir = os.path.join(work, name.replace("/", "_") + ".out")
        args = [runner, plan, "--save-outputs", out_dir, "--threads", "1"]
        for k, input_name in enumerate(inputs):
            if input_name not in bound:
                args += ["--feed", "%s=%s" % (input_name, os.path.join(data, "input_%d.pb" % k))]
        proc = subprocess.run(args, capture_output=True, text=True)
        if proc.returncode != 0:
            problems.append("RUN %s: %s" % (name, proc.stderr.strip()))
            continue
        index = json.load(open(os.path.join(out_dir, "index.json")))
        ok = True
        atol, rtol = TOLERANCE.get(name, (ATOL, RTOL))
        for k, output_name in enumerate(outputs):
            want = load_tensor(os.path.join(data, "output_%d.pb" % k))
            got = np.load(os.path.join(out_dir, index[output_name]))
            if got.shape != want.shape or not np.allclose(got, want, atol=atol, rtol=rtol):
                error = np.abs(got.astype(np.float64) - want).max() if got.shape == want.shape else float("nan")
                problems.append("MISMATCH %s output %s: max abs error %g" % (name, output_name, error))
                ok = False
        passed += ok
        if ok:
            matched.add(name)
    missing = [name for name in scope if name not in matched]
    for name in missing:
        problems.append("IN SCOPE %s: %s" % (name, "refused" if name in refused else "failed"))
    for p in problems:
        print(p)
    print("conformance run: %d ran and matched, %d excluded, %d problems"
          % (passed, excluded, len(problems)))
    print("node tests in scope (supported ops, float32/int64 inputs and outputs): "
          "%d of %d pass" % (len(scope) - len(missing), len(scope)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
