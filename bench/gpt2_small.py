#!/usr/bin/env python3
"""GPT-2 small (124M parameters) through cdp: compile cost and one step
against PyTorch.

Usage: bench/gpt2_small.py [--build build] [--work bench/out/gpt2-small]
                           [--seq 128] [--layers 12]

Runs in bench/.venv-export (made on first use by
test/e2e/hf/make_hf_data.py's rules: torch, transformers, onnx, onnxscript
from PyPI). GPT-2 small's real config (12 layers, d = 768, 12 heads,
vocabulary 50257), random init (seed 0), dropout 0, batch 1, sequence 128
with an attention mask, exported as the user guide says (TorchScript,
opset 17, training mode, no constant folding). Prints:

  - the compile: seconds and peak memory of `cdp-compile` (its max RSS), the
    plan's bytes;
  - one SGD step: cdp's loss against PyTorch's (float32 and float64), and
    for every parameter the distance of cdp's gradient from PyTorch float64's
    over PyTorch float32's own (the worst named); the check passes when it
    is at most 10 (floor: 1e-6 of the parameter's largest gradient).

Not a test: it needs PyPI and minutes; docs/results.md carries its figures.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "test", "e2e", "hf"))
import make_hf_data  # noqa: E402  (the venv and the trainable-names recipe)


def export(args, work):
    import torch
    import transformers as T
    torch.manual_seed(0)
    config = T.GPT2Config(n_layer=args.layers, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
    model = T.GPT2LMHeadModel(config)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, config.vocab_size, (1, args.seq), generator=generator)
    mask = torch.ones_like(ids)
    mask[0, -8:] = 0
    labels = make_hf_data.next_token_labels(ids, mask)
    wrapper = make_hf_data.Logits(model, ["input_ids", "attention_mask"])
    path = os.path.join(work, "model.onnx")
    if not os.path.exists(path):
        make_hf_data.export(wrapper, ["input_ids", "attention_mask"], [ids, mask], "ts", path)
    import numpy as np
    np.save(os.path.join(work, "input_ids.npy"), ids.numpy())
    np.save(os.path.join(work, "attention_mask.npy"), mask.numpy())
    np.save(os.path.join(work, "labels.npy"), labels.numpy())
    make_hf_data.write_trainable(wrapper, os.path.join(work, "trainable.txt"))
    parameters = sum(p.numel() for p in wrapper.parameters())
    return wrapper, [ids, mask], labels, parameters


def timed(command):
    """Seconds and peak RSS (bytes) of a child command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.time()
    result = subprocess.run(command, capture_output=True, text=True)
    seconds = time.time() - start
    if result.returncode != 0:
        sys.exit("%s failed: %s" % (os.path.basename(command[0]), result.stderr.strip()))
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return seconds, max(peak, before) * 1024, result


def torch_step(wrapper, inputs, labels, dtype):
    import copy
    import torch
    model = copy.deepcopy(wrapper).to(dtype)
    model.train()
    loss = make_hf_data.loss_of(model(*inputs), labels)
    loss.backward()
    return loss.item(), {n: p.grad.double().numpy() for n, p in model.named_parameters()}


def main():
    make_hf_data.ensure_venv()
    import warnings
    warnings.filterwarnings("ignore")
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--work", default=os.path.join(HERE, "out", "gpt2-small"))
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--layers", type=int, default=12)
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    import numpy as np
    wrapper, inputs, labels, parameters = export(args, args.work)
    bin_dir = os.path.join(args.build, "bin")
    plan = os.path.join(args.work, "plan.cdp")
    seconds, peak, _ = timed([os.path.join(bin_dir, "cdp-compile"),
                              os.path.join(args.work, "model.onnx"), "-o", plan,
                              "--optimizer", "sgd", "--lr", "0.1", "--class-axis", "last",
                              "--trainable-from", os.path.join(args.work, "trainable.txt")])
    print("GPT-2 small: %d parameters, ONNX %d bytes" % (
        parameters, os.path.getsize(os.path.join(args.work, "model.onnx"))))
    print("compile: %.1f s, peak memory %.2f GB, plan %d bytes" % (
        seconds, peak / 1e9, os.path.getsize(plan)))
    grads = os.path.join(args.work, "grads")
    metrics = os.path.join(args.work, "metrics.jsonl")
    feeds = []
    for name in ["input_ids", "attention_mask", "labels"]:
        feeds += ["--feed", "%s=%s" % (name, os.path.join(args.work, name + ".npy"))]
    step_seconds, step_peak, _ = timed(
        [os.path.join(bin_dir, "cdp-run"), plan, "--steps", "1", "--dump-grads", grads,
         "--metrics", metrics] + feeds)
    cdp_loss = json.loads(open(metrics).readline())["loss"]
    index = json.load(open(os.path.join(grads, "index.json")))
    cdp = {k: np.load(os.path.join(grads, v)).astype(np.float64) for k, v in index.items()}
    import torch
    loss32, g32 = torch_step(wrapper, inputs, labels, torch.float32)
    loss64, g64 = torch_step(wrapper, inputs, labels, torch.float64)
    print("one step: cdp-run %.1f s (peak %.2f GB); loss cdp %.7f, torch float32 %.7f, "
          "float64 %.7f" % (step_seconds, step_peak / 1e9, cdp_loss, loss32, loss64))
    worst, missing = (0.0, ""), sorted(set(g64) - set(cdp))
    for name in g64:
        if name not in cdp:
            continue
        scale = np.abs(g64[name]).max()
        allowed = 10 * max(np.abs(g32[name] - g64[name]).max(), 1e-6 * scale, 1e-12)
        worst = max(worst, (np.abs(cdp[name] - g64[name]).max() / allowed, name))
    print("gradients: %d of %d parameters, worst at %.3g of the allowed distance (%s)%s" % (
        len(g64) - len(missing), len(g64), worst[0], worst[1],
        "; missing " + ", ".join(missing[:3]) if missing else ""))
    ok = worst[0] <= 1.0 and not missing and abs(cdp_loss - loss64) <= 10 * max(
        abs(loss32 - loss64), 1e-6 * abs(loss64))
    print("GPT-2 small one step equals PyTorch's: %s" % ("yes" if ok else "NO"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
