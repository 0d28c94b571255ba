#!/usr/bin/env python3
"""cdp-run --tensorboard read by TensorBoard's own reader (the suite's
test/Runtime/tensorboard.test reads the same files with a reader of its
own, which needs no PyPI).

Usage: bench/tensorboard_check.py [--build build]

Runs in bench/.venv-export (made on first use; `tensorboard` is installed
into it once). dp on 4 devices over `mpirun -np 2` trains 20 steps with
--metrics and --tensorboard; then a run to step 4 with a checkpoint, on to
step 8, and again from the step-4 copy (three event files, the third's
SessionLog START dropping the second's steps 4-7). TensorBoard's
EventAccumulator reads each folder: one line per check, the scalars' tags,
and whether every step's loss, lr and samples/s equal the --metrics line's
(float32) with each step once. Not a test: it needs PyPI.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "test", "e2e", "hf"))
import make_hf_data  # noqa: E402  (the venv)


def ensure_tensorboard():
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "tensorboard"], check=True)


def compare(folder, metrics):
    """TensorBoard's view of `folder` against the --metrics lines."""
    import numpy as np
    from tensorboard.backend.event_processing import event_accumulator
    accumulator = event_accumulator.EventAccumulator(folder)
    accumulator.Reload()
    tags = sorted(accumulator.Tags()["scalars"])
    lines = [json.loads(line) for line in open(metrics)]
    ok = True
    for tag in tags:
        events = accumulator.Scalars(tag)
        steps = [e.step for e in events]
        ok = ok and steps == [line["step"] for line in lines]
        ok = ok and all(np.float32(e.value) == np.float32(line[tag])
                        for e, line in zip(events, lines))
    return tags, len(lines), ok


def main():
    make_hf_data.ensure_venv()
    ensure_tensorboard()
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = parser.parse_args()
    bin_dir = os.path.join(os.path.abspath(args.build), "bin")
    compile_, run = os.path.join(bin_dir, "cdp-compile"), os.path.join(bin_dir, "cdp-run")
    root = ["--allow-run-as-root"] if os.getuid() == 0 else []
    mpirun = ["mpirun", *root, "--oversubscribe", "--mca", "btl", "self,tcp", "--mca",
              "btl_tcp_if_include", "lo", "-np", "2"]
    verdicts = []
    with tempfile.TemporaryDirectory() as work:
        os.chdir(work)
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "test", "Import", "make_models.py"),
                        "mlp4eq", "model.onnx"], check=True)
        import numpy as np
        generator = np.random.default_rng(0)
        np.save("x.npy", generator.standard_normal((64, 16)).astype(np.float32))
        np.save("y.npy", generator.integers(0, 16, 64))
        subprocess.run([compile_, "model.onnx", "--strategy", "dp", "--devices", "4",
                        "--lr-schedule", "cosine", "-o", "dp.cdp"], check=True)
        feeds = ["--feed", "x=x.npy", "--feed", "labels=y.npy"]
        quiet = {"check": True, "stdout": subprocess.DEVNULL}
        subprocess.run(mpirun + [run, "dp.cdp", *feeds, "--steps", "20", "--metrics", "m.jsonl",
                                 "--tensorboard", "tb"], **quiet)
        tags, count, ok = compare("tb", "m.jsonl")
        print("mpirun -np 2, dp on 4 devices: TensorBoard reads %s over %d steps: %s" % (
            ", ".join(tags), count, "equal to --metrics" if ok else "DIFFERENT"))
        verdicts.append(ok)
        subprocess.run([run, "dp.cdp", *feeds, "--steps", "4", "--checkpoint", "ck",
                        "--metrics", "r.jsonl", "--tensorboard", "tb-r"], **quiet)
        subprocess.run(["cp", "-r", "ck", "ck4"], check=True)
        subprocess.run([run, "dp.cdp", *feeds, "--steps", "8", "--checkpoint", "ck", "--resume",
                        "ck", "--metrics", "r.jsonl", "--tensorboard", "tb-r"], **quiet)
        subprocess.run([run, "dp.cdp", *feeds, "--steps", "8", "--resume", "ck4", "--metrics",
                        "r.jsonl", "--tensorboard", "tb-r"], **quiet)
        tags, count, ok = compare("tb-r", "r.jsonl")
        print("resumed twice from step 4 (%d event files): TensorBoard reads %s over %d steps, "
              "each once: %s" % (len(os.listdir("tb-r")), ", ".join(tags), count,
                                 "equal to --metrics" if ok else "DIFFERENT"))
        verdicts.append(ok)
    sys.exit(0 if all(verdicts) else 1)


if __name__ == "__main__":
    main()
