#!/usr/bin/python3
"""cdp's training step against the peers a user would compare it with, on one CPU device.

Usage: bench/peers.py [--build build] [--threads 2,1] [--steps S] [--models mlp,lenet,...]

The first run makes a venv, bench/.venv-peers, with onnxruntime-training
1.19.2 from PyPI (the ONNX-in training peer: `onnxruntime.training`'s
artifacts and `api.Module`); it sees Debian's packages too (torch 1.13,
onnx 1.12, which that onnxruntime needs at most 1.16 of, numpy), so torch
1.13 is the PyTorch peer. Then, for each model of test/e2e's
export_torch_models.py at its export batch (SGD, lr 0.01, cross-entropy, one
fixed batch) and each thread count: cdp's mean step (`cdp-run` metrics, as
bench/train_step.py measures it), PyTorch's (zero_grad, forward, loss,
backward, step) and onnxruntime's (module(x, y), optimizer.step(),
lazy_reset_grad()), each after warm-up steps, and cdp's time over the
fastest peer's (lower is better; the aim is 0.7).
"""

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VENV = os.path.join(HERE, ".venv-peers")
PEERS = ["onnxruntime-training==1.19.2", "onnx<=1.16"]


def in_venv():
    return os.path.realpath(sys.prefix) == os.path.realpath(VENV)


def ensure_venv():
    """Makes the venv on first use and runs this script again inside it."""
    python = os.path.join(VENV, "bin", "python")
    if not os.path.exists(python):
        print("making %s with %s (once)" % (VENV, ", ".join(PEERS)), flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", VENV], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", *PEERS], check=True)
    os.execv(python, [python, os.path.abspath(__file__), *sys.argv[1:]])


@contextlib.contextmanager
def quiet():
    """Native code's stdout and stderr to /dev/null for a while."""
    sys.stdout.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved + [null]:
            os.close(fd)


def ort_step_time(name, path, threads, steps, work):
    """onnxruntime-training's mean step on the exported model (SGD, the
    cross-entropy loss its artifacts add)."""
    import numpy as np
    import onnx
    import onnxruntime
    from onnxruntime.training import artifacts
    from onnxruntime.training.api import CheckpointState, Module, Optimizer
    onnxruntime.set_default_logger_severity(3)
    import export_torch_models as models
    model = onnx.load(path)
    # The torch model's parameters (BatchNorm's running statistics are
    # initializers too, but not trained).
    parameters = {n for n, _ in models.build(name)[0].named_parameters()}
    trained = [t.name for t in model.graph.initializer if t.name in parameters]
    out = os.path.join(work, name + "-ort")
    os.makedirs(out, exist_ok=True)
    with quiet():  # its graph builder logs every transformer at info level
        artifacts.generate_artifacts(model, requires_grad=trained, frozen_params=[],
                                     loss=artifacts.LossType.CrossEntropyLoss,
                                     optimizer=artifacts.OptimType.SGD,
                                     artifact_directory=out)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    # Its pool's threads would spin after each run and slow whatever is
    # timed next (cdp's next run measured 0.55 -> 0.85 ms on LeNet).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    state = CheckpointState.load_checkpoint(os.path.join(out, "checkpoint"))
    # No eval model: its BatchNorm (training mode in the export, with
    # running-statistic outputs) does not load; only training is timed.
    module = Module(os.path.join(out, "training_model.onnx"), state, None, "cpu", options)
    optimizer = Optimizer(os.path.join(out, "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(0.01)
    x = np.load(os.path.join(work, name + "-x.npy"))
    y = np.load(os.path.join(work, name + "-y.npy"))
    module.train()

    def step():
        module(x, y)
        optimizer.step()
        module.lazy_reset_grad()

    for _ in range(3):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    elapsed = (time.perf_counter() - start) / steps
    del optimizer, module, state
    return elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--threads", default="2,1", help="thread counts, comma-separated")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--models", default="mlp,lenet,resnet,transformer")
    args = parser.parse_args()
    if not in_venv():
        ensure_venv()
    sys.path.insert(0, HERE)
    import onnxruntime
    import torch
    import train_step  # noqa: E402 (bench/train_step.py: cdp's and torch's steps)
    print("torch %s, onnxruntime-training %s, %d steps after warm-up" %
          (torch.__version__, onnxruntime.__version__, args.steps))
    print("%-12s %7s %6s %10s %10s %10s %14s" %
          ("model", "threads", "batch", "cdp ms", "torch ms", "ort ms", "cdp / fastest"))
    with tempfile.TemporaryDirectory() as work:
        for name in args.models.split(","):
            plan, batch = train_step.compile_plan(name, args.build, work)
            path = os.path.join(work, name + ".onnx")
            for threads in [int(t) for t in args.threads.split(",")]:
                ours = train_step.run_step_time(os.path.join(args.build, "bin", "cdp-run"), name,
                                                plan, batch, threads, args.steps, work)
                theirs, _ = train_step.torch_step_time(name, threads, args.steps)
                ort = ort_step_time(name, path, threads, args.steps, work)
                print("%-12s %7d %6d %10.3f %10.3f %10.3f %14.2f" %
                      (name, threads, batch, ours * 1e3, theirs * 1e3, ort * 1e3,
                       ours / min(theirs, ort)), flush=True)


if __name__ == "__main__":
    main()
