#!/usr/bin/python3
"""One-device step time of two cdp-run builds: before and after a runtime change.

Usage: bench/device_seam.py --before OLD/bin/cdp-run [--after build/bin/cdp-run]
       [--build build] [--runs 5] [--steps 50] [--threads N]

Written for the device seam (the executor allocating, uploading and staging
through a Device instead of touching host memory directly), to show that the
CPU backend lost no speed. Build the earlier runtime beside this checkout:

    git worktree add /tmp/before <commit before the change>
    cmake -G Ninja -S /tmp/before -B /tmp/before/build -DCMAKE_BUILD_TYPE=Release
    ninja -C /tmp/before/build cdp-run

For each reference model (MLP, LeNet-style CNN, ResNet with BatchNorm,
transformer block) at its export batch size, one SGD plan (compiled by
--build's cdp-compile) is run by both binaries, alternating, --runs times
each; a run's figure is its mean step time over --steps steps after 3
warm-up steps. Prints the median over the runs, the run-to-run spread
((max - min) / median) and the change of the medians.
"""

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_step import compile_plan, run_step_time  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the earlier cdp-run")
    parser.add_argument("--after", default="build/bin/cdp-run")
    parser.add_argument("--build", default="build", help="whose cdp-compile makes the plans")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    print("threads %d, %d runs of %d steps each" % (args.threads, args.runs, args.steps))
    print("%-12s %12s %8s %12s %8s %8s" % ("model", "before ms", "spread", "after ms", "spread", "change"))
    with tempfile.TemporaryDirectory() as work:
        for name in ["mlp", "lenet", "resnet", "transformer"]:
            plan, batch = compile_plan(name, args.build, work)
            times = {"before": [], "after": []}
            for run in range(args.runs):
                order = ["before", "after"] if run % 2 == 0 else ["after", "before"]
                for which in order:
                    binary = args.before if which == "before" else args.after
                    times[which].append(run_step_time(binary, name, plan, batch,
                                                      args.threads, args.steps, work))
            row = []
            for which in ["before", "after"]:
                median = statistics.median(times[which])
                row += [median * 1e3, (max(times[which]) - min(times[which])) / median * 100]
            change = (row[2] / row[0] - 1) * 100
            print("%-12s %12.3f %7.1f%% %12.3f %7.1f%% %+7.1f%%" % (name, row[0], row[1], row[2], row[3], change))


if __name__ == "__main__":
    main()
