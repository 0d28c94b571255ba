#!/usr/bin/python3
"""--memory-reuse layer changes no result bit: every strategy, on the e2e
models, trained with and without it from the same data; the parameters
after the steps must be byte-identical, and the arena no larger.

Usage: memory_reuse_compare.py BIN_DIR WORK_DIR MODEL... [--steps T]
Prints one line per (model, strategy): SAME or DIFFER, and the largest
device arena without and with the reuse.
"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_torch_models as models  # noqa: E402

STRATEGIES = [
    ["--strategy", "single"],
    ["--strategy", "single", "--micro-batches", "2"],
    ["--strategy", "dp", "--devices", "4", "--optimizer", "momentum", "--weight-decay", "0.01"],
    ["--strategy", "dp", "--devices", "4", "--zero", "2"],
    ["--strategy", "cdp", "--devices", "4"],
    ["--strategy", "laysa", "--devices", "4", "--density", "0.05", "--optimizer", "momentum"],
    ["--strategy", "laysa", "--devices", "4", "--density", "0.05", "--sparse-baseline", "residual"],
    ["--strategy", "gpipe", "--devices", "2", "--stages", "2"],
    ["--strategy", "1f1b", "--devices", "2", "--stages", "2"],
    ["--strategy", "2bw", "--devices", "2", "--stages", "2"],
    ["--strategy", "zb-h1", "--devices", "2", "--stages", "2"],
]


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit("failed: %s\n%s" % (" ".join(cmd), result.stderr.strip()))
    return result.stdout


def arenas(bin_dir, path, flags):
    text = run([os.path.join(bin_dir, "cdp-compile"), path, *flags, "--emit=plan-text",
                "-o", "-"])
    return max(int(line.split("arena=")[1].split()[0])
               for line in text.splitlines() if line.startswith("device "))


def main():
    args = sys.argv[1:]
    steps = 3
    if "--steps" in args:
        i = args.index("--steps")
        steps = int(args[i + 1])
        del args[i:i + 2]
    bin_dir, work, names = args[0], args[1], args[2:]
    os.makedirs(work, exist_ok=True)
    rng = np.random.RandomState(0)
    for name in names:
        path = models.export(name, work)
        _, example, _ = models.build(name)
        axis = 1 if name == "transformer" else 0
        shape = list(example.shape)
        shape[axis] *= 4 * steps
        x = os.path.join(work, name + "_x.npy")
        y = os.path.join(work, name + "_y.npy")
        np.save(x, rng.randn(*shape).astype(np.float32))
        np.save(y, rng.randint(0, 10, size=shape[axis]).astype(np.int64))
        base = ["--batch-axis", "input=1"] if name == "transformer" else []
        for strategy in STRATEGIES:
            flags = base + strategy
            dumps = []
            for reuse in ([], ["--memory-reuse", "layer"]):
                tag = "reuse" if reuse else "plain"
                plan = os.path.join(work, "%s_%s.cdp" % (name, tag))
                dump = os.path.join(work, "%s_%s_params" % (name, tag))
                run([os.path.join(bin_dir, "cdp-compile"), path, *flags, *reuse, "-o", plan])
                run([os.path.join(bin_dir, "cdp-run"), plan, "--feed", "input=" + x,
                     "--feed", "labels=" + y, "--steps", str(steps), "--dump-params", dump])
                dumps.append(dump)
            same = all(open(os.path.join(dumps[0], f), "rb").read() ==
                       open(os.path.join(dumps[1], f), "rb").read()
                       for f in sorted(os.listdir(dumps[0])))
            same = same and sorted(os.listdir(dumps[0])) == sorted(os.listdir(dumps[1]))
            before = arenas(bin_dir, path, flags)
            after = arenas(bin_dir, path, flags + ["--memory-reuse", "layer"])
            print("%s %-12s %-60s arena %8d -> %8d%s" % (
                "SAME" if same else "DIFFER", name, " ".join(strategy), before, after,
                "" if after <= before else "  LARGER"))


if __name__ == "__main__":
    main()
