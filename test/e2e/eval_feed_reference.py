#!/usr/bin/python3
"""Held-out evaluation from .npy data against PyTorch.

Usage: eval_feed_reference.py CDP_BIN_DIR WORK_DIR MODEL
MODEL is export_torch_models.py's mlp or lenet. cdp trains it 5 steps on a
fixed training set under single (2 micro-batches), dp (2 devices) and 1f1b
(2 stages, 2 micro-batches), with --eval-feed giving 37 held-out samples;
PyTorch then evaluates cdp's trained parameters (--dump-params) on the
same held-out samples: the mean cross-entropy (eval mode) must equal the
test_loss of cdp's last --metrics line to 1e-5 and the accuracy exactly.
Prints one line per strategy; exits 1 on a mismatch.
"""

import json
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_torch_models as models  # noqa: E402

ATOL = 1e-5
STRATEGIES = {
    "single": ["--micro-batches", "2"],
    "dp": ["--strategy", "dp", "--devices", "2"],
    "1f1b": ["--strategy", "1f1b", "--stages", "2", "--micro-batches", "2"],
    # Device 0's evaluation stream packs its tensors by its own lifetimes,
    # over the memory its training stages use.
    "zb-h1": ["--strategy", "zb-h1", "--stages", "2", "--micro-batches", "2"],
    "interleaved-1f1b": ["--strategy", "interleaved-1f1b", "--stages", "4", "--devices", "2",
                         "--micro-batches", "2"],
}


def main():
    bin_dir, work, name = sys.argv[1], sys.argv[2], sys.argv[3]
    held_out = int(sys.argv[4]) if len(sys.argv) > 4 else 37  # 1001: results.md
    os.makedirs(work, exist_ok=True)
    path = models.export(name, work)
    model, example, dynamic = models.build(name)
    batch = ["--batch-size", "8"] if dynamic else []  # the others export batch 8
    shape = list(example.shape[1:])
    rng = np.random.default_rng(0)
    files = {}
    # 37 held-out samples: four batches of 8 and a last one of 5, padded and
    # masked.
    for split, count in [("train", 64), ("test", held_out)]:
        files[split + "_x"] = os.path.join(work, split + "_x.npy")
        files[split + "_y"] = os.path.join(work, split + "_y.npy")
        np.save(files[split + "_x"], rng.standard_normal([count] + shape).astype(np.float32))
        np.save(files[split + "_y"], rng.integers(0, 10, count))
    ok = True
    for strategy, flags in STRATEGIES.items():
        plan = os.path.join(work, strategy + ".cdp")
        metrics = os.path.join(work, strategy + ".jsonl")
        params = os.path.join(work, strategy + "-params")
        subprocess.run([os.path.join(bin_dir, "cdp-compile"), path, "-o", plan, "--lr", "0.05"]
                       + batch + flags, check=True)
        subprocess.run([os.path.join(bin_dir, "cdp-run"), plan,
                        "--feed", "input=" + files["train_x"],
                        "--feed", "labels=" + files["train_y"], "--steps", "5",
                        "--eval-feed", "input=" + files["test_x"],
                        "--eval-feed", "labels=" + files["test_y"],
                        "--metrics", metrics, "--dump-params", params],
                       check=True, stdout=subprocess.DEVNULL)
        last = [json.loads(line) for line in open(metrics)][-1]
        index = json.load(open(os.path.join(params, "index.json")))
        state = model.state_dict()
        for key in state:
            state[key] = torch.from_numpy(np.load(os.path.join(params, index[key])))
        model.load_state_dict(state)
        model.eval()
        with torch.no_grad():
            logits = model(torch.from_numpy(np.load(files["test_x"])))
            labels = torch.from_numpy(np.load(files["test_y"]))
            loss = torch.nn.functional.cross_entropy(logits, labels).item()
            accuracy = (logits.argmax(1) == labels).float().mean().item()
        # The accuracy exactly: the same number of correct samples (torch's
        # mean is a float32 of 5/37, cdp's a double).
        count = len(labels)
        good = (abs(last["test_loss"] - loss) <= ATOL and
                round(last["accuracy"] * count) == round(accuracy * count))
        ok &= good
        print("%s %-16s test loss %.6f (torch %.6f), accuracy %.4f (torch %.4f)"
              % ("ok  " if good else "FAIL", strategy, last["test_loss"], loss,
                 last["accuracy"], accuracy))
    print("%s: %s" % (name, "all match" if ok else "MISMATCH"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
