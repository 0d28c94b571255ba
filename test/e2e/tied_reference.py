#!/usr/bin/python3
"""A weight tied across pipeline stages under 2bw and cdp-mp, against
PyTorch: the 4-layer MLP whose last Gemm reuses the first one's weight
(make_models.py mlp4tied), cut after every Tanh so the weight lives on
stages 1 and 4; M = 4 micro-batches per step, SGD with momentum 0.9. The
reference computes step t's gradients at W(max(t - 1, 0)) and applies them
to W(t) (W(t+1) = Opt(W(t), g(W(t-1)))), the tied weight's gradient being
the sum of both uses'. Parameters after 3 steps must match within 1e-5 +
1e-4 relative; the reference must differ from the synchronous one.

--clip X: each step's gradient (the tied weight's summed over its uses) is
clipped to a global norm of X by torch.nn.utils.clip_grad_norm_ before the
update, and the reference must clip at least once (2bw: the tied stage
sends its norm share before it takes the weight's new value).

Usage: tied_reference.py [--clip X] BIN_DIR WORK_DIR STRATEGY [M]
(cdp-mp with M = 5 gives every stage two devices: the owner's replicas each
send the new value to the other end's replicas.)

STRATEGY cdp-v2[-code]: CDP-v2 (timing or code table) for STEPS_V2 steps,
with --strategy cdp on M devices and cdp-mp with M micro-batches. Stage l of
micro-batch (i, t) reads W(t - d(i, l)); a micro-batch reads one version of
the tied weight, its owner's (stage 1): d(i, 1) on stage 4 too. Both must
match that reference within 1e-5 + 1e-4 relative and each other within
1e-6; the reference where stage 4 reads its own d(i, 4) must differ.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

import reference_cache

HERE = os.path.dirname(os.path.abspath(__file__))
MAKE_MODELS = os.path.join(HERE, "..", "Import", "make_models.py")
M, STEPS, STEPS_V2, LR, B = 4, 3, 6, 0.1, 2
CLIP = 0.0


def reference(table, into):
    """PyTorch's side (tied_torch.py) into `into`: the model, the batches,
    the reference parameters (final.npz) and facts.json: how far the
    reference is from the synchronous one (CDP-v2: from stage 4 reading its
    own version) and how many steps it clipped. `table`: CDP-v2's table, or
    None for the 1-stale rule."""
    import onnx
    import torch
    from onnx import numpy_helper
    import tied_torch as side
    side.M, side.CLIP = M, CLIP
    path = os.path.join(into, "tied.onnx")
    subprocess.run([sys.executable, MAKE_MODELS, "mlp4tied", path], check=True)
    start = {t.name: torch.tensor(numpy_helper.to_array(t).copy())
             for t in onnx.load(path).graph.initializer}
    rng = np.random.default_rng(0)
    rows = M * max(STEPS, STEPS_V2) * B
    x = torch.tensor(rng.standard_normal((rows, 16)).astype(np.float32))
    y = torch.tensor(rng.integers(0, 16, rows))
    np.save(os.path.join(into, "x.npy"), x.numpy())
    np.save(os.path.join(into, "y.npy"), y.numpy().astype(np.int64))
    facts = {}
    if table:
        delay = side.v2_delay(M, table)
        final = side.train_v2(start, x, y, delay, 1, STEPS_V2)
        own = side.train_v2(start, x, y, delay, 4, STEPS_V2)
        facts["gap"] = max(float((final[n] - own[n]).abs().max()) for n in final)
    else:
        synchronous = side.train(start, x, y, stale=False)
        side.CLIPPED[0] = 0
        final = side.train(start, x, y, stale=True)
        facts["gap"] = max(float((final[n] - synchronous[n]).abs().max()) for n in final)
        facts["clipped"] = side.CLIPPED[0]
    np.savez(os.path.join(into, "final.npz"),
             **{n: v.detach().numpy() for n, v in final.items()})
    with open(os.path.join(into, "facts.json"), "w") as f:
        json.dump(facts, f)


def run_plan(bin_dir, work, path, name, args, steps):
    plan = os.path.join(work, name + ".cdp")
    if CLIP:
        args = args + ["--clip-grad-norm", str(CLIP)]
    subprocess.run([os.path.join(bin_dir, "cdp-compile"), path, "-o", plan] + args
                   + ["--stage-boundaries", "tanh0,tanh1,tanh2", "--optimizer", "momentum",
                      "--lr", str(LR)], check=True)
    out = os.path.join(work, name)
    subprocess.run([os.path.join(bin_dir, "cdp-run"), plan, "--feed", "x=" + os.path.join(work, "x.npy"),
                    "--feed", "labels=" + os.path.join(work, "y.npy"), "--steps", str(steps),
                    "--dump-params", out], check=True, stdout=subprocess.DEVNULL)
    index = json.load(open(os.path.join(out, "index.json")))
    return {n: np.load(os.path.join(out, f)) for n, f in index.items()}


def check_v2(bin_dir, work, path, want, gap, table):
    steps = STEPS_V2
    failures = int(gap <= 1e-5)
    print("%s reading stage 4's own version differs by %.1e" % ("ok  " if gap > 1e-5 else "FAIL", gap))
    rule = ["--cdp-rule", "v2", "--v2-table", table]
    got = {"cdp": run_plan(bin_dir, work, path, "cdp", ["--strategy", "cdp", "--devices", str(M)] + rule, steps),
           "cdp-mp": run_plan(bin_dir, work, path, "cdp-mp",
                              ["--strategy", "cdp-mp", "--micro-batches", str(M)] + rule, steps)}
    for strategy, params in got.items():
        for n, w in want.items():
            ok = np.allclose(params[n], w, atol=1e-5, rtol=1e-4)
            failures += not ok
            print("%s %-6s %-3s max abs error %.2e" % ("ok  " if ok else "FAIL", strategy, n,
                                                      np.abs(params[n] - w).max()))
    apart = max(float(np.abs(got["cdp"][n] - got["cdp-mp"][n]).max()) for n in want)
    failures += apart > 1e-6
    print("%s cdp-mp and cdp %d steps apart by %.1e" % ("ok  " if apart <= 1e-6 else "FAIL", steps, apart))
    print("tied cdp-v2 %s M=%d: %s" % (table, M, "all match" if not failures else "%d mismatches" % failures))
    return 1 if failures else 0


def main():
    global M, CLIP
    argv = sys.argv[1:]
    if argv[:1] == ["--clip"]:
        CLIP = float(argv[1])
        argv = argv[2:]
    bin_dir, work, strategy = argv[:3]
    if len(argv) > 3:
        M = int(argv[3])
    os.makedirs(work, exist_ok=True)
    table = None
    if strategy.startswith("cdp-v2"):
        table = "code" if strategy.endswith("code") else "timing"
    # PyTorch's side once per content: the plain and the sanitized suites
    # reuse it (reference_cache.py).
    ref = reference_cache.entry(
        ("tied", table, M, CLIP),
        [os.path.abspath(__file__), os.path.join(HERE, "tied_torch.py"), MAKE_MODELS],
        lambda into: reference(table, into), os.path.join(work, "reference"))
    for name in ("tied.onnx", "x.npy", "y.npy"):
        shutil.copyfile(os.path.join(ref, name), os.path.join(work, name))
    path = os.path.join(work, "tied.onnx")
    facts = json.load(open(os.path.join(ref, "facts.json")))
    stored = np.load(os.path.join(ref, "final.npz"))
    final = {n: stored[n] for n in stored.files}
    if table:
        return check_v2(bin_dir, work, path, final, facts["gap"], table)
    gap = facts["gap"]
    print("%s reference differs from the synchronous one by %.1e" % ("ok  " if gap > 1e-4 else "FAIL", gap))
    count = ["--micro-batches", str(M)]
    if strategy == "cdp-mp":
        count += ["--cdp-rule", "v1"]  # the 1-stale rule the reference computes
    params = run_plan(bin_dir, work, path, "params", ["--strategy", strategy] + count, STEPS)
    failures = int(gap <= 1e-4)
    if CLIP:
        clipped = facts["clipped"]
        print("%s the reference clipped %d of %d steps" % ("ok  " if clipped else "FAIL", clipped, STEPS))
        failures += not clipped
    for n, want in final.items():
        got = params[n]
        ok = np.allclose(got, want, atol=1e-5, rtol=1e-4)
        failures += not ok
        print("%s %-3s max abs error %.2e" % ("ok  " if ok else "FAIL", n, np.abs(got - want).max()))
    print("tied %s M=%d: %s" % (strategy, M, "all match" if not failures else "%d mismatches" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
