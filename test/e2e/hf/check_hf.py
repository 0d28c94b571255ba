#!/usr/bin/python3
"""Trains the committed transformer exports in cdp and compares with PyTorch.

Usage: check_hf.py CDP_BIN_DIR WORK_DIR CASE [CASE ...] [--strategies]

Each CASE is a folder of test/e2e/hf/data (made by make_hf_data.py): the
model is compiled as the user guide says (SGD, lr 0.1, the logits' classes
on the last axis, --trainable-from the names torch trains) and trained 3
steps on its batch. For every parameter torch trains, cdp's value after the
steps must lie within 10 x max(PyTorch float32's own distance from float64,
1e-6) of PyTorch's float64 value (max over the tensor's elements); every
parameter torch trains must come back from cdp, and nothing else. With
--strategies, one step of `dp --devices 2` and of `1f1b --stages 2
--micro-batches 2` is checked the same way against PyTorch's per-sample
mean. One line per check; exits 1 on any failure.
"""

import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FACTOR = 10.0
FLOOR = 1e-6


def run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError("%s: %s" % (os.path.basename(command[0]),
                                       (result.stderr or result.stdout).strip()))
    return result


def train(bin_dir, case, work, flags, steps):
    plan = os.path.join(work, "plan.cdp")
    run([os.path.join(bin_dir, "cdp-compile"), os.path.join(case, "model.onnx"), "-o", plan,
         "--optimizer", "sgd", "--lr", "0.1", "--class-axis", "last",
         "--trainable-from", os.path.join(case, "trainable.txt")] + flags)
    dump = os.path.join(work, "params")
    feeds = []
    names = open(os.path.join(case, "inputs.txt")).read().split() + ["labels"]
    for name in names:
        feeds += ["--feed", "%s=%s" % (name, os.path.join(case, name + ".npy"))]
    run([os.path.join(bin_dir, "cdp-run"), plan, "--steps", str(steps),
         "--dump-params", dump] + feeds)
    index = json.load(open(os.path.join(dump, "index.json")))
    return {k: np.load(os.path.join(dump, v)).astype(np.float64) for k, v in index.items()}


def by_torch_name(got, case):
    """cdp's parameters under torch's first name (trainable.txt lists a tied
    parameter's names; the export keeps one of them)."""
    renamed = dict(got)
    for line in open(os.path.join(case, "trainable.txt")):
        names = line.split()
        for alias in names[1:]:
            if alias in renamed:
                renamed[names[0]] = renamed.pop(alias)
    return renamed


def compare(got, ref, value_key, error_key):
    """The worst parameter as (ratio, name); ratio <= 1 passes."""
    wanted = {k.split("/", 1)[1] for k in ref.files if k.startswith(value_key + "/")}
    missing, extra = wanted - set(got), set(got) - wanted
    if missing or extra:
        return float("inf"), "trained set differs: missing %s, extra %s" % (
            sorted(missing)[:3], sorted(extra)[:3])
    worst = (0.0, "")
    for name in wanted:
        distance = np.abs(got[name] - ref[value_key + "/" + name]).max()
        allowed = FACTOR * max(float(ref[error_key + "/" + name]), FLOOR)
        worst = max(worst, (distance / allowed, name))
    return worst


def check(bin_dir, root, case_name, strategies):
    case = os.path.join(HERE, "data", case_name)
    ref = np.load(os.path.join(case, "ref.npz"))
    runs = [("single", [], 3, "p64", "err32")]
    if strategies:
        runs += [("dp2", ["--strategy", "dp", "--devices", "2"], 1, "dp64", "dperr32"),
                 ("1f1b2", ["--strategy", "1f1b", "--stages", "2", "--micro-batches", "2"],
                  1, "dp64", "dperr32")]
    failed = False
    for label, flags, steps, value_key, error_key in runs:
        work = os.path.join(root, case_name, label)
        os.makedirs(work, exist_ok=True)
        try:
            got = by_torch_name(train(bin_dir, case, work, flags, steps), case)
            ratio, name = compare(got, ref, value_key, error_key)
        except RuntimeError as error:
            ratio, name = float("inf"), str(error)
        ok = ratio <= 1.0
        failed |= not ok
        print("%s %s %s (worst %.3g of the allowed distance: %s)" % (
            "ok  " if ok else "FAIL", case_name, label, ratio, name), flush=True)
    return not failed


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    strategies = "--strategies" in sys.argv
    bin_dir, root, cases = args[0], args[1], args[2:]
    passed = sum(check(bin_dir, root, case, strategies) for case in cases)
    print("%d of %d models match" % (passed, len(cases)))
    sys.exit(0 if passed == len(cases) else 1)


if __name__ == "__main__":
    main()
