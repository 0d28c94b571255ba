#!/usr/bin/python3
"""DP and CDP under mpirun against PyTorch DDP (gloo), one run.

For each model (the MLP, LeNet, the ResNet of test/e2e/export_torch_models.py)
with B = 8 samples per process and 4 processes x 1 thread: cdp-run's dp and
cdp (v2, 4 stages) plans under `mpirun -np 4 --threads 1`, and PyTorch
DistributedDataParallel over gloo with 4 processes x 1 thread, the same
model, SGD with momentum 0.9, lr 0.01, on the same Fashion-MNIST rows
(process k of step t trains rows (4t + k)B ... (4t + k + 1)B - 1). Prints
milliseconds per step (steps 1..T, the first left out for torch's warm-up;
cdp-run's figure is its training loop over all T steps) and the ratio.

Then checks that the bytes every process sends per time step under mpirun
equal what cdp-compile --report predicts, and measures the time from a
process killed with SIGKILL to the end of the job.

Usage: bench/mpi_vs_ddp.py [--build build] [--steps 300]
"""

import argparse
import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "e2e"))
import export_torch_models as models  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import cdp_report  # noqa: E402  (reports with every device's row)

RANKS, BATCH = 4, 8
DATA = "/usr/share/datasets/fashion-mnist"
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
# Containers often forbid the cross-process copies vader would use.
MPIRUN = ["mpirun", "--oversubscribe", "--mca", "btl", "self,vader", "--mca",
          "btl_vader_single_copy_mechanism", "none", "-np", str(RANKS)]


def read_idx(name):
    with gzip.open(os.path.join(DATA, name)) as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def ddp_worker(rank, name, steps, port, result):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=RANKS)
    model = models.build(name)[0]
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    images = read_idx("train-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    labels = read_idx("train-labels-idx1-ubyte.gz").astype(np.int64)
    if name == "mlp":
        images = images.reshape(len(images), 784)
    else:
        images = images.reshape(len(images), 1, 28, 28)
    loss_fn = torch.nn.CrossEntropyLoss()
    started = None
    for t in range(steps):
        if t == 1:
            dist.barrier()
            started = time.perf_counter()
        first = ((t * RANKS + rank) * BATCH) % (len(images) - BATCH)
        x = torch.from_numpy(images[first:first + BATCH])
        y = torch.from_numpy(labels[first:first + BATCH])
        opt.zero_grad()
        loss_fn(ddp(x), y).backward()
        opt.step()
    dist.barrier()
    if rank == 0:
        result.put(1e3 * (time.perf_counter() - started) / (steps - 1))
    dist.destroy_process_group()


def ddp_ms(name, steps):
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    result = ctx.Queue()
    port = 29500 + os.getpid() % 1000
    procs = [ctx.Process(target=ddp_worker, args=(r, name, steps, port, result))
             for r in range(RANKS)]
    for p in procs:
        p.start()
    ms = result.get()
    for p in procs:
        p.join()
    return ms


def cdp_ms(build, plan, steps, work):
    metrics = os.path.join(work, "m.jsonl")
    subprocess.run(MPIRUN + [os.path.join(build, "bin", "cdp-run"), plan, "--data",
                             "fashion-mnist", "--steps", str(steps), "--threads", "1",
                             "--metrics", metrics], check=True, env=ENV,
                   capture_output=True)
    rate = json.loads(open(metrics).read().splitlines()[-1])["samples_per_s"]
    return 1e3 * RANKS * BATCH / rate


def sent_bytes(report):
    return [[d["sent_bytes"] for d in step["devices"]]
            for step in cdp_report.load(report)["time_steps"]]


def main():
    warnings.filterwarnings("ignore")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    compile_ = os.path.join(build, "bin", "cdp-compile")
    work = tempfile.mkdtemp(prefix="cdp-ddp-")
    print(f"{RANKS} processes x 1 thread, B = {BATCH} per process, {args.steps} steps, "
          f"{os.cpu_count()} cores")
    print(f"{'model':8} {'torch DDP ms':>12} {'cdp dp ms':>10} {'ratio':>6} "
          f"{'cdp cdp ms':>11} {'ratio':>6}")
    for name in ["mlp", "lenet", "resnet"]:
        onnx = models.export(name, work)
        extra = ["--batch-size", str(BATCH)] if name == "mlp" else []
        row = {}
        for strategy in ["dp", "cdp"]:
            plan = os.path.join(work, f"{name}-{strategy}.cdp")
            subprocess.run([compile_, onnx, *extra, "--strategy", strategy, "--devices",
                            str(RANKS), "--stages", "4", "--optimizer", "momentum",
                            "-o", plan], check=True, capture_output=True)
            row[strategy] = cdp_ms(build, plan, args.steps, work)
        torch_ms = ddp_ms(name, args.steps)
        print(f"{name:8} {torch_ms:12.3f} {row['dp']:10.3f} {row['dp'] / torch_ms:6.2f} "
              f"{row['cdp']:11.3f} {row['cdp'] / torch_ms:6.2f}", flush=True)

    # Bytes sent per process and time step: measured under mpirun against
    # the compiler's prediction.
    plan = os.path.join(work, "lenet-cdp.cdp")
    predicted = os.path.join(work, "predicted.json")
    measured = os.path.join(work, "measured.json")
    subprocess.run([compile_, os.path.join(work, "lenet.onnx"), "--strategy", "cdp",
                    "--devices", str(RANKS), "--stages", "4", "--optimizer", "momentum",
                    "--report", predicted, "--steps", "3"], check=True, capture_output=True)
    subprocess.run(MPIRUN + [os.path.join(build, "bin", "cdp-run"), plan, "--data",
                             "fashion-mnist", "--steps", "3", "--report", measured],
                   check=True, env=ENV, capture_output=True)
    same = sent_bytes(predicted) == sent_bytes(measured)
    total = sum(map(sum, sent_bytes(measured)))
    print(f"lenet cdp, 3 steps: bytes sent per process and time step under mpirun equal "
          f"the prediction: {same} ({total} bytes in all)")

    # A process killed mid-run.
    job = subprocess.Popen(MPIRUN + [os.path.join(build, "bin", "cdp-run"), plan, "--data",
                                     "fashion-mnist", "--epochs", "100"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV,
                           start_new_session=True)
    time.sleep(3)
    # The job's cdp-run processes: its session, read from /proc.
    pids = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and int(entry) != job.pid and os.getsid(int(entry)) == job.pid:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if os.path.basename(f.read().split(b"\0")[0]) == b"cdp-run":
                        pids.append(int(entry))
        except OSError:
            continue
    os.kill(sorted(pids)[-1], signal.SIGKILL)
    killed = time.time()
    job.wait(timeout=120)
    print(f"a process killed with SIGKILL: the job ended with status {job.returncode} "
          f"{time.time() - killed:.2f} s later")


if __name__ == "__main__":
    main()
