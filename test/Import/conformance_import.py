#!/usr/bin/python3
"""Imports every model of ONNX's conformance data and compares with a baseline.

Usage: conformance_import.py CDP_COMPILE ONNX_NODE_TESTS_DIR REFUSALS_FILE

Every test model is compiled with `cdp-compile --emit=mlir`. When the
importer says a shape-like graph input (Reshape's shape, ReduceMean's axes,
Dropout's ratio) must be a constant, the input is bound to the test's own
data with --const-input and the import retried, as the conformance runner of
the inference issue will do.

REFUSALS_FILE lists, one per line, `suite/test<TAB>reason`: the models cdp
refuses on purpose (element types, ranks or ops outside its scope). The test
fails when
  - a model not listed is refused (a regression), or
  - a listed model imports (the list is stale: remove the line), or
  - the importer crashes, hangs, or prints more than one error line, or
  - an imported model's result shapes differ from the expected outputs'.
It prints how many models were tried and imported.
"""

import os
import re
import subprocess
import sys

NOT_CONSTANT = re.compile(r"input '([^']+)' is not a constant")


def graph_input_names(model_path):
    import onnx
    model = onnx.load(model_path, load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


RESULT_TYPE = re.compile(r"tensor<([0-9x]*?)x?(f32|i64|i1)>")


def check_output_shapes(ir, test_dir):
    """The imported function's result types must match the shapes of the
    test's expected outputs: an independent check of the shape rules."""
    import onnx
    signature = next(l for l in ir.splitlines() if "func.func @main" in l)
    results = signature.split(") -> ", 1)[1]
    types = RESULT_TYPE.findall(results)
    data = os.path.join(test_dir, "test_data_set_0")
    expected = []
    k = 0
    while os.path.exists(os.path.join(data, "output_%d.pb" % k)):
        t = onnx.TensorProto()
        with open(os.path.join(data, "output_%d.pb" % k), "rb") as f:
            t.ParseFromString(f.read())
        expected.append(list(t.dims))
        k += 1
    got = [[int(d) for d in dims.split("x")] if dims else [] for dims, _ in types]
    if got != expected:
        return "wrong", "result shapes %s, expected %s" % (got, expected)
    return "ok", ""


def try_import(tool, test_dir):
    model = os.path.join(test_dir, "model.onnx")
    bound = {}
    for _ in range(8):
        args = [tool, model, "--emit=mlir"]
        for name, path in bound.items():
            args += ["--const-input", "%s=%s" % (name, path)]
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return "crash", "timed out"
        err = proc.stderr.strip()
        if proc.returncode == 0:
            return check_output_shapes(proc.stdout, test_dir)
        if proc.returncode != 1 or len(err.splitlines()) != 1 or "error:" not in err:
            return "crash", "exit %d: %s" % (proc.returncode, err[:300])
        match = NOT_CONSTANT.search(err)
        if not match or match.group(1) in bound:
            return "refused", err.split("model.onnx: ", 1)[-1]
        names = graph_input_names(model)
        if match.group(1) not in names:
            return "refused", err.split("model.onnx: ", 1)[-1]
        index = names.index(match.group(1))
        bound[match.group(1)] = os.path.join(test_dir, "test_data_set_0", "input_%d.pb" % index)
    return "refused", "too many inputs to bind"


def main():
    tool, root, refusals_file = sys.argv[1:4]
    expected = {}
    with open(refusals_file) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            name, _, reason = line.partition("\t")
            expected[name] = reason
    tests = []
    with open(os.path.join(root, "INDEX.tsv")) as f:
        next(f)
        for line in f:
            suite, test = line.split("\t")[:2]
            tests.append("%s/%s" % (suite, test))

    imported, refused, problems = 0, 0, []
    for name in tests:
        status, message = try_import(tool, os.path.join(root, name))
        if status == "ok":
            imported += 1
            if name in expected:
                problems.append("STALE %s imports now; remove it from %s" % (name, refusals_file))
        elif status == "refused":
            refused += 1
            if name not in expected:
                problems.append("REGRESSION %s: %s" % (name, message))
            elif expected[name] not in message:
                problems.append("CHANGED %s: refused with '%s', expected '%s'" % (name, message, expected[name]))
        elif status == "wrong":
            problems.append("WRONG %s: %s" % (name, message))
        else:
            problems.append("CRASH %s: %s" % (name, message))
    for p in problems:
        print(p)
    print("conformance import: tried %d, imported %d, refused as expected %d, problems %d"
          % (len(tests), imported, refused - sum(p.startswith(("REGRESSION", "CHANGED")) for p in problems),
             len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
