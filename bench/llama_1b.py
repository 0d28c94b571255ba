#!/usr/bin/env python3
"""A 1.3B-parameter Llama through cdp-compile: the compile's time and peak
memory against the model's weight bytes, and the report's time at 8 and
64 devices for every strategy.

Usage: bench/llama_1b.py [--build build] [--work bench/out/llama-1b]

Runs in bench/.venv-export (made on first use by
test/e2e/hf/make_hf_data.py's rules). A Llama-style config from
transformers (hidden 2048, 24 layers, 16 heads, MLP 5504, vocabulary
32000: 1.35B parameters), random init (seed 0), sequence 128, batch 1 with
an attention mask, exported by TorchScript at opset 17 in training mode and
saved with its initializers as ONNX external data in one file
(model.onnx + model.onnx.data).

Prints:
  - `cdp-compile -o` for single and for cdp --devices 8 --stages 8: seconds,
    peak memory (max RSS) and its ratio to the weight bytes (the aim: at
    most 1.5x + 1 GiB, under 3 minutes), the plan's and weights file's
    bytes;
  - `cdp-compile --report` alone (no plan written: the values are not
    read; best of 3) at 8 and 64 devices for dp, cdp (8 stages), gpipe, 1f1b, 2bw and
    zb-h1 (8 stages; 64 devices: 8 replicas): seconds (the aim: under a
    second) and the largest predicted bytes per device.

Not a test: it needs PyPI, ~25 GB of disk and minutes; docs/results.md
carries its figures.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "test", "e2e", "hf"))
sys.path.insert(0, HERE)
import make_hf_data  # noqa: E402  (the venv and the trainable-names recipe)
from gpt2_medium import timed  # noqa: E402

EXPORT = """
import json, sys, torch, transformers as T
sys.path.insert(0, sys.argv[2])
import make_hf_data
config = T.LlamaConfig(**json.loads(sys.argv[3]))
sequence, path = int(sys.argv[4]), sys.argv[5]
torch.manual_seed(0)
model = T.LlamaForCausalLM(config)
generator = torch.Generator().manual_seed(1)
ids = torch.randint(0, config.vocab_size, (1, sequence), generator=generator)
mask = torch.ones_like(ids)
wrapper = make_hf_data.Logits(model, ["input_ids", "attention_mask"])
make_hf_data.write_trainable(wrapper, sys.argv[1] + "/trainable.txt")
print("parameters", sum(p.numel() for p in wrapper.parameters()), flush=True)
make_hf_data.export(wrapper, ["input_ids", "attention_mask"], [ids, mask], "ts", path)
"""

# The 1.3B model's config.
CONFIG = dict(hidden_size=2048, intermediate_size=5504, num_hidden_layers=24,
              num_attention_heads=16, num_key_value_heads=16, vocab_size=32000,
              max_position_embeddings=512)


def export_llama(work, config, sequence, path):
    """Exports a random-init LlamaForCausalLM of `config` (transformers'
    LlamaConfig arguments), batch 1 of `sequence` tokens with a mask, by
    TorchScript at opset 17 in training mode to `path`, and writes
    work/trainable.txt (runs in the export venv)."""
    subprocess.run([sys.executable, "-c", EXPORT, work, os.path.join(ROOT, "test", "e2e", "hf"),
                    json.dumps(config), str(sequence), path], check=True)

# A separate process: torch's export leaves a file per tensor; one file of
# external data is how a user would ship it.
RESAVE = """
import sys, onnx
work = sys.argv[1]
model = onnx.load(work + "/export/model.onnx")
onnx.save_model(model, work + "/model.onnx", save_as_external_data=True,
                all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=1024)
"""


def export(work):
    path = os.path.join(work, "model.onnx")
    if os.path.exists(path):
        return path
    os.makedirs(os.path.join(work, "export"), exist_ok=True)
    export_llama(work, CONFIG, 128, os.path.join(work, "export", "model.onnx"))
    subprocess.run([sys.executable, "-c", RESAVE, work], check=True)
    subprocess.run(["rm", "-rf", os.path.join(work, "export")], check=True)
    return path


def main():
    make_hf_data.ensure_venv()
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--work", default=os.path.join(HERE, "out", "llama-1b"))
    parser.add_argument("--reports-only", action="store_true",
                        help="skip the two compiles that write plans")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    model = export(args.work)
    weights = os.path.getsize(model + ".data")
    print("Llama 1.3B: model.onnx %d bytes, model.onnx.data %d bytes" % (
        os.path.getsize(model), weights), flush=True)
    compile_command = [os.path.join(args.build, "bin", "cdp-compile"), model, "--optimizer",
                       "sgd", "--lr", "0.01", "--class-axis", "last", "--trainable-from",
                       os.path.join(args.work, "trainable.txt")]
    print("\n%-8s %9s %9s %12s %14s %14s" % ("layout", "seconds", "peak GB", "peak/weights",
                                            "plan bytes", "weights bytes"))
    for name, flags in [] if args.reports_only else [("single", []),
                        ("cdp-8", ["--strategy", "cdp", "--devices", "8", "--stages", "8"])]:
        plan = os.path.join(args.work, name + ".cdp")
        seconds, peak = timed(compile_command + ["-o", plan] + flags)
        print("%-8s %9.1f %9.2f %12.2f %14d %14d" % (
            name, seconds, peak / 1e9, peak / weights, os.path.getsize(plan),
            os.path.getsize(plan + ".weights")), flush=True)
    print("\n--report alone (the values unread), seconds and largest GB per device:")
    print("%-8s %18s %18s" % ("strategy", "8 devices", "64 devices"))
    report = os.path.join(args.work, "report.json")
    for strategy in ["dp", "cdp", "gpipe", "1f1b", "2bw", "zb-h1"]:
        cells = []
        for devices in [8, 64]:
            flags = ["--strategy", strategy]
            if strategy in ("dp", "cdp"):
                flags += ["--devices", str(devices)]
            if strategy != "dp":
                flags += ["--stages", "8"]
            if strategy not in ("dp", "cdp"):
                flags += ["--micro-batches", "8"]
                if devices > 8:
                    flags += ["--replicas", str(devices // 8)]
            seconds = min(timed(compile_command + flags + ["--report", report])[0]
                          for _ in range(3))
            largest = max(json.load(open(report))["peak"]["device_bytes"])
            cells.append("%6.2f s %6.2f GB" % (seconds, largest / 1e9))
        print("%-8s %18s %18s" % (strategy, cells[0], cells[1]), flush=True)


if __name__ == "__main__":
    main()
