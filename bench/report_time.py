#!/usr/bin/python3
"""How long `cdp-compile --report` takes to predict a plan for many devices
(the aim: well under a second).

Usage: bench/report_time.py [--build build]
Exports the transformer block, then times `cdp-compile --strategy cdp
--devices N --stages 4 --report` for N = 4 .. 1024 (best of 3 runs); then a
48-layer transformer: cdp on 16 to 1024 devices (seconds and peak memory),
gpipe, 1f1b and 2bw on 64 stages and devices, and the 2bw plan's size
(templates, runs, tensors; format 4).

With --every-strategy it prints instead, for the 48-layer transformer, one
`--report --steps 3` per strategy at the largest device count up to 1024 it
accepts (48 stages; pipelines 48 stages x 21 replicas = 1008 devices), one
run each: seconds, peak MB and the report's and plan's bytes.
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "e2e"))
import export_torch_models as models  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--build", default="build")
parser.add_argument("--every-strategy", action="store_true")
args = parser.parse_args()
if not args.every_strategy:  # the transformer block, cdp on 4 to 1024 devices
    with tempfile.TemporaryDirectory() as work:
        path = models.export("transformer", work)
        print("%8s %10s %14s" % ("devices", "seconds", "report bytes"))
        for n in [4, 64, 256, 1024]:
            best = None
            for _ in range(3):
                start = time.perf_counter()
                subprocess.run([os.path.join(args.build, "bin", "cdp-compile"), path, "--batch-axis",
                                "input=1", "--strategy", "cdp", "--devices", str(n), "--stages", "4",
                                "--report", os.path.join(work, "r.json"), "--steps", "3"], check=True)
                elapsed = time.perf_counter() - start
                best = elapsed if best is None else min(best, elapsed)
            print("%8d %10.3f %14d" % (n, best, os.path.getsize(os.path.join(work, "r.json"))))


# Pipelines: a 48-layer transformer encoder (the block of the test models,
# 48 times) cut into 64 stages on 64 devices, 64 micro-batches per step.
import torch  # noqa: E402


class Deep(torch.nn.Module):
    def __init__(self, layers=48):
        super().__init__()
        block = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0)
        self.layers = torch.nn.TransformerEncoder(block, layers)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.layers(x).mean(dim=0))


# Spawns the command from a small Python and reports its time and peak
# memory: a child's ru_maxrss starts from its parent's size at the fork,
# which for this script (torch loaded) would exceed cdp-compile's own.
MEASURE = """
import os, subprocess, sys, time
start = time.perf_counter()
child = subprocess.Popen(sys.argv[1:])
_, status, usage = os.wait4(child.pid, 0)
print(time.perf_counter() - start, usage.ru_maxrss / 1024, status)
"""


def timed(arguments):
    """Best of 3 runs of cdp-compile: seconds, and the most MB one used."""
    best, peak = None, 0
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", MEASURE,
                              os.path.join(args.build, "bin", "cdp-compile")] + arguments,
                             check=True, capture_output=True, text=True).stdout.split()
        elapsed, megabytes, status = float(out[0]), float(out[1]), int(out[2])
        if status != 0:
            sys.exit("cdp-compile failed")
        best = elapsed if best is None else min(best, elapsed)
        peak = max(peak, megabytes)
    return best, peak


EVERY = [
    ("dp", ["--devices", "1024"]),
    ("cdp", ["--devices", "1024", "--stages", "48"]),
    ("laysa", ["--devices", "1024"]),
    ("gpipe", ["--stages", "48", "--replicas", "21", "--micro-batches", "48"]),
    ("1f1b", ["--stages", "48", "--replicas", "21", "--micro-batches", "48"]),
    ("2bw", ["--stages", "48", "--replicas", "21", "--micro-batches", "48"]),
    ("zb-h1", ["--stages", "48", "--replicas", "21", "--micro-batches", "48"]),
]


def every_strategy(path, work):
    """One --report per strategy at its largest device count up to 1024."""
    print("48-layer transformer, --report --steps 3, one run each:")
    print("%8s %50s %9s %9s %14s %12s" % ("strategy", "layout", "seconds", "peak MB",
                                        "report bytes", "plan bytes"))
    for strategy, flags in EVERY:
        report, plan = os.path.join(work, "r.json"), os.path.join(work, "p.cdp")
        out = subprocess.run([sys.executable, "-c", MEASURE,
                              os.path.join(args.build, "bin", "cdp-compile"), path,
                              "--batch-axis", "input=1", "--strategy", strategy, "--report",
                              report, "--steps", "3", "-o", plan] + flags,
                             check=True, capture_output=True,
                             text=True).stdout.splitlines()[-1].split()
        print("%8s %50s %9.2f %9.0f %14d %12d" % (strategy, " ".join(flags), float(out[0]),
                                                  float(out[1]), os.path.getsize(report),
                                                  os.path.getsize(plan)))


with tempfile.TemporaryDirectory() as work:
    torch.manual_seed(0)
    path = os.path.join(work, "deep.onnx")
    model = Deep()
    model.train()
    torch.onnx.export(model, torch.randn(6, 8, 32), path, input_names=["input"],
                      output_names=["logits"], opset_version=14,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    if args.every_strategy:
        every_strategy(path, work)
        sys.exit(0)
    print("\n48-layer transformer, 64 stages on 64 devices, 64 micro-batches per step:")
    print("%8s %10s %10s %14s" % ("strategy", "seconds", "peak MB", "report bytes"))
    for strategy in ["gpipe", "1f1b", "2bw"]:
        best, peak = timed([path, "--batch-axis", "input=1", "--strategy", strategy, "--stages",
                            "64", "--micro-batches", "64", "--report",
                            os.path.join(work, "r.json"), "--steps", "2"])
        print("%8s %10.3f %10.0f %14d" % (strategy, best, peak,
                                          os.path.getsize(os.path.join(work, "r.json"))))
    best, peak = timed([path, "--batch-axis", "input=1", "--strategy", "2bw", "--stages", "64",
                        "--micro-batches", "64", "-o", os.path.join(work, "plan.cdp")])
    print("%8s %10.3f %10.0f   (-o plan.cdp, no report)" % ("2bw", best, peak))

    print("\n48-layer transformer, cdp (4 stages), --report --steps 3:")
    print("%8s %10s %14s" % ("devices", "seconds", "peak MB"))
    for n in [16, 256, 1024]:
        best, peak = timed([path, "--batch-axis", "input=1", "--strategy", "cdp", "--devices",
                            str(n), "--report", os.path.join(work, "r.json"), "--steps", "3"])
        print("%8d %10.3f %14.0f" % (n, best, peak))

    # The 2bw plan itself: what format 4 writes, and what cdp-run spells out.
    plan_path = os.path.join(work, "2bw.cdp")
    subprocess.run([os.path.join(args.build, "bin", "cdp-compile"), path, "--batch-axis",
                    "input=1", "--strategy", "2bw", "--stages", "64", "--micro-batches", "64",
                    "-o", plan_path], check=True)
    include = os.path.join(HERE, "..", "include", "cdp", "Plan")
    subprocess.run(["protoc", "-I", include, "--python_out", work,
                    os.path.join(include, "plan.proto")], check=True)
    sys.path.insert(0, work)
    import plan_pb2  # noqa: E402
    data = open(plan_path, "rb").read()
    plan = plan_pb2.Plan()
    plan.ParseFromString(data[32:])
    template_instructions = sum(len(t.instructions) for t in plan.templates)
    runs = sum(len(d.runs) for d in plan.devices)
    spelled = sum(len(d.instructions) for d in plan.devices) + sum(
        len(plan.templates[r.template].instructions) for d in plan.devices for r in d.runs)
    slot_copies = sum(max(t.slots - 1, 0) for t in plan.tensors)
    print("\n2bw plan (format %d): %d bytes, %d templates with %d instructions, %d runs, "
          "%d tensors; spelled out by cdp-run: %d instructions, %d tensors" %
          (struct.unpack("<I", data[8:12])[0], len(data), len(plan.templates),
           template_instructions, runs, len(plan.tensors), spelled,
           len(plan.tensors) + slot_copies))
