#!/usr/bin/python3
"""--recompute changes no result bit: every strategy, on the e2e models,
trained with and without it from the same data; the parameters after the
steps must be byte-identical. Also prints what the report predicts: the
largest device's peak bytes and the activation bytes at the peak, without
and with recompute, and the pipelines' predicted step time.

Usage: recompute_compare.py BIN_DIR WORK_DIR MODEL... [--steps T]
       [--modes stage,layer,selective]
A MODEL is an e2e model (export_torch_models.py) or hf:CASE, a committed
Hugging Face export of test/e2e/hf/data trained on its own batch as the
user guide trains it (single and 1f1b on 2 stages only).
One line per (model, strategy, mode): SAME or DIFFER, then the figures,
and LARGER where the largest device peak grew.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_torch_models as models  # noqa: E402
from memory_reuse_compare import run  # noqa: E402

STRATEGIES = [
    ["--strategy", "single"],
    ["--strategy", "single", "--micro-batches", "2"],
    ["--strategy", "single", "--memory-reuse", "layer"],
    ["--strategy", "dp", "--devices", "4", "--optimizer", "momentum"],
    ["--strategy", "dp", "--devices", "4", "--zero", "3"],
    ["--strategy", "cdp", "--devices", "4", "--stages", "2"],
    ["--strategy", "cdp", "--devices", "4", "--stages", "2", "--zero", "3", "--cdp-rule", "v1"],
    ["--strategy", "laysa", "--devices", "4", "--density", "0.05"],
    ["--strategy", "gpipe", "--devices", "2", "--stages", "2"],
    ["--strategy", "1f1b", "--devices", "4", "--stages", "2", "--replicas", "2"],
    ["--strategy", "1f1b", "--devices", "2", "--stages", "2", "--memory-reuse", "layer"],
    ["--strategy", "2bw", "--devices", "2", "--stages", "2"],
    ["--strategy", "zb-h1", "--devices", "2", "--stages", "2"],
    ["--strategy", "zb-v", "--devices", "2", "--stages", "4"],
    ["--strategy", "interleaved-1f1b", "--devices", "2", "--stages", "4"],
    ["--strategy", "cdp-mp", "--stages", "2", "--micro-batches", "4"],
    ["--strategy", "2bw", "--stages", "2", "--replicas", "2", "--micro-batches", "2"],
]


def predicted(report_path):
    """The largest device peak, the activation bytes at the peak (all
    devices) and the pipelines' step time (ms, or None)."""
    report = json.load(open(report_path))
    peak = report["peak"]
    return max(peak["device_bytes"]), peak["activation_bytes"], report.get("predicted_step_ms")


def same_dumps(a, b):
    names = sorted(os.listdir(a))
    return names == sorted(os.listdir(b)) and all(
        open(os.path.join(a, f), "rb").read() == open(os.path.join(b, f), "rb").read()
        for f in names)


def train(bin_dir, work, path, flags, feeds, steps, tag):
    plan = os.path.join(work, tag + ".cdp")
    report = os.path.join(work, tag + ".json")
    dump = os.path.join(work, tag + "_params")
    run([os.path.join(bin_dir, "cdp-compile"), path, *flags, "-o", plan, "--report", report])
    run([os.path.join(bin_dir, "cdp-run"), plan, *feeds, "--steps", str(steps),
         "--dump-params", dump])
    return dump, predicted(report)


HF_STRATEGIES = [
    ["--strategy", "single"],
    ["--strategy", "1f1b", "--stages", "2", "--micro-batches", "2"],
]


def hf_case(name):
    """A committed Hugging Face export: its model, flags and feeds."""
    case = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf", "data", name)
    flags = ["--optimizer", "sgd", "--lr", "0.1", "--class-axis", "last",
             "--trainable-from", os.path.join(case, "trainable.txt")]
    feeds = []
    for feed in open(os.path.join(case, "inputs.txt")).read().split() + ["labels"]:
        feeds += ["--feed", "%s=%s" % (feed, os.path.join(case, feed + ".npy"))]
    return os.path.join(case, "model.onnx"), flags, feeds


def e2e_model(name, work, steps, rng):
    """An e2e model exported here, with random data for `steps` steps."""
    path = models.export(name, work)
    _, example, _ = models.build(name)
    axis = 1 if name == "transformer" else 0
    shape = list(example.shape)
    shape[axis] *= 4 * steps
    x, y = os.path.join(work, name + "_x.npy"), os.path.join(work, name + "_y.npy")
    np.save(x, rng.randn(*shape).astype(np.float32))
    np.save(y, rng.randint(0, 10, size=shape[axis]).astype(np.int64))
    feeds = ["--feed", "input=" + x, "--feed", "labels=" + y]
    return path, ["--batch-axis", "input=1"] if name == "transformer" else [], feeds


def main():
    args = sys.argv[1:]
    options = {"--steps": "3", "--modes": "stage,layer,selective"}
    for flag in options:
        if flag in args:
            i = args.index(flag)
            options[flag] = args[i + 1]
            del args[i:i + 2]
    steps, modes = int(options["--steps"]), options["--modes"].split(",")
    bin_dir, work, names = args[0], args[1], args[2:]
    os.makedirs(work, exist_ok=True)
    rng = np.random.RandomState(0)
    for name in names:
        if name.startswith("hf:"):
            path, base, feeds = hf_case(name[3:])
            strategies = HF_STRATEGIES
        else:
            path, base, feeds = e2e_model(name, work, steps, rng)
            strategies = STRATEGIES
        for strategy in strategies:
            flags = base + strategy
            plain, before = train(bin_dir, work, path, flags, feeds, steps, "plain")
            for mode in modes:
                dump, after = train(bin_dir, work, path, flags + ["--recompute", mode], feeds,
                                    steps, mode)
                step = "" if before[2] is None else "  step ms %.4f -> %.4f" % (before[2], after[2])
                if after[0] > before[0]:
                    step += "  LARGER"
                print("%s %-11s %-9s %-58s peak %8d -> %8d  activations %8d -> %8d%s" % (
                    "SAME" if same_dumps(plain, dump) else "DIFFER", name, mode,
                    " ".join(strategy), before[0], after[0], before[1], after[1], step))


if __name__ == "__main__":
    main()
