#!/usr/bin/python3
"""Runs the commands of the user guide, so that no example drifts from what
the tools do.

Usage: guide_commands.py GUIDE.md BIN_DIR SRCROOT WORK

Every command of the guide's indented blocks (a line starting with
cdp-compile, cdp-run, cdp-opt, mpirun, ./scripts/ or python3, after an
optional '$ '; lines ending in a backslash joined) is either run here, in
WORK, after making the files the guide's text assumes (model.onnx: the
LeNet the demo trains; x.npy and friends: Fashion-MNIST-shaped tensors;
gpt2.onnx: the tiny GPT-2 of test/e2e/hf/data), or listed in ELSEWHERE
with where it runs or why it cannot run here. A guide command in neither,
a run that fails, or an error example that does not fail with the line the
guide shows below it, fails the test. Prints one line per command.
"""
import os
import re
import shutil
import subprocess
import sys

COMMAND = re.compile(r"^    (\$ )?((cdp-compile|cdp-run|cdp-opt|mpirun|python3) |\./scripts/)")

# Commands that run elsewhere or not at all, and why (the guide says so too).
ELSEWHERE = {
    "./scripts/demo.sh": "test/docs/demo-figures.test",
    "./scripts/test.sh": "the suite itself",
    "cdp-compile MODEL.onnx -o MODEL.cdp [training flags]": "a synopsis",
    "cdp-compile MODEL.onnx --inference -o MODEL.cdp": "a synopsis",
    "cdp-compile MODEL.onnx --emit=mlir|train-mlir": "a synopsis",
    "cdp-compile MODEL.onnx --strategy 2bw --emit=plan-text": "a synopsis",
    "cdp-compile MODEL.onnx @flags.txt -o MODEL.cdp": "a synopsis",
    "cdp-run MODEL.cdp (--data DIR|fashion-mnist [--epochs E] [--eval]": "a synopsis",
    "python3 test/Import/make_models.py mlp4eq mlp.onnx": "test/docs/guide-schedule.test",
    "cdp-compile mlp.onnx --strategy 1f1b --micro-batches 2 --stage-boundaries tanh1 "
    "--emit=schedule-csv -o 1f1b.csv": "test/docs/guide-schedule.test",
    "cdp-compile mlp.onnx --strategy 1f1b --micro-batches 2 --stage-boundaries tanh1 "
    "--schedule 1f1b.csv -o mlp.cdp": "test/docs/guide-schedule.test",
    "cdp-compile lenet.onnx -o lenet.cdp --optimizer momentum --backend cuda": "needs a GPU",
    "cdp-run lenet.cdp --data fashion-mnist --epochs 1 --eval": "needs a GPU (its plan is CUDA's)",
    "cdp-run lenet-cpu.cdp --backend cuda --data fashion-mnist": "needs a GPU",
}

# Run here, in this order (a later command reads what an earlier one wrote).
RUN_ORDER = [
    "cdp-compile gpt2.onnx -o gpt2.cdp --class-axis last --trainable-from trainable.txt --lr 0.1",
    "cdp-run gpt2.cdp --feed input_ids=ids.npy --feed attention_mask=mask.npy "
    "--feed labels=labels.npy --steps 100",
    "cdp-compile gpt2.onnx -o gpt2-1f1b.cdp --class-axis last --trainable-from trainable.txt "
    "--strategy 1f1b --stages 2 --micro-batches 2 --recompute layer --report gpt2-1f1b.json",
    "cdp-compile gpt2.onnx -o gpt2-bf16.cdp --class-axis last --trainable-from trainable.txt "
    "--lr 0.1 --precision bf16",
    "cdp-run gpt2-bf16.cdp --steps 3 --feed input_ids=ids.npy --feed attention_mask=mask.npy "
    "--feed labels=labels.npy",
    "cdp-compile gpt2.onnx -o gpt2-fp16.cdp --class-axis last --trainable-from trainable.txt "
    "--lr 0.1 --precision fp16",
    "cdp-run gpt2-fp16.cdp --steps 3 --feed input_ids=ids.npy --feed attention_mask=mask.npy "
    "--feed labels=labels.npy --dump-params fp16/",
    "cdp-compile gpt2.onnx -o gpt2-zero.cdp --strategy cdp --cdp-rule v1 --zero 3 --devices 4 "
    "--stages 4 --class-axis last --trainable-from trainable.txt --report gpt2-zero.json",
    "python3 -c \"import json; print(json.load(open('gpt2-zero.json'))['peak']['resident_bytes'])\"",
    "cdp-compile model.onnx -o model.cdp --optimizer momentum --lr 0.01",
    "cdp-run model.cdp --data fashion-mnist --epochs 1 --eval",
    "cdp-run model.cdp --feed input=x.npy --feed labels=y.npy --steps 100 "
    "--metrics m.jsonl --dump-params params/ --save-onnx trained.onnx",
    "cdp-run model.cdp --feed input=x.npy --feed labels=y.npy --steps 100 "
    "--eval-feed input=x_test.npy --eval-feed labels=y_test.npy --metrics m.jsonl",
    "cdp-run model.cdp --feed input=x.npy --feed labels=y.npy --steps 100 "
    "--save-onnx-eval trained-eval.onnx",
    "cdp-run model.cdp --feed input=shards/ --feed labels=labels_u8.npy "
    "--feed-scale 0.00392156862745098 --shuffle --partial-batch drop --steps 100",
    "cdp-compile model.onnx -o dp2.cdp --strategy dp --devices 2 --optimizer momentum",
    "cdp-run dp2.cdp --feed input=x.npy --feed labels=y.npy --steps 4 --portable-checkpoint state/",
    "cdp-compile model.onnx -o 1f1b.cdp --strategy 1f1b --stages 2 --micro-batches 2 "
    "--optimizer momentum --lr 0.005",
    "cdp-run 1f1b.cdp --feed input=x.npy --feed labels=y.npy --steps 8 --resume state/",
    "cdp-compile trained-eval.onnx --inference -o eval.cdp",
    "cdp-run eval.cdp --feed input=test.npy --save-outputs out/",
    "cdp-compile lenet.onnx --emit=mlir",
    "cdp-compile model.onnx --emit=mlir --print-param-data -o model.mlir",
    "cdp-opt model.mlir -canonicalize",
    "cdp-opt model.mlir --pass-pipeline='builtin.module(cdp-2bw{stages=2 micro-batches=4})'",
]

# Error examples: run in a folder of their own (their model.onnx is another
# model), each expected to fail with the line the guide shows.
ERROR_EXAMPLES = ["cdp-compile model.onnx --emit=mlir", "cdp-compile other.onnx --emit=mlir"]


def guide_commands(guide):
    """(command, the guide's next line) for every command of the guide."""
    lines = open(guide).read().split("\n")
    found, i = [], 0
    while i < len(lines):
        if not COMMAND.match(lines[i]):
            i += 1
            continue
        text = lines[i][4:]
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text[:-1].rstrip() + " " + lines[i].strip()
        text = text[2:] if text.startswith("$ ") else text
        text = re.sub(r"\s+#.*$", "", text).strip()  # a trailing comment
        following = lines[i + 1][4:] if i + 1 < len(lines) else ""
        found.append((text, following))
        i += 1
    return found


def make_files(srcroot, work, errors):
    """The files the guide's commands read, as its text describes them."""
    python = "/usr/bin/python3"
    subprocess.run([python, "-W", "ignore", os.path.join(srcroot, "test", "e2e",
                                                         "export_torch_models.py"), work,
                    "lenet"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    shutil.copy(os.path.join(work, "lenet.onnx"), os.path.join(work, "model.onnx"))
    hf = os.path.join(srcroot, "test", "e2e", "hf", "data", "gpt2-dynamo")
    for source, target in [("model.onnx", "gpt2.onnx"), ("model.onnx.data", "model.onnx.data"),
                           ("input_ids.npy", "ids.npy"),
                           ("attention_mask.npy", "mask.npy"), ("labels.npy", "labels.npy"),
                           ("trainable.txt", "trainable.txt")]:
        shutil.copy(os.path.join(hf, source), os.path.join(work, target))
    subprocess.run([python, "-c", """
import numpy as np, sys
g = np.random.default_rng(0)
for name, rows in [("x", 64), ("x_test", 37), ("test", 20)]:
    np.save(sys.argv[1] + "/" + name + ".npy", g.standard_normal((rows, 1, 28, 28)).astype(np.float32))
for name, rows in [("y", 64), ("y_test", 37)]:
    np.save(sys.argv[1] + "/" + name + ".npy", g.integers(0, 10, rows))
import os
os.makedirs(sys.argv[1] + "/shards")
for part, rows in [(0, 40), (1, 30)]:  # image bytes in two shards, 70 samples
    np.save(sys.argv[1] + "/shards/part-%d.npy" % part,
            g.integers(0, 256, (rows, 1, 28, 28)).astype(np.uint8))
np.save(sys.argv[1] + "/labels_u8.npy", g.integers(0, 10, 70).astype(np.uint8))
""", work], check=True)
    subprocess.run([python, "-c", """
import onnx, sys
from onnx import helper, TensorProto
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
          sys.argv[1] + "/model.onnx")
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
graph = helper.make_graph([helper.make_node("Hardmax", ["x"], ["y"])], "g", [x], [y])
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
          sys.argv[1] + "/other.onnx")
""", errors], check=True)


def run(command, bin_dir, cwd):
    tool = command.split()[0]
    # python3 lines read what a cdp tool wrote: run by this Python.
    full = (sys.executable if tool == "python3" else os.path.join(bin_dir, tool)) + \
        command[len(tool):]
    return subprocess.run(full, shell=True, cwd=cwd, capture_output=True, text=True)


def main():
    guide, bin_dir, srcroot, work = (os.path.abspath(a) for a in sys.argv[1:5])
    errors = os.path.join(work, "errors")
    os.makedirs(errors, exist_ok=True)
    found = guide_commands(guide)
    expected_error = {command: following for command, following in found
                      if command in ERROR_EXAMPLES}
    failed = False
    for command, _ in found:
        known = command in ELSEWHERE or command in RUN_ORDER or command in ERROR_EXAMPLES
        if not known:
            print("NOT COVERED: %s" % command)
            failed = True
        elif command in ELSEWHERE:
            print("elsewhere (%s): %s" % (ELSEWHERE[command], command))
    make_files(srcroot, work, errors)
    guide_set = {command for command, _ in found}
    for command in RUN_ORDER:
        if command not in guide_set:
            print("NOT IN THE GUIDE: %s" % command)
            failed = True
            continue
        result = run(command, bin_dir, work)
        print("%s: %s" % ("ran" if result.returncode == 0 else "FAILED", command))
        if result.returncode != 0:
            print(result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "")
            failed = True
    for command in ERROR_EXAMPLES:
        result = run(command, bin_dir, errors)
        want = expected_error.get(command, "")
        got = result.stderr.strip()
        ok = result.returncode != 0 and got == want
        print("%s: %s" % ("refused as shown" if ok else "NOT AS SHOWN", command))
        if not ok:
            print("  guide: %s\n  tools: %s" % (want, got))
            failed = True
    print("every guide command covered and run: %s" % ("no" if failed else "yes"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
