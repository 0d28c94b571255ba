#!/usr/bin/python3
"""Edits portable checkpoints at random and resumes other plans from each.

A portable checkpoint (cdp-run --portable-checkpoint) is a folder of .npy
files and checkpoint.json, meant to be read and written by people and
scripts. This script writes one after 3 steps of dp on 4 devices (SGD with
momentum, the small MLP of the suite), then COUNT copies with one to three
random edits each: a field of checkpoint.json (any, at any depth) given
another type, a negative, huge or path-like value, or removed; or a .npy
file truncated, emptied, given another dtype or shape, or removed. Each copy
is resumed by dp on 4 devices, dp --zero 3 on 8 and 1f1b on 2 stages under
a time limit. Every resume must either complete (exit 0) or be refused in one
line (`cdp-run: error: ...`, exit 1); anything else is a finding, kept with
its checkpoint, its edits and its output under OUT/findings.

Usage: scripts/mutate-portable-checkpoints.py OUT [--count N] [--timeout S]
                                              [--seed S] [--build DIR]
                                              [--jobs J]
"""
import concurrent.futures
import json
import os
import random
import shutil
import subprocess
import sys

import numpy as np

import hostile_runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PLANS = {
    "dp4": ("b4", ["--strategy", "dp", "--devices", "4"]),
    "zero8": ("b2", ["--strategy", "dp", "--devices", "8", "--stages", "2", "--zero", "3"]),
    "1f1b": ("b4", ["--strategy", "1f1b", "--stages", "2", "--micro-batches", "4"]),
}

VALUES = [None, -1, 0, 2**62, -2**62, "x", "", [], {}, 1.5, True, "../x.npy", "a/b.npy",
          ".npy", "w0.npy", [2**40, 2**40], [-1], 3]


def prepare(out, build):
    """Models, data, plans and the checkpoint every copy starts from."""
    python = "/usr/bin/python3"
    subprocess.run([python, os.path.join(ROOT, "test", "Import", "make_models.py"), "mlp4eq",
                    os.path.join(out, "model.onnx")], check=True)
    subprocess.run([python, os.path.join(ROOT, "test", "Runtime", "Inputs", "portable_inputs.py"),
                    os.path.join(out, "model.onnx"), out], check=True)
    compile_tool = os.path.join(build, "bin", "cdp-compile")
    for name, (model, flags) in PLANS.items():
        subprocess.run([compile_tool, model + ".onnx", "--optimizer", "momentum", "-o",
                        name + ".cdp"] + flags, check=True, cwd=out, stdout=subprocess.DEVNULL)
    subprocess.run([os.path.join(build, "bin", "cdp-run"), "dp4.cdp", "--feed", "x=x.npy",
                    "--feed", "labels=y.npy", "--steps", "3", "--portable-checkpoint", "base"],
                   check=True, cwd=out, stdout=subprocess.DEVNULL)


def json_paths(value, prefix=()):
    """Every place in a JSON value: key and index paths."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from json_paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from json_paths(item, prefix + (index,))
    if prefix:
        yield prefix


def edit_index(index, rng):
    path = rng.choice(list(json_paths(index)))
    parent = index
    for key in path[:-1]:
        parent = parent[key]
    if isinstance(parent, dict) and rng.random() < 0.2:
        del parent[path[-1]]
        return "removed %s" % (path,)
    parent[path[-1]] = rng.choice(VALUES)
    return "%s = %r" % (path, parent[path[-1]])


def edit_array(folder, rng):
    name = rng.choice(sorted(f for f in os.listdir(folder) if f.endswith(".npy")))
    path = os.path.join(folder, name)
    kind = rng.choice(["truncate", "empty", "dtype", "shape", "remove"])
    try:
        np.load(path)
    except ValueError:  # an earlier edit broke it already
        kind = "remove"
    if kind == "truncate":
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.truncate(rng.randrange(size))
    elif kind == "empty":
        open(path, "wb").close()
    elif kind == "dtype":
        np.save(path, np.load(path).astype(rng.choice([np.float64, np.int32, np.float16])))
    elif kind == "shape":
        np.save(path, np.load(path).reshape(-1)[: rng.randrange(1, 300)])
    else:
        os.remove(path)
    return "%s %s" % (kind, name)


def make_copy(out, number, rng):
    folder = os.path.join(out, "copy-%d" % number)
    shutil.copytree(os.path.join(out, "base"), folder)
    index = json.load(open(os.path.join(folder, "checkpoint.json")))
    edits = []
    for _ in range(rng.randint(1, 3)):
        edits.append(edit_index(index, rng) if rng.random() < 0.6 else edit_array(folder, rng))
    with open(os.path.join(folder, "checkpoint.json"), "w") as f:
        json.dump(index, f)
    return folder, edits


def resume(out, build, folder, timeout):
    kinds = []
    for plan in PLANS:
        command = [os.path.join(build, "bin", "cdp-run"), plan + ".cdp", "--feed", "x=x.npy",
                   "--feed", "labels=y.npy", "--steps", "6", "--resume", folder]
        kind, err = hostile_runs.outcome(command, timeout, cwd=out)
        kinds.append((plan, kind, err))
    return kinds


def main():
    args = hostile_runs.arguments().parse_args()
    out = os.path.abspath(args.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    prepare(out, os.path.abspath(args.build))
    rng = random.Random(args.seed)
    copies = [make_copy(out, n, rng) for n in range(args.count)]
    counts = {"ok": 0, "refused": 0, "crashed": 0, "hung": 0}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = pool.map(lambda c: resume(out, os.path.abspath(args.build), c[0], args.timeout),
                           copies)
        for (folder, edits), kinds in zip(copies, results):
            for plan, kind, err in kinds:
                counts[kind] += 1
                if kind in ("crashed", "hung"):
                    finding = os.path.join(out, "findings", os.path.basename(folder) + "-" + plan)
                    shutil.copytree(folder, finding)
                    with open(finding + "/what.txt", "w") as f:
                        f.write("%s\n%s\n%s\n" % (plan, "\n".join(edits), err))
                    print("finding: %s %s: %s" % (plan, "; ".join(edits), err.strip()[-200:]))
    print("mutate-portable-checkpoints: %d edited checkpoints, %d resumes: %d ran, %d refused "
          "in one line, %d crashed, %d hung" % (args.count, 3 * args.count, counts["ok"],
                                                counts["refused"], counts["crashed"],
                                                counts["hung"]))
    return 1 if counts["crashed"] or counts["hung"] else 0


if __name__ == "__main__":
    sys.exit(main())
