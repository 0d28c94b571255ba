#!/usr/bin/python3
"""The CDP-ZeRO chain as a time-step table (docs/strategies/zero.md).

Usage: scripts/cdp_zero_table.py MODEL.onnx [cdp-compile flags...]
Compiles MODEL with `--strategy cdp --cdp-rule v1 --zero 3` and the given
flags to the schedule IR (`--emit=sched-mlir`) and prints one Markdown row
per global time step of one training step t, one column per device: the
work (F2, B3), where the stage's parameters came from (`F2 ⇐1`: from device
1; `⇐own`: the owner's master copy), where they go next (`→2`), the owner's
master sends to device 0 (`θ3→0`; `(t+1)`: for the next step, sent after
the update), the gradient chain's hop (`g→`) and the owner's update (`U2`).
"""
import re
import subprocess
import sys


def programs(text):
    devices, current = [], None
    for line in text.splitlines():
        head = re.search(r"sched.slot_device attributes \{index = (\d+) : i64, offset = (\d+)", line)
        if head:
            current = (int(head.group(2)), [])
            devices.append(current)
            continue
        op = re.search(r"sched\.(\w+) (?:attributes )?\{(.*)\}", line)
        if current is None or not op:
            continue
        attrs = dict(re.findall(r"(\w+) = (#sched.work<\w+>|\w+)", op.group(2)))
        current[1].append((op.group(1), attrs))
    return devices


def cells(devices, last):
    table = {}
    for d, (offset, ops) in enumerate(devices):
        pending = []
        for name, a in ops:
            at = lambda: table.setdefault((offset + int(a["time_step"]), d), [])  # noqa: E731
            if name == "gather_params":
                source = int(a["from"])
                pending.append("⇐own" if source == d else "⇐%d" % source)
            elif name == "slot_compute":
                kind = "F" if "forward" in a["kind"] else "B"
                at().append(kind + a["stage"] + (" " + " ".join(pending) if pending else ""))
                pending = []
            elif name == "send_params":
                if a.get("master") == "true":
                    later = " (t+1)" if a.get("step_offset") == "1" else ""
                    at().append("θ%s→%s%s" % (a["stage"], a["to"], later))
                else:
                    at().append("→%s" % a["to"])
            elif name == "start_reduction":
                at().append("g→%s" % ("%d" % (d + 1) if d < last else a["owner"]))
            elif name == "owner_update":
                at().append("U" + a["stage"])
    return table


def main():
    model, flags = sys.argv[1], sys.argv[2:]
    ir = subprocess.run(["cdp-compile", model, "--strategy", "cdp", "--cdp-rule", "v1",
                         "--zero", "3", "--emit=sched-mlir", "-o", "-", *flags],
                        check=True, capture_output=True, text=True).stdout
    devices = programs(ir)
    table = cells(devices, len(devices) - 1)
    end = max(tau for tau, _ in table) + 1
    print("| time step | " + " | ".join("device %d" % d for d in range(len(devices))) + " |")
    print("|---|" + "---|" * len(devices))
    for tau in range(end):
        row = [", ".join(table.get((tau, d), [])) for d in range(len(devices))]
        print("| %d | %s |" % (tau, " | ".join(row)))


if __name__ == "__main__":
    main()
