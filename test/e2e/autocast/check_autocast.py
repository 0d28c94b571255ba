#!/usr/bin/python3
"""Trains models with `cdp-compile --precision bf16` and compares with
PyTorch's autocast.

Usage: check_autocast.py CDP_BIN_DIR WORK_DIR CASE [CASE ...] [--strategies] [--fp16]

A CASE is an e2e model of data/ (mlp, lenet, resnet, transformer) or a
transformer of ../hf/data (gpt2-ts, llama-ts, bert-ts, vit-ts), each with
the autocast.npz make_autocast_data.py made: PyTorch's parameters after 3
SGD steps under torch.autocast with the GPU's op lists (`bf16/NAME`) and in
float32 (`f32/NAME`). cdp trains the same steps with --precision bf16 and
without. Distances are L2 over every parameter's elements together; A is
autocast's own effect, |torch bf16 - torch f32|. Two checks:

  near:   |cdp bf16 - torch bf16| <= the case's bound x A
  rounds: |cdp bf16 - cdp f32|   >= 0.25 x A  (bf16 really applied)

The bound, for the e2e models, whose exports keep every op autocast sees:
0.05, or twice PyTorch's own spread (the distance its bf16 run moves with
its native convolutions instead of oneDNN's, autocast.npz's `spread`) where
that is larger: the ResNet's batch norms carry one changed rounding to a
whole channel, so two correct implementations differ by half the effect
there. For the transformers: 1.0, as their eager code casts where their
float32 exports cannot show it (Llama's rotary tables and RMSNorm are cast
to the input's type), so the two runs round at some different points and
agree to the spread of bf16 rounding. (A float32 run also lies within 1.0 x
A of torch's bf16 run, hence the second check.) With --strategies, each
case's bf16 run is also repeated as `1f1b --stages 2` (one micro-batch)
and as `cdp --devices 1`, which compute the same sums in the same order:
their parameters must equal the single device's bit for bit (the roundings
survive partitioning, stage sends and the strategies' updates); and GPT-2
runs 2 steps of two micro-batches as dp on 2 devices, with ZeRO 1, 2 and 3,
as 1f1b and zb-h1 on 2 stages, which must all equal dp's bit for bit (the
rounded weight copies read from gathered shards, the stage gradients
accumulated over micro-batches). With --fp16, `--precision fp16` against
fp16 autocast with GradScaler instead (autocast16.npz; see check_fp16),
and with --strategies dp on 2 devices against the single device with 2
micro-batches. One line per check; exits 1 on a failure.
"""

import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "hf"))
import check_hf  # noqa: E402

E2E_BOUND = 0.05
HF_BOUND = 1.0
ROUNDS = 0.25
# Two micro-batches a step, summed the same way by each.
SAME_AS_DP = [("dp2-zero1", ["--strategy", "dp", "--devices", "2", "--zero", "1"]),
              ("dp2-zero2", ["--strategy", "dp", "--devices", "2", "--zero", "2"]),
              ("dp2-zero3", ["--strategy", "dp", "--devices", "2", "--zero", "3"]),
              ("1f1b-2x2", ["--strategy", "1f1b", "--stages", "2", "--micro-batches", "2"]),
              ("zb-h1-2x2", ["--strategy", "zb-h1", "--stages", "2", "--micro-batches", "2"])]
# fp16 on 2 stages of 2 micro-batches (the stages exchange their overflow
# flags) and dp on 2 devices with ZeRO (stages 2 and 3: the devices sum
# their shards' flags), so all skip alike; 1f1b with GradScaler's defaults
# and forced overflows, the rest forced.
FP16_SAME = [("1f1b-2x2", ["--strategy", "1f1b", "--stages", "2", "--micro-batches", "2"], True),
             ("gpipe-2x2", ["--strategy", "gpipe", "--stages", "2", "--micro-batches", "2"],
              False),
             ("zb-h1-2x2", ["--strategy", "zb-h1", "--stages", "2", "--micro-batches", "2"],
              False)] + [
    ("dp2-zero%d" % z, ["--strategy", "dp", "--devices", "2", "--zero", str(z)], False)
    for z in (1, 2, 3)]
STRATEGIES = [("1f1b2", ["--strategy", "1f1b", "--stages", "2", "--micro-batches", "1"]),
              ("cdp1", ["--strategy", "cdp", "--devices", "1"])]


def run_e2e(bin_dir, name, work, flags):
    folder = os.path.join(HERE, "data", name)
    plan = os.path.join(work, "plan.cdp")
    extra = {"transformer": ["--batch-axis", "input=1"],
             "mlp": ["--batch-size", "8"]}.get(name, [])
    check_hf.run([os.path.join(bin_dir, "cdp-compile"), os.path.join(folder, "model.onnx"),
                  "-o", plan, "--optimizer", "sgd", "--lr", "0.1"] + extra + flags)
    dump = os.path.join(work, "params")
    check_hf.run([os.path.join(bin_dir, "cdp-run"), plan, "--steps", "3",
                  "--feed", "input=" + os.path.join(folder, "x.npy"),
                  "--feed", "labels=" + os.path.join(folder, "y.npy"),
                  "--dump-params", dump])
    index = json.load(open(os.path.join(dump, "index.json")))
    return {k: np.load(os.path.join(dump, v)).astype(np.float64) for k, v in index.items()}


def run_case(bin_dir, case, work, flags):
    if os.path.isdir(os.path.join(HERE, "data", case)):
        return run_e2e(bin_dir, case, work, flags)
    folder = os.path.join(check_hf.HERE, "data", case)
    return check_hf.by_torch_name(check_hf.train(bin_dir, folder, work, flags, 3), folder)


def check_same_as_dp(bin_dir, root, case):
    """GPT-2's bf16 step of two micro-batches under dp, ZeRO and the
    pipelines: bit for bit dp's."""
    def train(label, flags, precision="bf16"):
        work = os.path.join(root, case, label)
        os.makedirs(work, exist_ok=True)
        folder = os.path.join(check_hf.HERE, "data", case)
        return check_hf.train(bin_dir, folder, work, ["--precision", precision] + flags, 2)
    dp = train("dp2", ["--strategy", "dp", "--devices", "2"])
    fp32 = train("dp2-fp32", ["--strategy", "dp", "--devices", "2"], "fp32")
    ok = any(not np.array_equal(fp32[n], dp[n]) for n in dp)
    print("%s %s bf16 dp2: %s dp's float32 run" % ("ok  " if ok else "FAIL", case,
                                                 "differs from" if ok else "equal to"))
    for label, flags in SAME_AS_DP:
        other = train(label, flags)
        same = set(other) == set(dp) and all(np.array_equal(other[n], dp[n]) for n in dp)
        print("%s %s bf16 %s: %s dp's" % ("ok  " if same else "FAIL", case, label,
                                         "equal to" if same else "differs from"), flush=True)
        ok &= same
    return ok


def train_all(bin_dir, root, case, names, labelled):
    """cdp's parameters after each (label, flags) run, or None (and a FAIL
    line) where the first run lacks one of `names`."""
    runs = {}
    for label, flags in labelled:
        work = os.path.join(root, case, label)
        os.makedirs(work, exist_ok=True)
        runs[label] = run_case(bin_dir, case, work, flags)
    missing = [n for n in names if n not in runs[labelled[0][0]]]
    if missing:
        print("FAIL %s: cdp trained no %s" % (case, missing[:3]))
        return None
    return runs


def check(bin_dir, root, case, strategies):
    e2e = os.path.isdir(os.path.join(HERE, "data", case))
    folder = os.path.join(HERE if e2e else check_hf.HERE, "data", case)
    ref = np.load(os.path.join(folder, "autocast.npz"))
    names = [k.split("/", 1)[1] for k in ref.files if k.startswith("bf16/")]
    runs = train_all(bin_dir, root, case, names,
                     (("bf16", ["--precision", "bf16"]), ("f32", [])))
    if not runs:
        return False

    def distance(a, b):
        return np.sqrt(sum(((a(n) - b(n)) ** 2).sum() for n in names))
    effect = distance(lambda n: ref["bf16/" + n], lambda n: ref["f32/" + n])
    near = distance(lambda n: runs["bf16"][n], lambda n: ref["bf16/" + n]) / effect
    rounds = distance(lambda n: runs["bf16"][n], lambda n: runs["f32"][n]) / effect
    bound = max(E2E_BOUND, 2 * float(ref["spread"]) / effect) if e2e else HF_BOUND
    if strategies:
        for label, flags in STRATEGIES:
            work = os.path.join(root, case, label)
            os.makedirs(work, exist_ok=True)
            other = run_case(bin_dir, case, work, ["--precision", "bf16"] + flags)
            same = all(np.array_equal(other[n], runs["bf16"][n]) for n in names)
            print("%s %s bf16 %s: %s the single device's" % (
                "ok  " if same else "FAIL", case, label,
                "equal to" if same else "differs from"), flush=True)
            if not same:
                return False
        if case == "gpt2-ts" and not check_same_as_dp(bin_dir, root, case):
            return False
    ok = near <= bound and rounds >= ROUNDS
    print("%s %s bf16: %.3g x autocast's effect from torch bf16 (<= %g); "
          "%.3g x from cdp float32 (>= %g); effect %.3g" % (
              "ok  " if ok else "FAIL", case, near, bound, rounds, ROUNDS, effect),
          flush=True)
    return ok


def check_fp16_dp(bin_dir, root, case, names, forced):
    """dp on 2 devices and the layouts of FP16_SAME against the
    single device with 2 micro-batches (the same halves of the batch, the
    same mean): with GradScaler's defaults and forced overflows, the trained
    parameters and the loss-scale buffer bit for bit. dp unscales the
    reduced means and the pipeline stages exchange their overflow flags, so
    every device skips the same steps."""
    ok = True
    for label, extra in (("", []), (" forced", ["--loss-scale", repr(forced),
                                                "--loss-scale-interval", "1"])):
        suffix = label.strip()
        labelled = [("single-mb2" + suffix, ["--micro-batches", "2"]),
                    ("dp2" + suffix, ["--strategy", "dp", "--devices", "2"])]
        labelled += [(name + suffix, flags) for name, flags, unforced in FP16_SAME
                     if unforced or suffix]
        runs = train_all(bin_dir, root, case, names, [
            (run, ["--precision", "fp16"] + flags + extra) for run, flags in labelled])
        if not runs:
            return False
        # The trained parameters and the loss scale (BatchNorm's running
        # statistics differ: each dp device keeps its own micro-batch's).
        one = runs.pop("single-mb2" + suffix)
        for run, two in runs.items():
            same = all(np.array_equal(one[n], two[n]) for n in names + ["cdp.loss_scale"])
            print("%s %s fp16%s %s: %s single with 2 micro-batches (loss scale %g)" % (
                "ok  " if same else "FAIL", case, label, run[:-len(suffix)] if suffix else run,
                "equal to" if same else "differs from", two["cdp.loss_scale"][0]), flush=True)
            ok &= same
    return ok


def check_fp16(bin_dir, root, case, dp=False):
    """--precision fp16 against fp16 autocast with GradScaler
    (autocast16.npz): the parameters near PyTorch's as for bf16, and the
    loss scale after the steps equal to GradScaler's. Then the forced
    overflows: from the smallest power of two whose first step overflows,
    growth interval 1, cdp must skip the steps PyTorch skips (its
    parameters land on PyTorch's, and its scale ends where GradScaler's
    does)."""
    e2e = os.path.isdir(os.path.join(HERE, "data", case))
    folder = os.path.join(HERE if e2e else check_hf.HERE, "data", case)
    ref = np.load(os.path.join(folder, "autocast16.npz"))
    f32 = np.load(os.path.join(folder, "autocast.npz"))
    names = [k.split("/", 1)[1] for k in ref.files if k.startswith("f16/")]
    forced = float(ref["forced_init"])
    runs = train_all(bin_dir, root, case, names,
                     (("fp16", ["--precision", "fp16"]), ("f32", []),
                      ("forced", ["--precision", "fp16", "--loss-scale", repr(forced),
                                  "--loss-scale-interval", "1"])))
    if not runs:
        return False

    def distance(a, b):
        return np.sqrt(sum(((a(n) - b(n)) ** 2).sum() for n in names))
    effect = distance(lambda n: ref["f16/" + n], lambda n: f32["f32/" + n])
    bound = max(E2E_BOUND, 2 * float(ref["spread"]) / effect) if e2e else HF_BOUND
    ok = True
    for label, key, scales in (("fp16", "f16", ref["f16scale"]),
                               ("forced", "forced", ref["forcedscale"])):
        near = distance(lambda n: runs[label][n], lambda n: ref[key + "/" + n]) / effect
        scale = runs[label]["cdp.loss_scale"][0]
        good = near <= bound and scale == scales[-1]
        print("%s %s %s: %.3g x autocast's effect from torch fp16 (<= %g); loss scale %g "
              "(GradScaler's %g; after each step %s)" % (
                  "ok  " if good else "FAIL", case, label, near, bound, scale, scales[-1],
                  ", ".join("%g" % v for v in scales)), flush=True)
        ok &= good
    if dp:
        ok &= check_fp16_dp(bin_dir, root, case, names, forced)
    rounds = distance(lambda n: runs["fp16"][n], lambda n: runs["f32"][n]) / effect
    skipped = distance(lambda n: runs["forced"][n], lambda n: runs["fp16"][n]) / effect
    good = rounds >= ROUNDS and skipped >= ROUNDS
    print("%s %s fp16: %.3g x the effect from cdp float32 (>= %g); the forced run %.3g x "
          "from the unforced (>= %g); effect %.3g" % (
              "ok  " if good else "FAIL", case, rounds, ROUNDS, skipped, ROUNDS, effect),
          flush=True)
    return ok and good


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    strategies = "--strategies" in sys.argv
    fp16 = "--fp16" in sys.argv
    bin_dir, root, cases = args[0], args[1], args[2:]
    passed = 0
    for case in cases:
        try:
            if fp16:
                passed += check_fp16(bin_dir, root, case, "--strategies" in sys.argv)
                continue
            passed += check(bin_dir, root, case, strategies)
        except RuntimeError as error:
            print("FAIL %s: %s" % (case, error))
    print("%d of %d models match" % (passed, len(cases)))
    sys.exit(0 if passed == len(cases) else 1)


if __name__ == "__main__":
    main()
