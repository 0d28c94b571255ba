#!/usr/bin/python3
"""Training step time of cdp's CUDA backend against PyTorch on one GPU.

Two halves, because the GPU machine has neither MLIR nor Debian:

  bench/gpu_step.py prepare DIR        (build machine: Debian's torch 1.13 exports)
  python3 DIR/gpu_step.py run DIR      (GPU machine: its CUDA PyTorch)

`prepare` exports the e2e models (MLP, LeNet-style CNN, ResNet with
BatchNorm, transformer block) at batch 32 and 256 and a GEMM-bound MLP
(1024-wide, batch 4096, weights of two values so that the plan compresses),
compiles SGD-with-momentum plans (lr 0.01) with --backend cuda, and writes
one micro-batch of inputs for each. `run` needs DIR/bin/cdp-run and DIR/lib
(scripts/gpu-bundle.sh makes them): it times S steps of cdp-run (the mean of
its per-step metrics after 5 warm-up steps) and of the same model, batch,
loss and optimizer in PyTorch, eager and torch.compile (after warm-up), all
float32 with TF32 off (cdp also with --allow-nondeterministic: "any-bits"),
and prints one table row per model, plus the GEMM MLP's TFLOP/s against
cuBLAS's (torch.matmul) for its shapes; then a second table of every
model's --precision bf16 plan (the GEMM MLP's too) against PyTorch under
torch.autocast (bfloat16), eager and compiled (bf16 not yet run on a GPU).

  python3 DIR/gpu_step.py ab DIR       (GPU machine)

times DIR/bin/cdp-run-* (builds from before a change) against
DIR/bin/cdp-run on every case, alternating, and prints the medians.

  python3 DIR/gpu_step.py memory DIR   (GPU machine)

prints each case's peak GPU memory (nvidia-smi, less an empty context's)
against the --report's allocated bytes.

`prepare` gzips the files of 1 MiB or more (the GEMM MLP's input of +-1
and weights of two values shrink from 28 MB to about 1 MB), so that DIR
fits one device carry beside the GPU bundle and GPT-2's case; the GPU
commands unpack them in place first.
"""

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BATCHES = [32, 256]
MODELS = ["mlp", "lenet", "resnet", "transformer"]
GEMM_WIDTH, GEMM_LAYERS, GEMM_BATCH = 1024, 3, 4096


def e2e_module(folder):
    """The e2e models' definitions (test/e2e/export_torch_models.py)."""
    sys.path.insert(0, folder)
    import export_torch_models as models  # noqa: E402
    return models


def gemm_mlp(torch):
    layers = []
    for _ in range(GEMM_LAYERS):
        layers += [torch.nn.Linear(GEMM_WIDTH, GEMM_WIDTH), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(GEMM_WIDTH, 10))
    model = torch.nn.Sequential(*layers)
    with torch.no_grad():  # two values per tensor: the plan compresses
        for p in model.parameters():
            p.copy_(torch.sign(torch.randn_like(p)) * 0.02)
    return model


def example(models, torch, name, batch):
    """(model, input, batch axis) of `name` at `batch`."""
    torch.manual_seed(0)
    if name == "gemm_mlp":
        return gemm_mlp(torch), torch.sign(torch.randn(batch, GEMM_WIDTH)), 0
    model, sample, _ = models.build(name)
    if name == "transformer":
        return model, torch.randn(sample.shape[0], batch, sample.shape[2]), 1
    return model, torch.randn(batch, *sample.shape[1:]), 0


def cases():
    for name in MODELS:
        for batch in BATCHES:
            yield name, batch
    yield "gemm_mlp", GEMM_BATCH


def prepare(out):
    import numpy as np
    import torch
    repo = os.path.dirname(HERE)
    models = e2e_module(os.path.join(repo, "test", "e2e"))
    compile_ = os.path.join(repo, os.environ.get("CDP_BUILD_DIR", "build"), "bin", "cdp-compile")
    os.makedirs(os.path.join(out, "bench"), exist_ok=True)
    for name, batch in cases():
        model, x, axis = example(models, torch, name, batch)
        tag = "%s-%d" % (name, batch)
        onnx = os.path.join(out, "bench", tag + ".onnx")
        torch.onnx.export(model, x, onnx, input_names=["input"], output_names=["logits"],
                          opset_version=14, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False)
        args = [compile_, onnx, "-o", os.path.join(out, "bench", tag + ".cdp"), "--backend", "cuda",
                "--optimizer", "momentum", "--lr", "0.01"]
        if axis == 1:
            args += ["--batch-axis", "input=1"]
        subprocess.run(args, check=True)
        args[3] = os.path.join(out, "bench", tag + "-bf16.cdp")  # and bf16
        subprocess.run(args + ["--precision", "bf16"], check=True)
        os.remove(onnx)
        np.save(os.path.join(out, "bench", tag + "-x.npy"), x.numpy())
        np.save(os.path.join(out, "bench", tag + "-y.npy"),
                np.random.default_rng(0).integers(0, 10, batch).astype(np.int64))
    os.makedirs(os.path.join(out, "e2e"), exist_ok=True)
    subprocess.run(["cp", os.path.join(repo, "test", "e2e", "export_torch_models.py"),
                    os.path.join(out, "e2e")], check=True)
    subprocess.run(["cp", os.path.abspath(__file__), out], check=True)
    pack(os.path.join(out, "bench"))


def pack(folder, least=1 << 20):
    """gzips each file of `least` bytes or more in `folder` (FILE.gz)."""
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if not name.endswith(".gz") and os.path.getsize(path) >= least:
            subprocess.run(["gzip", "-6", path], check=True)


def unpack(folder):
    """The files `pack` gzipped, back in place (once)."""
    import gzip
    import shutil
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.endswith(".gz") and not os.path.exists(path[:-3]):
            with gzip.open(path) as source, open(path[:-3] + ".part", "wb") as target:
                shutil.copyfileobj(source, target)
            os.rename(path[:-3] + ".part", path[:-3])


def cdp_environment(out, torch):
    """cdp-run's libraries: the bundle's, then the CUDA libraries PyTorch
    itself loads (its NVIDIA wheels), then the toolkit's and the system's.
    Only cdp-run gets them: PyTorch refuses another cuDNN than its own."""
    import glob
    import gzip
    import shutil
    import tempfile
    # The libraries the bundle gzipped to fit a device carry, unpacked.
    unpacked = tempfile.mkdtemp(prefix="cdp-lib-")
    for packed in glob.glob(os.path.join(out, "lib", "*.gz")):
        name = os.path.join(unpacked, os.path.basename(packed)[:-3])
        with gzip.open(packed) as source, open(name, "wb") as target:
            shutil.copyfileobj(source, target)
    wheels = glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "*", "lib"))
    dirs = [os.path.join(out, "lib"), unpacked] + wheels + [
        "/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu"]
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(dirs)
    return env


def run_cdp(out, tag, steps, env, flags, binary="cdp-run", plan=None):
    """cdp-run of case `tag`'s plan (or `plan`) on its rows for `steps`."""
    bench = os.path.join(out, "bench")
    subprocess.run([os.path.join(out, "bin", binary), os.path.join(bench, (plan or tag) + ".cdp"),
                    "--feed", "input=" + os.path.join(bench, tag + "-x.npy"),
                    "--feed", "labels=" + os.path.join(bench, tag + "-y.npy"),
                    "--steps", str(steps), *flags],
                   check=True, stdout=subprocess.DEVNULL, env=env)


def cdp_step_ms(out, tag, batch, steps, env, flags=(), binary="cdp-run", plan=None):
    metrics = os.path.join("/tmp", tag + "-metrics.jsonl")
    run_cdp(out, tag, steps + 5, env, ["--metrics", metrics, *flags], binary, plan)
    rates = [json.loads(line)["samples_per_s"] for line in open(metrics)][5:]
    return 1e3 * sum(batch / r for r in rates) / len(rates)


def profile_summary(path, top=12):
    """Lines of cdp-run --profile's mean time per step by op, then by op and
    layer-free location (h.N for every block), the largest first."""
    import collections
    import re
    profile = json.load(open(path))
    by_op, by_place = collections.Counter(), collections.Counter()
    count = collections.Counter()
    for row in profile["instructions"]:
        place = (row["op"], re.sub(r"h\.\d+", "h.N", row["location"]))
        by_op[row["op"]] += row["ms"]
        by_place[place] += row["ms"]
        count[place] += 1
    total = sum(by_op.values())
    lines = ["cdp-run --profile: %.2f ms a step with a synchronisation after every "
             "instruction (%d steps run, the first, setup, left out)"
             % (total, profile["steps"])]
    lines += ["  %-34s %8.3f ms %5.1f%%" % (op, ms, 100 * ms / total)
              for op, ms in by_op.most_common(top)]
    lines.append("  by place:")
    lines += ["  %-34s %8.3f ms %4d x  %s" % (op, ms, count[(op, where)], where)
              for (op, where), ms in by_place.most_common(top)]
    return lines


def profile_case(out, tag, env, steps=5):
    """Where a case's cdp step goes on this GPU, kernel by kernel (cdp-run
    --profile: a synchronisation after every instruction)."""
    path = os.path.join("/tmp", tag + "-profile.json")
    run_cdp(out, tag, steps + 1, env, ["--profile", path])
    print("\n".join(["%s:" % tag] + profile_summary(path, top=8)))


def torch_step_ms(torch, model, x, y, steps, compiled, autocast=False):
    model = model.cuda().train()
    x, y = x.cuda(), y.cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()

    return timed_step_ms(torch, step, steps, compiled)[0]


def timed_step_ms(torch, step, steps, compiled, warmup=5):
    """Milliseconds per call of `step` (compiled with torch.compile if
    asked) over `steps` calls after `warmup`, and what its first call
    returned."""
    if compiled:
        # Compiled once per model: without the reset the same `step` code
        # collects a cache entry per model and, past dynamo's recompile
        # limit (8), silently runs eager.
        torch._dynamo.reset()
        step = torch.compile(step)
    first = step()
    for _ in range(warmup - 1):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - start) / steps, first


def cublas_ms(torch, batch, steps=50):
    """cuBLAS (torch.matmul, float32) time of the GEMM MLP's products: per
    layer the forward, the input gradient and the weight gradient."""
    shapes = []
    widths = [GEMM_WIDTH] * (GEMM_LAYERS + 1) + [10]
    for fan_in, fan_out in zip(widths[:-1], widths[1:]):
        shapes += [(batch, fan_in, fan_out), (batch, fan_out, fan_in), (fan_out, batch, fan_in)]
    total = 0.0
    for m, k, n in shapes:
        a = torch.randn(m, k, device="cuda")
        b = torch.randn(k, n, device="cuda")
        for _ in range(3):
            a @ b
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            a @ b
        torch.cuda.synchronize()
        total += (time.perf_counter() - start) / steps
    flops = sum(2 * m * k * n for m, k, n in shapes)
    return 1e3 * total, flops


def run(out, steps=50):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    models = e2e_module(os.path.join(out, "e2e"))
    env = cdp_environment(out, torch)
    print("device %s, torch %s, CUDA %s, cuDNN %s, %d steps" % (
        torch.cuda.get_device_name(), torch.__version__, torch.version.cuda,
        torch.backends.cudnn.version(), steps))
    print("%-12s %6s %10s %12s %10s %12s %14s %10s" % (
        "model", "batch", "cdp ms", "any-bits ms", "graphs ms", "eager ms", "compile ms",
        "cdp/eager"))
    losing = []
    for name, batch in cases():
        tag = "%s-%d" % (name, batch)
        ours = cdp_step_ms(out, tag, batch, steps, env)
        any_bits = cdp_step_ms(out, tag, batch, steps, env, ["--allow-nondeterministic"])
        graphs = cdp_step_ms(out, tag, batch, steps, env, ["--cuda-graphs"])
        model, x, _ = example(models, torch, name, batch)
        y = torch.randint(0, 10, (batch,))
        eager = torch_step_ms(torch, model, x, y, steps, False)
        model, x, _ = example(models, torch, name, batch)
        try:
            compiled = "%.3f" % torch_step_ms(torch, model, x, y, steps, True)
        except Exception as error:  # noqa: BLE001 (a missing compiler, say)
            compiled = "n/a (%s)" % type(error).__name__
        print("%-12s %6d %10.3f %12.3f %10.3f %12.3f %14s %10.2f" % (
            name, batch, ours, any_bits, graphs, eager, compiled, ours / eager))
        if ours > 0.9 * eager:  # where the step goes where cdp is not ahead
            losing.append(tag)
        if name == "gemm_mlp":
            blas_ms, flops = cublas_ms(torch, batch)
            print("gemm_mlp: %.1f GFLOP per step; cdp %.1f TFLOP/s, cuBLAS alone on its "
                  "products %.1f TFLOP/s (%.0f%% of it)" % (
                      flops / 1e9, flops / ours / 1e9, flops / blas_ms / 1e9,
                      100 * blas_ms / ours))
    for tag in losing:
        profile_case(out, tag, env)
    run_bf16(out, steps, torch, models, env)


def run_bf16(out, steps, torch, models, env):
    """cdp's --precision bf16 plans against PyTorch under torch.autocast
    (bfloat16), eager and compiled."""
    print("bf16: cdp --precision bf16, torch under torch.autocast(bfloat16)")
    print("%-12s %6s %10s %10s %12s %14s %10s" % (
        "model", "batch", "cdp ms", "graphs ms", "eager ms", "compile ms", "cdp/eager"))
    for name, batch in cases():
        tag = "%s-%d" % (name, batch)
        if not os.path.exists(os.path.join(out, "bench", tag + "-bf16.cdp")):
            continue
        ours = cdp_step_ms(out, tag, batch, steps, env, plan=tag + "-bf16")
        graphs = cdp_step_ms(out, tag, batch, steps, env, ["--cuda-graphs"],
                             plan=tag + "-bf16")
        model, x, _ = example(models, torch, name, batch)
        y = torch.randint(0, 10, (batch,))
        eager = torch_step_ms(torch, model, x, y, steps, False, autocast=True)
        model, x, _ = example(models, torch, name, batch)
        try:
            compiled = "%.3f" % torch_step_ms(torch, model, x, y, steps, True, autocast=True)
        except Exception as error:  # noqa: BLE001 (a missing compiler, say)
            compiled = "n/a (%s)" % type(error).__name__
        print("%-12s %6d %10.3f %10.3f %12.3f %14s %10.2f" % (
            name, batch, ours, graphs, eager, compiled, ours / eager))


def ab(out, steps=200, rounds=3):
    """DIR/bin/cdp-run-* (builds from before a change) against DIR/bin/cdp-run
    on the same GPU, alternating, so that a lease's drift falls on all: the
    median of `rounds` runs of each."""
    import glob
    import statistics
    import torch
    env = cdp_environment(out, torch)
    binaries = sorted(os.path.basename(b) for b in glob.glob(os.path.join(out, "bin", "cdp-run-*")))
    binaries.append("cdp-run")
    print("A/B on %s: ms per step over %d steps, the median of %d runs" % (
        torch.cuda.get_device_name(), steps, rounds))
    print("%-12s %6s" % ("model", "batch") + "".join(" %16s" % b for b in binaries))
    for name, batch in cases():
        tag = "%s-%d" % (name, batch)
        times = {binary: [] for binary in binaries}
        for _ in range(rounds):
            for binary in binaries:
                times[binary].append(cdp_step_ms(out, tag, batch, steps, env, binary=binary))
        print("%-12s %6d" % (name, batch) +
              "".join(" %16.3f" % statistics.median(times[b]) for b in binaries))


def gpu_used_mib():
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    return int(out.split()[0])


def peak_gpu_mib(command, env):
    """The most GPU memory in use while `command` runs, less what was in
    use before it started (MiB, sampled every 20 ms; the lease's GPU runs
    nothing else)."""
    idle = gpu_used_mib()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    peak = idle
    while process.poll() is None:
        peak = max(peak, gpu_used_mib())
        time.sleep(0.02)
    if process.returncode != 0:
        raise RuntimeError("%s failed" % command)
    return peak - idle


def empty_context_mib(env):
    """The GPU memory a process that made its CUDA context and nothing else
    holds (MiB)."""
    return peak_gpu_mib([sys.executable, "-c",
                         "import ctypes, glob, os, time\n"
                         "dirs = os.environ['LD_LIBRARY_PATH'].split(':')\n"
                         "lib = [f for d in dirs for f in glob.glob(d + '/libcudart.so*')][0]\n"
                         "ctypes.CDLL(lib).cudaFree(0)\n"
                         "time.sleep(1)"], env)


def measured_against_report(command, report, env, context):
    """(measured MiB: the run's peak less an empty context's, the report's
    allocated MiB, its resident MiB) of device 0."""
    used = peak_gpu_mib(command + ["--report", report], env) - context
    facts = json.load(open(report))
    return (used, facts["allocated_bytes"][0] / 2**20,
            facts["peak"]["resident_bytes"][0] / 2**20)


def memory(out, steps=20):
    """Per case: cdp-run's peak GPU memory (nvidia-smi) less an empty
    context's, against the --report's allocated bytes and its resident
    bytes (allocated + optimizer state + workspace + messages held) for the
    device."""
    import torch
    env = cdp_environment(out, torch)
    context = empty_context_mib(env)
    print("GPU memory on %s: an empty context %d MiB" % (torch.cuda.get_device_name(), context))
    print("%-12s %6s %14s %14s %14s %16s" % ("model", "batch", "measured MiB", "allocated MiB",
                                              "resident MiB", "measured/resident"))
    for name, batch in cases():
        tag = "%s-%d" % (name, batch)
        bench = os.path.join(out, "bench")
        used, allocated, resident = measured_against_report(
            [os.path.join(out, "bin", "cdp-run"), os.path.join(bench, tag + ".cdp"),
             "--feed", "input=" + os.path.join(bench, tag + "-x.npy"),
             "--feed", "labels=" + os.path.join(bench, tag + "-y.npy"),
             "--steps", str(steps)], os.path.join("/tmp", tag + "-report.json"), env, context)
        print("%-12s %6d %14d %14.1f %14.1f %16.2f" % (name, batch, used, allocated, resident,
                                                        used / resident if resident else 0))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in ("run", "ab", "memory"):
        unpack(os.path.join(sys.argv[2], "bench"))
    if len(sys.argv) == 3 and sys.argv[1] in ("ab", "memory"):
        (ab if sys.argv[1] == "ab" else memory)(sys.argv[2])
        sys.exit(0)
    if len(sys.argv) != 3 or sys.argv[1] not in ("prepare", "run"):
        sys.exit(__doc__)
    prepare(sys.argv[2]) if sys.argv[1] == "prepare" else run(sys.argv[2])
