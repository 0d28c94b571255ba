#!/usr/bin/env python3
"""GPT-2 medium (355M parameters) through cdp at its real size: compile for
every layout the issue names, train 2 steps in one process and under
`mpirun -np 4`, and measure each rank's memory and weight reads.

Usage: bench/gpt2_medium.py [--build build] [--work bench/out/gpt2-medium]
                            [--layers 24] [--skip-runs] [--only NAME,...]
                            (NAME: a layout, 1f1b-bf16, or recompute)

Runs in bench/.venv-export (made on first use by
test/e2e/hf/make_hf_data.py's rules). GPT-2 medium's real config (24
layers, d = 1024, 16 heads, vocabulary 50257), random init (seed 0),
dropout 0, sequence 128, batch 1 with an attention mask, exported by
TorchScript at opset 17 in training mode and saved with its initializers as
ONNX external data (model.onnx + model.onnx.data), as torch does past
2 GiB. 8 rows of random tokens are fed: 2 steps of 4 samples.

Prints one table per phase:

  compile  seconds and peak memory (max RSS) of `cdp-compile` for single,
           dp --devices 4 --zero 3, cdp --devices 4 --stages 4, CDP-ZeRO
           (cdp --cdp-rule v1 --zero 3) and 1f1b --stages 4 --micro-batches 4
           (SGD with momentum 0.9), the plan's and weights file's bytes,
           and the report's prediction per device (its peak's
           resident_bytes: what it allocates at load, its optimizer state
           and the most its communicator holds at once);
  runs     for each 4-device plan: 2 steps in one process and under
           `mpirun -np 4` (a device per rank), whether the trained
           parameters are bit-identical, each rank's peak resident memory
           (VmHWM) against the report's prediction for its device, and the
           bytes of the weights file each rank read (cdp-run's own count,
           the measured report's weights_read_bytes) against the parameter
           bytes of the stages its device runs;
  recompute  1f1b --stages 4 --micro-batches 4 compiled again with
           `--recompute layer`: the report's activation bytes at each
           device's peak and its predicted step time, with and without;
           both plans trained 2 steps in one process, their parameters
           compared bit for bit (--only recompute runs this phase alone);
  saved    the single plan trained one step and saved with --save-onnx as
           external data, run by onnxruntime (pip, in this venv) and by
           `cdp-compile --inference` on the 8 rows: the largest logit
           difference (the check: at most 1e-5 of the largest logit).

Not a test: it needs PyPI and a quarter of an hour; docs/results.md
carries its figures.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "test", "e2e", "hf"))
import make_hf_data  # noqa: E402  (the venv and the trainable-names recipe)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import cdp_report  # noqa: E402  (reports with every device's row)

ROWS = 8
LAYOUTS = [
    ("single", []),
    ("dp-zero3", ["--strategy", "dp", "--devices", "4", "--zero", "3"]),
    ("cdp", ["--strategy", "cdp", "--devices", "4", "--stages", "4"]),
    ("cdp-zero", ["--strategy", "cdp", "--devices", "4", "--stages", "4", "--cdp-rule", "v1",
                  "--zero", "3"]),
    ("1f1b", ["--strategy", "1f1b", "--stages", "4", "--micro-batches", "4"]),
    ("1f1b-bf16", ["--strategy", "1f1b", "--stages", "4", "--micro-batches", "4",
                   "--precision", "bf16"]),
]
# Run only when --only names them: bf16 (the rounded weight copies a stage
# holds once per device).
OPTIONAL = {"1f1b-bf16"}

# Spawns the command from a small Python and reports its time and peak
# memory: a child's ru_maxrss starts from its parent's size at the fork,
# which for this script (torch loaded) would exceed cdp's own.
MEASURE = """
import os, subprocess, sys, time
start = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
print(time.perf_counter() - start, usage.ru_maxrss * 1024, status)
"""


def timed(command):
    """Seconds and peak resident bytes of one run of `command`."""
    out = subprocess.run(["/usr/bin/python3", "-c", MEASURE] + command,
                         capture_output=True, text=True, check=True).stdout.split()
    if int(out[2]) != 0:
        sys.exit("failed: %s" % " ".join(command))
    return float(out[0]), int(out[1])


def export(args, work):
    """Writes model.onnx (+ .data), the feeds and trainable.txt once."""
    import numpy as np
    import onnx
    import torch
    import transformers as T
    path = os.path.join(work, "model.onnx")
    if os.path.exists(path):
        return path
    torch.manual_seed(0)
    config = T.GPT2Config(n_layer=args.layers, n_embd=1024, n_head=16, resid_pdrop=0,
                          embd_pdrop=0, attn_pdrop=0)
    model = T.GPT2LMHeadModel(config)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, config.vocab_size, (ROWS, args.seq), generator=generator)
    mask = torch.ones_like(ids)
    mask[:, -8:] = 0
    labels = make_hf_data.next_token_labels(ids, mask)
    wrapper = make_hf_data.Logits(model, ["input_ids", "attention_mask"])
    inline = os.path.join(work, "inline.onnx")
    make_hf_data.export(wrapper, ["input_ids", "attention_mask"], [ids[:1], mask[:1]], "ts",
                        inline)
    proto = onnx.load(inline)
    onnx.save_model(proto, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=1024)
    os.remove(inline)
    np.save(os.path.join(work, "input_ids.npy"), ids.numpy())
    np.save(os.path.join(work, "attention_mask.npy"), mask.numpy())
    np.save(os.path.join(work, "labels.npy"), labels.numpy())
    make_hf_data.write_trainable(wrapper, os.path.join(work, "trainable.txt"))
    print("GPT-2: %d layers, %d parameters; model.onnx %d bytes, model.onnx.data %d bytes" % (
        args.layers, sum(p.numel() for p in wrapper.parameters()), os.path.getsize(path),
        os.path.getsize(path + ".data")), flush=True)
    return path


def compile_all(args, model):
    bin_dir = os.path.join(args.build, "bin")
    print("\n%-9s %9s %9s %14s %14s  %s" % ("layout", "seconds", "peak MB", "plan bytes",
                                           "weights bytes", "predicted MB per device"))
    reports = {}
    for name, flags in LAYOUTS:
        if (args.only and name not in args.only) or (not args.only and name in OPTIONAL):
            continue
        plan = os.path.join(args.work, name + ".cdp")
        report = os.path.join(args.work, name + ".json")
        seconds, peak = timed(
            [os.path.join(bin_dir, "cdp-compile"), model, "-o", plan, "--optimizer", "sgd",
             "--momentum", "0.9", "--lr", "0.01", "--class-axis", "last", "--trainable-from",
             os.path.join(args.work, "trainable.txt"), "--report", report, "--steps", "2"]
            + flags)
        device_bytes = predicted_bytes(cdp_report.load(report))
        reports[name] = device_bytes
        print("%-9s %9.1f %9.0f %14d %14d  %s" % (
            name, seconds, peak / 2**20, os.path.getsize(plan),
            os.path.getsize(plan + ".weights"),
            " ".join("%.0f" % (b / 2**20) for b in device_bytes)), flush=True)
    return reports


def predicted_bytes(report):
    """Per device, what the report predicts cdp-run holds for it: its
    peak's resident_bytes (what it allocates at load, its optimizer state
    and the most its communicator holds at once: messages in flight,
    gradients in a reduction; or its live peak if that is more)."""
    return report["peak"]["resident_bytes"]


def feeds(work):
    out = []
    for name in ["input_ids", "attention_mask", "labels"]:
        out += ["--feed", "%s=%s" % (name, os.path.join(work, name + ".npy"))]
    return out


def same_parameters(a, b):
    """Whether two --dump-params folders hold the same bytes, and how many."""
    import numpy as np
    index = json.load(open(os.path.join(a, "index.json")))
    other = json.load(open(os.path.join(b, "index.json")))
    if sorted(index) != sorted(other):
        return False, len(index)
    equal = all(np.array_equal(np.load(os.path.join(a, index[k])),
                               np.load(os.path.join(b, other[k]))) for k in index)
    return equal, len(index)


def run_layout(args, name, predicted):
    """2 steps in one process and under mpirun -np 4: one table row per rank."""
    bin_dir = os.path.join(args.build, "bin")
    plan = os.path.join(args.work, name + ".cdp")
    alone = os.path.join(args.work, name + ".alone")
    ranks = os.path.join(args.work, name + ".ranks")
    seconds, peak = timed([os.path.join(bin_dir, "cdp-run"), plan, "--steps", "2",
                           "--progress-every", "0", "--dump-params", alone] + feeds(args.work))
    print("%-9s one process: %.1f s, peak %.0f MB" % (name, seconds, peak / 2**20), flush=True)
    root = ["--allow-run-as-root"] if os.getuid() == 0 else []
    stats = os.path.join(args.work, name + ".rank")
    report = os.path.join(args.work, name + ".measured.json")
    rank_command = ("exec /usr/bin/time -o %s.$OMPI_COMM_WORLD_RANK -f %%M %s %s --steps 2 "
                    "--progress-every 0 --dump-params %s --report %s %s" % (
                        stats, os.path.join(bin_dir, "cdp-run"), plan, ranks, report,
                        " ".join(feeds(args.work))))
    start = time.perf_counter()
    subprocess.run(["mpirun", *root, "--oversubscribe", "--mca", "btl", "self,tcp",
                    "--mca", "btl_tcp_if_include", "lo", "-np", "4", "sh", "-c", rank_command],
                   check=True, stdout=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    equal, count = same_parameters(alone, ranks)
    print("%-9s mpirun -np 4: %.1f s; %d trained parameters %s the one process's" % (
        name, elapsed, count, "bit-identical to" if equal else "DIFFER from"), flush=True)
    measured = cdp_report.load(report)
    read = measured["weights_read_bytes"]
    held = held_parameter_bytes(measured)
    for rank in range(4):
        resident = int(open("%s.%d" % (stats, rank)).read().split()[-1]) * 1024
        print("  rank %d: peak %6.0f MB, report %6.0f MB (%.2fx); weights read %5.0f MB, "
              "its stages' parameters %5.0f MB" % (
                  rank, resident / 2**20, predicted[rank] / 2**20, resident / predicted[rank],
                  read[rank] / 2**20, held[rank] / 2**20), flush=True)
    return equal


def activation_peaks(report):
    """Per device, the most activation bytes it holds at any time step."""
    return [max(t["devices"][d]["activation_bytes"] for t in report["time_steps"])
            for d in range(report["devices"])]


def recompute_check(args, model):
    """1f1b with and without --recompute layer: the report's activations
    and step time, and 2 steps in one process, parameters compared."""
    bin_dir = os.path.join(args.build, "bin")
    flags = ["--optimizer", "sgd", "--momentum", "0.9", "--lr", "0.01", "--class-axis", "last",
             "--trainable-from", os.path.join(args.work, "trainable.txt"), "--steps", "2",
             "--strategy", "1f1b", "--stages", "4", "--micro-batches", "4"]
    print("\n1f1b --stages 4 --micro-batches 4, activations at each device's peak (report):")
    dumps, reports = [], []
    for mode in ["none", "layer"]:
        plan = os.path.join(args.work, "1f1b-recompute-%s.cdp" % mode)
        report = os.path.join(args.work, "1f1b-recompute-%s.json" % mode)
        seconds, peak = timed([os.path.join(bin_dir, "cdp-compile"), model, "-o", plan,
                               "--report", report, "--recompute", mode] + flags)
        reports.append(cdp_report.load(report))
        dump = os.path.join(args.work, "1f1b-recompute-%s.params" % mode)
        run_seconds, run_peak = timed([os.path.join(bin_dir, "cdp-run"), plan, "--steps", "2",
                                       "--progress-every", "0", "--dump-params", dump]
                                      + feeds(args.work))
        dumps.append(dump)
        print("  --recompute %-5s activations MB %s; predicted step %.2f s; compile %.1f s; "
              "2 steps %.1f s, peak %.0f MB" % (
                  mode, " ".join("%.0f" % (b / 2**20) for b in activation_peaks(reports[-1])),
                  reports[-1]["predicted_step_ms"] / 1000, seconds, run_seconds,
                  run_peak / 2**20), flush=True)
    ratios = [a / b for a, b in zip(activation_peaks(reports[1]), activation_peaks(reports[0]))]
    equal, count = same_parameters(*dumps)
    print("  layer / none: %s (the aim: at most 0.5); %d trained parameters %s" % (
        " ".join("%.3f" % r for r in ratios), count,
        "bit-identical" if equal else "DIFFER"), flush=True)
    return equal and max(ratios) <= 0.5


def memory_bytes():
    """This machine's memory (MemTotal)."""
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def held_parameter_bytes(report):
    """Per device, the parameter bytes of the stages it runs: its stage for
    a pipeline, every stage for the data-parallel strategies."""
    stages = report["stage_param_bytes"]
    if "device_stages" in report:
        return [stages[s - 1] for s in report["device_stages"]]
    return [sum(stages)] * report["devices"]


def ensure_onnxruntime():
    """onnxruntime in this venv (pip, once): the independent runtime the
    saved model is checked with."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "onnxruntime"],
                       check=True)


def onnxruntime_check(args):
    """The model trained one step, saved with --save-onnx as external
    data, run by onnxruntime and by a cdp inference plan on the 8 rows:
    the largest logit difference."""
    ensure_onnxruntime()
    import numpy as np
    import onnxruntime
    bin_dir = os.path.join(args.build, "bin")
    work = args.work
    trained = os.path.join(work, "trained.onnx")
    outputs = os.path.join(work, "outputs")
    inputs = ["--feed", "input_ids=" + os.path.join(work, "input_ids.npy"),
              "--feed", "attention_mask=" + os.path.join(work, "attention_mask.npy")]
    for command in [
            [os.path.join(bin_dir, "cdp-run"), os.path.join(work, "single.cdp"), "--steps", "1",
             "--progress-every", "0", "--save-onnx", trained, "--save-onnx-external-data"]
            + feeds(work),
            [os.path.join(bin_dir, "cdp-compile"), trained, "--inference", "-o",
             os.path.join(work, "inference.cdp")],
            [os.path.join(bin_dir, "cdp-run"), os.path.join(work, "inference.cdp"),
             "--progress-every", "0", "--save-outputs", outputs] + inputs]:
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    index = json.load(open(os.path.join(outputs, "index.json")))
    cdp = np.load(os.path.join(outputs, index["logits"]))
    session = onnxruntime.InferenceSession(trained, providers=["CPUExecutionProvider"])
    ids = np.load(os.path.join(work, "input_ids.npy"))
    mask = np.load(os.path.join(work, "attention_mask.npy"))
    ort = np.concatenate([session.run(None, {"input_ids": ids[i:i + 1],
                                             "attention_mask": mask[i:i + 1]})[0]
                          for i in range(len(ids))])
    difference = float(np.abs(cdp.astype(np.float64) - ort).max())
    largest = float(np.abs(ort).max())
    print("\nsaved model (%d + %d bytes of external data) in onnxruntime %s: logits %s, "
          "largest difference from cdp-run's inference %.3g (largest logit %.3g)" % (
              os.path.getsize(trained), os.path.getsize(trained + ".data"),
              onnxruntime.__version__, "x".join(map(str, ort.shape)), difference, largest),
          flush=True)
    return difference <= 1e-5 * max(1.0, largest)


def main():
    make_hf_data.ensure_venv()
    import warnings
    warnings.filterwarnings("ignore")
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--work", default=os.path.join(HERE, "out", "gpt2-medium"))
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--skip-runs", action="store_true")
    parser.add_argument("--onnxruntime-only", action="store_true",
                        help="only the onnxruntime check of the saved model")
    parser.add_argument("--only", type=lambda s: s.split(","), default=[])
    args = parser.parse_args()
    args.build = os.path.abspath(args.build)
    os.makedirs(args.work, exist_ok=True)
    model = export(args, args.work)
    if args.onnxruntime_only:
        sys.exit(0 if onnxruntime_check(args) else 1)
    if args.only == ["recompute"]:
        sys.exit(0 if recompute_check(args, model) else 1)
    reports = compile_all(args, model)
    if args.skip_runs:
        return
    verdicts = []
    for name, _ in LAYOUTS:
        if name == "single" or name not in reports:
            continue
        if sum(reports[name]) > 0.9 * memory_bytes():
            print("%-9s not run: its 4 devices need %.1f GB by the report, this machine has "
                  "%.1f GB" % (name, sum(reports[name]) / 1e9, memory_bytes() / 1e9), flush=True)
            continue
        verdicts.append(run_layout(args, name, reports[name]))
    if not args.only or "recompute" in args.only:
        verdicts.append(recompute_check(args, model))
    if "single" in reports:
        verdicts.append(onnxruntime_check(args))
    sys.exit(0 if all(verdicts) else 1)


if __name__ == "__main__":
    main()
