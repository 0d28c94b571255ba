#!/usr/bin/python3
"""--strategy single --micro-batches M, and the synchronous pipelines
(gpipe, 1f1b, zb-h1: M micro-batches through S stages on S devices;
interleaved-1f1b: on S / 2 devices, two stages each; one update per step), against PyTorch's gradient accumulation: the update applies the
mean of the M micro-batches' gradients. 2bw against the same with 1-stale
gradients, W(t+1) = Opt(W(t), g(W(t-1))), steps 0 and 1 both at W(0).
Parameters after 3 steps must match within 1e-5 + 1e-4 relative. With
--clip X the step's gradient (2bw: its 1-stale one) is clipped to a global
norm of X by torch.nn.utils.clip_grad_norm_ before each update, and the
reference must clip at least once.

Usage: accumulate_reference.py [--clip X] BIN_DIR WORK_DIR [MODEL [STRATEGY [STAGES [M [R [CUTS]]]]]]
(M micro-batches per step and replica; the reference accumulates R x M.)
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference_cache  # noqa: E402

STEPS, LR = 3, 0.1


def reference(model_name, strategy, M, clip, into):
    """PyTorch's side, written to `into`: the export (model.onnx), the
    batches (x.npy, y.npy), the parameters after STEPS steps (final.npz)
    and reference.json (their names, how many steps clipped, 2bw's gap from
    the synchronous run)."""
    import torch
    import export_torch_models as models
    clipped = [0]
    model, example, _ = models.build(model_name)
    path = models.export(model_name, into)
    os.replace(path, os.path.join(into, "model.onnx"))
    path = os.path.join(into, "model.onnx")
    models.load_exported(model, path)
    batch = example.shape[0]
    torch.manual_seed(3)
    x = torch.randn(M * STEPS * batch, *example.shape[1:])
    y = torch.randint(0, 10, (M * STEPS * batch,))
    np.save(os.path.join(into, "x.npy"), x.numpy())
    np.save(os.path.join(into, "y.npy"), y.numpy().astype(np.int64))
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    def train(stale):
        model.load_state_dict(initial)
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
        params = list(model.parameters())
        versions = [[p.detach().clone() for p in params]]  # W(0), W(1), ...
        for t in range(STEPS):
            opt.zero_grad()
            latest = [p.detach().clone() for p in params]
            if stale:
                # 1-stale: step t's gradients are taken at W(max(t - 1, 0))
                # and applied to W(t): W(t+1) = Opt(W(t), g(W(t-1))).
                with torch.no_grad():
                    for p, v in zip(params, versions[max(t - 1, 0)]):
                        p.copy_(v)
            for k in range(M):
                rows = slice((t * M + k) * batch, (t * M + k + 1) * batch)
                (torch.nn.functional.cross_entropy(model(x[rows]), y[rows]) / M).backward()
            with torch.no_grad():
                for p, v in zip(params, latest):
                    p.copy_(v)
            if clip:
                clipped[0] += float(torch.nn.utils.clip_grad_norm_(params, clip)) > clip
            opt.step()
            versions.append([p.detach().clone() for p in params])
        return {n: p.detach().clone() for n, p in model.named_parameters()}

    if strategy == "2bw":
        synchronous = train(False)
        clipped[0] = 0
        final = train(True)
        gap = max((final[n] - synchronous[n]).abs().max().item() for n in final)
    else:
        final = train(False)
        gap = None
    np.savez(os.path.join(into, "final.npz"), **{n: p.numpy() for n, p in final.items()})
    with open(os.path.join(into, "reference.json"), "w") as f:
        json.dump({"names": list(final), "clipped": clipped[0], "gap": gap}, f)


def main():
    clip = 0.0
    if "--clip" in sys.argv:
        at = sys.argv.index("--clip")
        clip = float(sys.argv[at + 1])
        del sys.argv[at:at + 2]
    bin_dir, work = sys.argv[1:3]
    model_name = sys.argv[3] if len(sys.argv) > 3 else "lenet"
    strategy = sys.argv[4] if len(sys.argv) > 4 else "single"
    stages = int(sys.argv[5]) if len(sys.argv) > 5 else 4
    M = int(sys.argv[6]) if len(sys.argv) > 6 else 3
    # Replicas of the pipeline each run M micro-batches a step: the update
    # averages all R x M, like one device accumulating R x M.
    replicas = int(sys.argv[7]) if len(sys.argv) > 7 else 1
    # Pinned cuts (ONNX node names) instead of the cost model's.
    boundaries = sys.argv[8] if len(sys.argv) > 8 else ""
    per_replica = M
    M = M * replicas
    os.makedirs(work, exist_ok=True)
    # PyTorch's side (torch and the export) once per content: the plain and
    # the sanitized suites reuse it (reference_cache.py).
    key = ("accumulate", model_name, strategy, M, clip)
    ref = reference_cache.entry(
        key, [os.path.abspath(__file__), os.path.join(HERE, "export_torch_models.py")],
        lambda into: reference(model_name, strategy, M, clip, into),
        os.path.join(work, "reference"))
    path = os.path.join(work, "model.onnx")
    for name in ("model.onnx", "x.npy", "y.npy"):
        shutil.copyfile(os.path.join(ref, name), os.path.join(work, name))
    facts = json.load(open(os.path.join(ref, "reference.json")))
    stored = np.load(os.path.join(ref, "final.npz"))
    final = {name: stored[name] for name in facts["names"]}
    clipped = [facts["clipped"]]
    if facts["gap"] is not None:
        print("2bw reference differs from the synchronous one by %.1e" % facts["gap"])
    plan = os.path.join(work, "plan.cdp")
    pipeline = []
    if strategy != "single":
        # interleaved-1f1b (by --stages-per-device) and zb-v: two stages per device.
        per_device = 2 if strategy in ("interleaved-1f1b", "zb-v") else 1
        pipeline = ["--strategy", strategy, "--stages", str(stages), "--devices",
                    str(stages // per_device * replicas), "--replicas", str(replicas)]
        if strategy == "interleaved-1f1b":
            pipeline += ["--stages-per-device", str(per_device)]
        if boundaries:
            pipeline += ["--stage-boundaries", boundaries]
    subprocess.run([os.path.join(bin_dir, "cdp-compile"), path, "-o", plan, "--micro-batches",
                    str(per_replica), "--optimizer", "momentum", "--lr", str(LR)] + pipeline +
                   (["--clip-grad-norm", str(clip)] if clip else []),
                   check=True)
    subprocess.run([os.path.join(bin_dir, "cdp-run"), plan, "--feed",
                    "input=" + os.path.join(work, "x.npy"), "--feed",
                    "labels=" + os.path.join(work, "y.npy"), "--steps", str(STEPS),
                    "--dump-params", os.path.join(work, "params")], check=True,
                   stdout=subprocess.DEVNULL)
    index = json.load(open(os.path.join(work, "params", "index.json")))
    failures = 0
    for name, p in final.items():
        got = np.load(os.path.join(work, "params", index[name]))
        ok = np.allclose(got, p, atol=1e-5, rtol=1e-4)
        failures += not ok
        print("%s %-14s max abs error %.2e" % ("ok  " if ok else "FAIL", name,
                                               np.abs(got - p).max()))
    label = "accumulate" if strategy == "single" else "%s S=%d" % (strategy, stages)
    if replicas > 1:
        label += " R=%d" % replicas
    if boundaries:
        label += " pinned"
    if clip:
        print("%s the reference clipped %d of %d steps" % ("ok  " if clipped[0] else "FAIL",
                                                           clipped[0], STEPS))
        failures += not clipped[0]
        label += " clip"
    print("%s %s M=%d: %s" % (label, model_name, M, "all match" if not failures else "%d mismatches" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
