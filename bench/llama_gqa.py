#!/usr/bin/env python3
"""Grouped-query attention at real width: a Llama-3-shaped model's training
plan, its memory traffic, instructions and arena, float32 and bf16.

Usage: bench/llama_gqa.py [--build build] [--before OTHER_BUILD]
                          [--work bench/out/llama-gqa]

Runs in bench/.venv-export (made on first use by
test/e2e/hf/make_hf_data.py's rules). A Llama config from transformers
with Llama 3's proportions at half its width and 2 layers (hidden 2048,
16 heads of 128, 4 key/value heads: a group of 4, MLP 7168, vocabulary
32000: 240M parameters), random init (seed 0), sequence 1024, batch 1,
exported by TorchScript at opset 17 in training mode. Each layer of the
full model is one of these.

Prints, per precision, for each build (--before: another build directory,
say one of an earlier commit, compiled on the same export): the plan's
instructions, transposes and expands (the heads' moves and transformers'
repeat_kv copies), the arena and the bytes the step's instructions move
(bench/plan_traffic.py's count), single device.

Not a test: it needs PyPI, ~2 GB of disk and minutes; docs/results.md
carries its figures.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "test", "e2e", "hf"))
sys.path.insert(0, HERE)
import llama_1b  # noqa: E402  (the export)
import make_hf_data  # noqa: E402  (the venv)
import plan_traffic  # noqa: E402

# Llama 3's proportions at half its width, 2 layers.
CONFIG = dict(hidden_size=2048, intermediate_size=7168, num_hidden_layers=2,
              num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
              max_position_embeddings=1024)


def export(work):
    path = os.path.join(work, "model.onnx")
    if not os.path.exists(path):
        os.makedirs(work, exist_ok=True)
        llama_1b.export_llama(work, CONFIG, 1024, path)
    return path


def figures(build, model, work, precision, tag):
    """One plan's figures: instructions, transposes, expands, arena, GB moved."""
    plan = os.path.join(work, "%s-%s.cdp" % (tag, precision))
    report = plan + ".json"
    subprocess.run([os.path.join(build, "bin", "cdp-compile"), model, "-o", plan,
                    "--optimizer", "sgd", "--lr", "0.01", "--class-axis", "last",
                    "--trainable-from", os.path.join(work, "trainable.txt"),
                    "--precision", precision, "--report", report],
                   check=True, stdout=subprocess.DEVNULL)
    traffic, count, _, inside = plan_traffic.per_op(plan, 0)
    arena = json.load(open(report))["arena_bytes"][0]
    return (sum(count.values()), count["transpose"], count["expand"], arena / 1e9,
            sum(traffic.values()) / 1e9, inside / 1e9)


def main():
    make_hf_data.ensure_venv()
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--before", help="another build directory to compare with")
    parser.add_argument("--work", default=os.path.join(HERE, "out", "llama-gqa"))
    args = parser.parse_args()
    model = export(args.work)
    builds = [("before", args.before)] if args.before else []
    builds.append(("this", args.build))
    print("%-9s %-7s %12s %10s %8s %9s %9s %12s" % (
        "precision", "build", "instructions", "transposes", "expands", "arena GB",
        "moved GB", "attention GB"))
    for precision in ("fp32", "bf16"):
        for tag, build in builds:
            print("%-9s %-7s %12d %10d %8d %9.3f %9.2f %12.2f" % (
                (precision, tag) + figures(build, model, args.work, precision, tag)),
                flush=True)


if __name__ == "__main__":
    main()
