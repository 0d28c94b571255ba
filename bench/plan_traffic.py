#!/usr/bin/python3
"""The memory traffic and product FLOPs a compiled plan asks of a device per step.

Usage: bench/plan_traffic.py PLAN.cdp [BEFORE.cdp] [--device D] [--top N]

Sums, per op, the bytes device D's training instructions read and write
(every input and output tensor's bytes, once per instruction; a reshape,
flatten, squeeze, unsqueeze or identity whose output lies at its input's
offset moves nothing, as the kernels copy nothing then, and neither does a
`gradient`, a marker; an `update` reads its gradient and reads and writes
its parameter and the optimizer's moments, which the kernel keeps) and the matrix
products' FLOPs (2 m n k), split by whether a product multiplies 2-byte
values (narrow_operands) or float32; cdp.attention's and attention_grad's
products (2 and 5) count as products. The scores those two ops keep in
buffers of their own (the CUDA kernel's chunks, sized near the L2 cache)
are not in the plan's memory: their bytes are printed apart, as the
CUDA kernels move them, whether L2 or HBM serves them. These are the plan's own figures, not
timings: a GPU step is bounded below by traffic / memory bandwidth plus
FLOPs / peak. With BEFORE.cdp (the same model from another build or with
other flags), prints both side by side. Reads the plan with protoc and
include/cdp/Plan/plan.proto.
"""
import argparse
import collections
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(os.path.dirname(HERE), "include", "cdp", "Plan", "plan.proto")
VIEWS = {"reshape", "flatten", "squeeze", "unsqueeze", "identity"}
PRODUCTS = {"gemm", "matmul"}
ATTENTION = {"attention", "attention_grad"}


def plan_text(path):
    """The plan as protobuf text (its 32-byte header skipped)."""
    try:
        data = open(path, "rb").read()
    except OSError as error:
        sys.exit("plan_traffic.py: %s" % error)
    result = subprocess.run(["protoc", "-I", os.path.dirname(PROTO), "--decode=cdp.plan.Plan",
                             PROTO], input=data[32:], capture_output=True)
    if result.returncode != 0:
        sys.exit("plan_traffic.py: %s is not a cdp plan (%s)"
                 % (path, result.stderr.decode().strip()))
    return result.stdout.decode()


def blocks(text, name, indent):
    """The bodies of the `name { ... }` messages at `indent` spaces."""
    pattern = r"\n%s%s \{\n(.*?)\n%s\}" % (" " * indent, name, " " * indent)
    return re.findall(pattern, "\n" + text, re.S)


def field(body, name, indent, default=None, cast=str):
    found = re.search(r"^%s%s: \"?([^\"\n]*)\"?$" % (" " * indent, name), body, re.M)
    return cast(found.group(1)) if found else default


def tensors_of(text):
    table = {}
    for body in blocks(text, "tensors", 0):
        shape = [int(x) for x in re.findall(r"^  shape: (\d+)$", body, re.M)]
        table[field(body, "id", 2, 0, int)] = {
            "shape": shape, "bytes": field(body, "bytes", 2, 0, int),
            "offset": field(body, "offset", 2, 0, int), "dtype": field(body, "dtype", 2, "F32")}
    return table


def attribute(body, name, kind):
    """An instruction's attribute `name` of field `kind` (i, f, s) as text,
    or None."""
    found = re.search(r'name: "%s"\n\s+%s: "?([^"\n]*)"?' % (name, kind), body)
    return found.group(1) if found else None


def update_bytes(body, inputs, tensors):
    """An update's traffic: its gradient read, its parameter and each moment
    (momentum: 1; Adam: 2) read and written."""
    param = tensors[inputs[0]]["bytes"]
    optimizer = attribute(body, "optimizer", "s") or "sgd"
    moments = 2 if optimizer in ("adam", "adamw") else \
        1 if float(attribute(body, "momentum", "f") or 0) != 0 else 0
    return tensors[inputs[1]]["bytes"] + 2 * param * (1 + moments)


def product_flops(body, inputs, outputs, tensors):
    out = tensors[outputs[0]]["shape"]
    a = tensors[inputs[0]]["shape"]
    trans_a = attribute(body, "trans_a", "i") == "1"
    k = a[-2] if trans_a and len(a) > 1 else a[-1]
    n = 1
    for d in out:
        n *= d
    return 2 * n * k


def attention_work(op, body, inputs, tensors):
    """(product FLOPs, bytes through the op's own buffers) of one
    cdp.attention or attention_grad, as the CUDA kernel computes it."""
    first = 1 if op == "attention_grad" else 0
    operands = [tensors[inputs[first + i]] for i in range(3)]
    a, b, v = (list(operand["shape"]) for operand in operands)
    if attribute(body, "layout", "s") == "bshd":
        # The heads after the sequence: (B, S, H, X) -> (B, H, S, X), the
        # keys (B, N, H, K) -> (B, H, K, N).
        a = [a[0], a[2], a[1], a[3]]
        b = [b[0], b[2], b[3], b[1]]
        v = [v[0], v[2], v[1], v[3]]
    # Float32 operands a narrow op copies into 2 bytes (written, then read).
    widened = [operand["dtype"] == "F32" for operand in operands]
    count = 1
    for dim in a[:-2]:
        count *= dim
    m, k, n, d = a[-2], a[-1], b[-1], v[-1]
    narrow = "narrow_operands" in body
    mn = m * n
    if op == "attention":
        flops = 2 * m * n * (k + d)
        # The scores written and read; P written and read (2 bytes a value
        # under narrow_operands); the operands' 2-byte copies written and read.
        moved = (8 + 4) * mn if narrow else 16 * mn
        copies = 4 * sum(size for size, wide in zip((m * k, k * n, n * d), widened)
                         if wide) if narrow else 0
    else:
        flops = 2 * m * n * (3 * k + 2 * d)
        bias_grad = attribute(body, "with_bias_grad", "i") == "1"
        # The scores written and read, P written (float32 and 2-byte) and read
        # twice, dP written and read, dS written (2-byte; float32 for the
        # bias's gradient, which reads it) and read twice.
        moved = (34 if narrow else 40) * mn + (8 if narrow else 4) * mn * bias_grad
        copies = 4 * (m * d + sum(size for size, wide in zip((m * k, k * n, n * d), widened)
                                  if wide)) if narrow else 0
    return count * flops, count * (moved + copies)


def per_op(path, device):
    text = plan_text(path)
    tensors = tensors_of(text)
    devices = blocks(text, "devices", 0)
    if device >= len(devices):
        sys.exit("plan_traffic.py: %s has %d devices, not device %d" % (path, len(devices), device))
    traffic, count = collections.Counter(), collections.Counter()
    flops = collections.Counter()
    inside = 0
    for body in blocks(devices[device], "instructions", 2):
        op = field(body, "op", 4)
        inputs = [int(x) for x in re.findall(r"^    inputs: (\d+)$", body, re.M)]
        outputs = [int(x) for x in re.findall(r"^    outputs: (\d+)$", body, re.M)]
        count[op] += 1
        if op in VIEWS and inputs and outputs and \
                tensors[inputs[0]]["offset"] == tensors[outputs[0]]["offset"] and \
                tensors[inputs[0]]["bytes"] == tensors[outputs[0]]["bytes"]:
            continue
        if op == "gradient":
            continue
        if op == "update":
            traffic[op] += update_bytes(body, inputs, tensors)
            continue
        traffic[op] += sum(tensors[t]["bytes"] for t in inputs + outputs if t in tensors)
        kind = "2-byte" if "narrow_operands" in body else "float32"
        if op in PRODUCTS:
            flops[kind] += product_flops(body, inputs, outputs, tensors)
        if op in ATTENTION:
            work, moved = attention_work(op, body, inputs, tensors)
            flops[kind] += work
            inside += moved
    return traffic, count, flops, inside


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan")
    parser.add_argument("before", nargs="?")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    traffic, count, flops, inside = per_op(args.plan, args.device)
    if args.before:
        was, was_count, was_flops, was_inside = per_op(args.before, args.device)
        print("%-34s %13s %13s" % ("op", "before", "after"))
        print("%-34s %13s %13s" % ("", "count  GB", "count  GB"))
        ops = sorted(set(traffic) | set(was) | set(count) | set(was_count),
                     key=lambda o: -max(traffic[o], was[o]))
        for op in ops[:args.top]:
            print("%-34s %5d %7.2f %5d %7.2f" % (op, was_count[op], was[op] / 1e9, count[op],
                                                 traffic[op] / 1e9))
        print("%-34s %5d %7.2f %5d %7.2f" % ("all", sum(was_count.values()),
                                             sum(was.values()) / 1e9, sum(count.values()),
                                             sum(traffic.values()) / 1e9))
        print("%-34s %13.2f %13.2f" % ("attention's own buffers, GB", was_inside / 1e9,
                                         inside / 1e9))
        for kind in ("2-byte", "float32"):
            print("product TFLOP %-20s %13.3f %13.3f" % (kind, was_flops[kind] / 1e12,
                                                        flops[kind] / 1e12))
        return
    total = sum(traffic.values())
    print("%-34s %5s %9s %6s" % ("op", "count", "GB moved", "share"))
    for op, moved in traffic.most_common(args.top):
        print("%-34s %5d %9.2f %5.1f%%" % (op, count[op], moved / 1e9, 100.0 * moved / total))
    print("%-34s %5d %9.2f" % ("all", sum(count.values()), total / 1e9))
    print("%-34s %5s %9.2f" % ("attention's own buffers", "", inside / 1e9))
    for kind in ("2-byte", "float32"):
        print("product TFLOP, %-7s operands: %.3f" % (kind, flops[kind] / 1e12))


if __name__ == "__main__":
    main()
