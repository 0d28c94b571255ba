#!/usr/bin/python3
"""laysa's step as a time-step table (docs/strategies/laysa.md).

Usage: scripts/laysa_table.py MODEL.onnx [cdp-compile flags...]
Compiles MODEL with `--strategy laysa` and the given flags to the schedule
IR (`--emit=sched-mlir`) and prints one Markdown row per time step of device
0's program (every device runs the same one, in lock-step): the compute
(F2, B3 with the absorb of its gradients into the mirror), the stage whose
selection is sent, the stage whose mean is applied, and the stages whose
gradients and communication buffers are live.
"""
import re
import subprocess
import sys


def program(text):
    ops = []
    for line in text.splitlines():
        if "sched.slot_device" in line and ops:
            break  # device 0 only
        op = re.search(r"sched\.(\w+) (?:attributes )?\{(.*)\}", line)
        if op and op.group(1) in ("slot_compute", "absorb_gradients", "sparse_send", "sparse_apply"):
            ops.append((op.group(1), dict(re.findall(r"(\w+) = (#sched.work<\w+>|\w+)", op.group(2)))))
    return ops


def main():
    model, flags = sys.argv[1], sys.argv[2:]
    text = subprocess.run(["cdp-compile", model, "--strategy", "laysa", "--emit=sched-mlir", "-o", "-"]
                          + flags, check=True, capture_output=True, text=True).stdout
    cycle = int(re.search(r"cycle = (\d+)", text).group(1))
    rows = {t: {"compute": [], "send": [], "apply": []} for t in range(cycle)}
    absorbed, sent, applied = {}, {}, {}
    for name, a in program(text):
        t, l = int(a["time_step"]), a["stage"]
        if name == "slot_compute":
            rows[t]["compute"].append(("F" if "forward" in a["kind"] else "B") + l)
        elif name == "absorb_gradients":
            rows[t]["compute"][-1] += " → M" + l
            absorbed[l] = t
        elif name == "sparse_send":
            rows[t]["send"].append(l)
            sent[l] = t
        elif name == "sparse_apply":
            rows[t]["apply"].append(l)
            applied[l] = t
    print("| τ | compute (every device) | select | gather and apply | gradients live | comm buffers live |")
    print("|---|---|---|---|---|---|")
    # A stage's gradient lives from its backward to its absorb (the residual
    # baseline: to its selection), its buffers from selection to apply.
    for t in range(cycle):
        row = rows[t]
        L = (cycle - 2) // 2
        grads = [l for l in sent if 2 * L - int(l) <= t <= absorbed.get(l, sent[l])]
        buffers = [l for l in sent if sent[l] <= t <= applied[l]]
        print("| %d | %s | %s | %s | %s | %s |" % (
            t, " ".join(row["compute"]) or "–", " ".join(row["send"]) or "–",
            " ".join(row["apply"]) or "–", " ".join(sorted(grads)) or "–", " ".join(sorted(buffers)) or "–"))


if __name__ == "__main__":
    main()
