#!/usr/bin/python3
"""laysa's payload per step against a dense all-reduce's, by density.

Usage: bench/laysa_comm.py [--build build] [--models resnet,transformer]
                           [--devices 4] [--densities 0.001,0.01,0.1,0.25,0.5]
Exports each e2e model, compiles `--strategy laysa --density D` with
--report (predicted; `test/Runtime/laysa.test` checks that a run measures
the same) and prints, per density, the bytes one device sends per step,
the same from the formula (per parameter of n elements: 2k values and int32
indices, k = max(1, ceil(D n)), or n sent whole below --dense-below 1024;
times 4 bytes and N - 1 receivers), and their ratio to a dense ring
all-reduce of every parameter (2 (N - 1) / N x 4 bytes per element).
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "e2e"))
import export_torch_models as models  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import cdp_report  # noqa: E402  (reports with every device's row)

DENSE_BELOW = 1024


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    parser.add_argument("--models", default="resnet,transformer")
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--densities", default="0.001,0.01,0.1,0.25,0.5")
    args = parser.parse_args()
    compile_bin = os.path.join(args.build, "bin", "cdp-compile")
    n = args.devices
    print("%-12s %8s %14s %14s %14s %8s" % ("model", "density", "sent (report)", "sent (formula)",
                                           "all-reduce", "ratio"))
    with tempfile.TemporaryDirectory() as work:
        for name in args.models.split(","):
            path = models.export(name, work)
            model, _, _ = models.build(name)
            sizes = [p.numel() for p in model.parameters() if p.requires_grad]
            dense = 4 * 2 * (n - 1) / n * sum(sizes)
            flags = ["--batch-axis", "input=1"] if name == "transformer" else []
            for density in [float(d) for d in args.densities.split(",")]:
                report = os.path.join(work, "report.json")
                subprocess.run([compile_bin, path, *flags, "--strategy", "laysa", "--devices", str(n),
                                "--density", str(density), "--report", report, "--steps", "1"],
                               check=True)
                steps = cdp_report.load(report)["time_steps"]
                sent = sum(t["devices"][0]["sent_bytes"] for t in steps)
                formula = 4 * (n - 1) * sum(
                    s if s < DENSE_BELOW else 2 * min(s, max(1, math.ceil(density * s)))
                    for s in sizes)
                print("%-12s %8g %14d %14d %14d %8.3f" % (name, density, sent, formula, dense,
                                                          sent / dense))
            print("%-12s crossover (indices included, parameters sent whole aside): density %.3f"
                  % (name, 1.0 / n))


if __name__ == "__main__":
    main()
