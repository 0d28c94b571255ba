#!/usr/bin/python3
"""Training step time of cdp against PyTorch (Debian's torch, CPU).

Usage: bench/train_step.py [--build build] [--threads N] [--steps S]
                           [--precision fp32|bf16] [--models NAME ...]

For each reference model (MLP, LeNet-style CNN, ResNet with BatchNorm,
transformer encoder block; with --models also gemm_mlp, the GPU bench's
GEMM-bound MLP: 3 Linear layers of 1024 x 1024 with ReLU over 4096 rows)
at its export batch size: exports it, compiles a
cdp SGD plan, times S steps of `cdp-run --feed` (the mean step time cdp
reports in its metrics, warm-up step excluded), and times S steps of the
same model and optimizer in PyTorch with the same thread count, in this one
run. Prints a table with the ratio cdp / torch (lower is better; the target
is <= 1.0). With --precision bf16, cdp's plans are compiled with it and
PyTorch's step runs under torch.autocast("cpu", dtype=torch.bfloat16).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "e2e"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_torch_models as models  # noqa: E402
import gpu_step  # noqa: E402  (the GEMM-bound MLP)

DEFAULT_MODELS = ["mlp", "lenet", "resnet", "transformer"]


def build_model(name, batch):
    """(model, example input, dynamic axes) of `name`: a reference model,
    or gpu_step.py's GEMM-bound MLP (its batch fixed at 4096 rows)."""
    if name == "gemm_mlp":
        torch.manual_seed(0)
        return (gpu_step.gemm_mlp(torch),
                torch.sign(torch.randn(gpu_step.GEMM_BATCH, gpu_step.GEMM_WIDTH)), None)
    return models.build(name, batch)


def export(name, work, batch):
    if name != "gemm_mlp":
        return models.export(name, work, batch)
    model, example, _ = build_model(name, batch)
    path = os.path.join(work, name + ".onnx")
    torch.onnx.export(model, example, path, input_names=["input"], output_names=["logits"],
                      opset_version=14, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)
    return path


def mean_step_time(step, steps):
    """Seconds per call of step() over `steps` calls after 3 warm-up ones."""
    for _ in range(3):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


PRECISION = "fp32"


def torch_model_step_time(model, x, y, threads, steps):
    """PyTorch's SGD step (zero_grad, forward, cross-entropy, backward,
    step) on one fixed batch, under autocast with --precision bf16."""
    torch.set_num_threads(threads)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    bf16 = PRECISION == "bf16"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    return mean_step_time(step, steps)


def torch_step_time(name, threads, steps, batch=8):
    model, example, _ = build_model(name, batch)
    batch = example.shape[1] if name == "transformer" else example.shape[0]
    x = torch.randn(*example.shape)
    y = torch.randint(0, 10, (batch,))
    return torch_model_step_time(model, x, y, threads, steps), batch


def compile_plan(name, build, work, batch=8):
    """Exports the model at `batch`, writes random inputs and labels
    (NAME-x.npy, NAME-y.npy in work) and compiles an SGD plan: (plan, batch)."""
    path = export(name, work, batch)
    _, example, _ = build_model(name, batch)
    batch = example.shape[1] if name == "transformer" else example.shape[0]
    np.save(os.path.join(work, name + "-x.npy"), np.random.randn(*example.shape).astype(np.float32))
    np.save(os.path.join(work, name + "-y.npy"), np.random.randint(0, 10, batch).astype(np.int64))
    plan = os.path.join(work, name + ".cdp")
    args = [os.path.join(build, "bin", "cdp-compile"), path, "-o", plan, "--lr", "0.01",
            "--precision", PRECISION]
    if name == "transformer":
        args += ["--batch-axis", "input=1"]
    if name == "mlp":
        args += ["--batch-size", str(batch)]
    subprocess.run(args, check=True)
    return plan, batch


def run_step_time(binary, name, plan, batch, threads, steps, work):
    """Mean step time of `binary` running the plan for `steps` steps after 3
    warm-up steps (from its metrics)."""
    metrics = os.path.join(work, "metrics.jsonl")
    subprocess.run([binary, plan,
                    "--feed", "input=" + os.path.join(work, name + "-x.npy"),
                    "--feed", "labels=" + os.path.join(work, name + "-y.npy"),
                    "--steps", str(steps + 3), "--threads", str(threads),
                    "--metrics", metrics], check=True, stdout=subprocess.DEVNULL)
    rates = [json.loads(line)["samples_per_s"] for line in open(metrics)][3:]
    return float(np.mean([batch / r for r in rates]))


def cdp_step_time(name, build, threads, steps, work):
    plan, batch = compile_plan(name, build, work)
    return run_step_time(os.path.join(build, "bin", "cdp-run"), name, plan, batch, threads,
                         steps, work)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS,
                        choices=DEFAULT_MODELS + ["gemm_mlp"])
    args = parser.parse_args()
    global PRECISION
    PRECISION = args.precision
    print("threads %d, steps %d, torch %s, precision %s" % (
        args.threads, args.steps, torch.__version__, PRECISION))
    print("%-12s %6s %14s %14s %8s" % ("model", "batch", "cdp ms/step", "torch ms/step", "ratio"))
    with tempfile.TemporaryDirectory() as work:
        for name in args.models:
            ours = cdp_step_time(name, args.build, args.threads, args.steps, work)
            theirs, batch = torch_step_time(name, args.threads, args.steps)
            print("%-12s %6d %14.3f %14.3f %8.2f" % (name, batch, ours * 1e3, theirs * 1e3, ours / theirs))


if __name__ == "__main__":
    main()
