#!/usr/bin/python3
"""How long `cdp-compile --report` takes to predict a dp/cdp plan for many
devices (the aim: well under a second for N = 1024).

Usage: bench/report_time.py [--build build]
Exports the transformer block, then times `cdp-compile --strategy cdp
--devices N --stages 4 --report` for N = 4 .. 1024 (best of 3 runs).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "e2e"))
import export_torch_models as models  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--build", default="build")
args = parser.parse_args()
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
