#!/usr/bin/python3
"""cdp's training step against the peers a user would compare it with, on one CPU device.

Usage: bench/peers.py [--build build] [--threads 2,1] [--steps S] [--models mlp,lenet,...]
                      [--batch B] [--torchvision resnet18,mobilenet_v2,vit]

The first run makes a venv, bench/.venv-peers, with onnxruntime-training
1.19.2 from PyPI (the ONNX-in training peer: `onnxruntime.training`'s
artifacts and `api.Module`); it sees Debian's packages too (torch 1.13,
onnx 1.12, which that onnxruntime needs at most 1.16 of, numpy), so torch
1.13 is the PyTorch peer. Then, for each model of test/e2e's
export_torch_models.py at batch B (default 8, its export batch; SGD, lr 0.01,
cross-entropy, one fixed batch) and each thread count: cdp's mean step (`cdp-run` metrics, as
bench/train_step.py measures it), PyTorch's (zero_grad, forward, loss,
backward, step) and onnxruntime's (module(x, y), optimizer.step(),
lazy_reset_grad()), each after warm-up steps, and cdp's time over the
fastest peer's (lower is better; the aim is 0.7). With --torchvision, the
same for torchvision models (Debian's python3-torchvision, random init, 10
classes, batch 8 of 64 x 64 images, Dropout off, exported as
test/e2e/torchvision_check.py does); `vit` is a small VisionTransformer
(patch 16, 4 layers, 4 heads, width 128).
"""

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile

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


def ort_step_time(name, path, threads, steps, work, parameters):
    """onnxruntime-training's mean step on the exported model (SGD, the
    cross-entropy loss its artifacts add) training `parameters` (the torch
    model's names: BatchNorm's running statistics are initializers too)."""
    import numpy as np
    import onnx
    import onnxruntime
    from onnxruntime.training import artifacts
    from onnxruntime.training.api import CheckpointState, Module, Optimizer
    onnxruntime.set_default_logger_severity(3)
    model = onnx.load(path)
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

    import train_step
    elapsed = train_step.mean_step_time(step, steps)
    del optimizer, module, state
    return elapsed


def torchvision_model(name):
    """A torchvision model as the e2e check builds it (Dropout off), or the
    small ViT."""
    import torchvision
    import torchvision_check
    if name != "vit":
        return torchvision_check.build(name, 0)
    torch_module = sys.modules["torch"]
    torch_module.manual_seed(0)
    return torchvision.models.vision_transformer.VisionTransformer(
        image_size=64, patch_size=16, num_layers=4, num_heads=4, hidden_dim=128,
        mlp_dim=256, dropout=0.0, attention_dropout=0.0, num_classes=10)


def torchvision_case(name, build, work):
    """Exports it at batch 8, 64 x 64, writes inputs and compiles cdp's
    plan: (plan, path, batch, model, x, y) with torch's x and y."""
    import numpy as np
    import torch
    model = torchvision_model(name)
    x = torch.randn(8, 3, 64, 64)
    y = torch.randint(0, 10, (8,))
    path = os.path.join(work, name + ".onnx")
    model.train()
    torch.onnx.export(model, x, path, input_names=["input"], output_names=["logits"],
                      opset_version=14, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)
    np.save(os.path.join(work, name + "-x.npy"), x.numpy())
    np.save(os.path.join(work, name + "-y.npy"), y.numpy().astype(np.int64))
    plan = os.path.join(work, name + ".cdp")
    subprocess.run([os.path.join(build, "bin", "cdp-compile"), path, "-o", plan, "--lr", "0.01"],
                   check=True, stdout=subprocess.DEVNULL)
    return plan, path, 8, model, x, y


def row(name, threads, batch, ours, theirs, ort):
    fastest = min(t for t in (theirs, ort) if t is not None)
    print("%-12s %7d %6d %10.3f %10.3f %10s %14.2f" %
          (name, threads, batch, ours * 1e3, theirs * 1e3,
           "failed" if ort is None else "%.3f" % (ort * 1e3), ours / fastest), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--threads", default="2,1", help="thread counts, comma-separated")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--models", default="mlp,lenet,resnet,transformer")
    parser.add_argument("--batch", type=int, default=8,
                        help="batch of the e2e models (the torchvision ones: 8)")
    parser.add_argument("--torchvision", default="",
                        help="also these: resnet18, mobilenet_v2, vit, ...")
    args = parser.parse_args()
    if not in_venv():
        ensure_venv()
    sys.path.insert(0, HERE)
    sys.path.insert(0, os.path.join(HERE, "..", "test", "e2e"))
    import onnxruntime
    import torch
    import train_step  # noqa: E402 (bench/train_step.py: cdp's and torch's steps)
    print("torch %s, onnxruntime-training %s, %d steps after warm-up" %
          (torch.__version__, onnxruntime.__version__, args.steps))
    print("%-12s %7s %6s %10s %10s %10s %14s" %
          ("model", "threads", "batch", "cdp ms", "torch ms", "ort ms", "cdp / fastest"))
    import export_torch_models as models
    runner = os.path.join(args.build, "bin", "cdp-run")
    thread_counts = [int(t) for t in args.threads.split(",")]
    with tempfile.TemporaryDirectory() as work:
        for name in [m for m in args.models.split(",") if m]:
            plan, batch = train_step.compile_plan(name, args.build, work, args.batch)
            path = os.path.join(work, name + ".onnx")
            parameters = {n for n, _ in models.build(name)[0].named_parameters()}
            for threads in thread_counts:
                ours = train_step.run_step_time(runner, name, plan, batch, threads, args.steps,
                                                work)
                theirs, _ = train_step.torch_step_time(name, threads, args.steps, batch)
                ort = ort_step_time(name, path, threads, args.steps, work, parameters)
                row(name, threads, batch, ours, theirs, ort)
        for name in [m for m in args.torchvision.split(",") if m]:
            plan, path, batch, model, x, y = torchvision_case(name, args.build, work)
            parameters = {n for n, _ in model.named_parameters()}
            for threads in thread_counts:
                ours = train_step.run_step_time(runner, name, plan, batch, threads, args.steps,
                                                work)
                theirs = train_step.torch_model_step_time(model, x, y, threads, args.steps)
                try:
                    ort = ort_step_time(name, path, threads, args.steps, work, parameters)
                except Exception as error:  # noqa: BLE001 (a peer that cannot train it)
                    print("onnxruntime-training on %s: %s" % (name, str(error).splitlines()[-1][:120]),
                          file=sys.stderr)
                    ort = None
                row(name, threads, batch, ours, theirs, ort)


if __name__ == "__main__":
    main()
