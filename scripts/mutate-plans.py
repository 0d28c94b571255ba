#!/usr/bin/python3
"""Edits compiled plans at random, re-seals them and runs each with cdp-run.

A plan's checksum catches accidents, not edits: anyone can rewrite a plan
and give it a valid header. This script compiles a few small models under
every strategy, then writes COUNT copies with one to three random edits each
(instructions dropped, duplicated, swapped or moved to another device; ids,
offsets, shapes, dtypes, kinds, attributes, devices, arenas and schedule
fields changed to nearby, negative or extreme values), seals them as
cdp-compile would and runs each under a time limit. Every run must either
complete (exit 0) or be refused in one line (`cdp-run: error: ...`, exit 1);
anything else (a signal, another exit code, several lines, the time limit)
is a finding, kept with its plan, its edits and its output under
OUT/findings.

Usage: scripts/mutate-plans.py OUT [--count N] [--timeout S] [--seed S]
                               [--build DIR] [--jobs J] [--quick]
--quick compiles two models under four strategies instead of the full set
(the lit test uses it).
"""
import argparse
import concurrent.futures
import json
import os
import random
import shutil
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIGS = {
    "single": ["--micro-batches", "2"],
    "dp": ["--strategy", "dp", "--devices", "2", "--stages", "2"],
    "cdp": ["--strategy", "cdp", "--devices", "2", "--stages", "2"],
    "cdp-chain": ["--strategy", "cdp", "--devices", "2", "--stages", "2", "--cdp-rule", "v1",
                  "--cdp-reduce", "chain"],
    "gpipe": ["--strategy", "gpipe", "--stages", "2", "--devices", "2", "--micro-batches", "4"],
    "1f1b": ["--strategy", "1f1b", "--stages", "2", "--devices", "2", "--micro-batches", "4"],
    "2bw": ["--strategy", "2bw", "--stages", "2", "--devices", "2", "--micro-batches", "4"],
    "cdp-mp": ["--strategy", "cdp-mp", "--stages", "2", "--micro-batches", "3"],
    "1f1b-r2": ["--strategy", "1f1b", "--stages", "2", "--replicas", "2", "--devices", "4",
                "--micro-batches", "2"],
    # fp16: the stages' overflow flags, ZeRO's summed flags and skipping
    # sharded updates.
    "1f1b-fp16": ["--strategy", "1f1b", "--stages", "2", "--devices", "2", "--micro-batches",
                  "2", "--precision", "fp16", "--loss-scale", "1024"],
    "dp-zero2-fp16": ["--strategy", "dp", "--devices", "2", "--zero", "2", "--precision", "fp16",
                      "--loss-scale", "1024"],
}
QUICK_CONFIGS = ["single", "cdp-chain", "1f1b", "2bw", "1f1b-r2"]
MODELS = ["mlp4tied", "conv", "mlp4drop", "layernormalization", "gather", "maxpool"]
QUICK_MODELS = ["mlp4tied", "conv"]

EXTREMES = [0, 1, -1, 2, 3, 7, 255, 2**31 - 1, -2**31, 2**32 + 1, 2**62, 2**63 - 1, -2**63]


def run(command, **kwargs):
    return subprocess.run(command, capture_output=True, check=True, **kwargs)


def load_schema(out):
    """plan_pb2, generated from the tree's plan.proto."""
    gen = os.path.join(out, "py")
    os.makedirs(gen, exist_ok=True)
    include = os.path.join(ROOT, "include", "cdp", "Plan")
    run(["protoc", "-I", include, "--python_out", gen, os.path.join(include, "plan.proto")])
    sys.path.insert(0, gen)
    import plan_pb2  # noqa: E402 (generated above)
    return plan_pb2


def read_plan(schema, path):
    data = open(path, "rb").read()
    plan = schema.Plan()
    plan.ParseFromString(data[32:])
    return data[:16], plan


def seal(header, plan):
    """The plan's bytes with a header whose size and checksum fit them."""
    payload = plan.SerializeToString()
    digest = 0xcbf29ce484222325  # FNV-1a 64, as cdp writes it
    for byte in payload:
        digest = ((digest ^ byte) * 0x100000001b3) & 0xffffffffffffffff
    return header + struct.pack("<QQ", len(payload), digest) + payload


def make_seeds(args, out, schema):
    """Compiles the models under the strategies; writes their feeds."""
    compile_bin = os.path.join(args.build, "bin", "cdp-compile")
    models = QUICK_MODELS if args.quick else MODELS
    configs = QUICK_CONFIGS if args.quick else list(CONFIGS)
    seeds = []
    for model in models:
        onnx = os.path.join(out, model + ".onnx")
        run([sys.executable, os.path.join(ROOT, "test", "Import", "make_models.py"), model, onnx])
        for config in configs:
            plan_path = os.path.join(out, "%s-%s.cdp" % (model, config))
            result = subprocess.run([compile_bin, onnx, "--optimizer", "adam", "-o", plan_path] +
                                    CONFIGS[config], capture_output=True)
            if result.returncode != 0:
                continue  # a strategy the model does not fit (too few layers)
            seeds.append((plan_path, write_feeds(schema, plan_path, out)))
    return seeds


def write_feeds(schema, plan_path, out):
    """--feed flags with random data for every graph input of the plan."""
    import numpy as np
    _, plan = read_plan(schema, plan_path)
    rng = np.random.default_rng(0)
    feeds = []
    for tensor_id in plan.inputs:
        tensor = plan.tensors[tensor_id]
        shape = [max(d, 1) for d in tensor.shape]
        if tensor.batch_axis >= 0:
            shape[tensor.batch_axis] *= 4
        if tensor.dtype == schema.I64:
            data = np.zeros(shape, np.int64)
        else:
            data = rng.standard_normal(shape).astype(np.float32)
        path = os.path.join(out, "%s.%s.npy" % (os.path.basename(plan_path), tensor.name))
        np.save(path, data)
        feeds += ["--feed", "%s=%s" % (tensor.name, path)]
    return feeds


def pick(rng, values):
    return values[rng.randrange(len(values))] if values else None


def near(rng, value):
    """A value near `value`, or an extreme one."""
    if rng.random() < 0.5:
        return pick(rng, EXTREMES)
    return max(-2**63, min(2**63 - 1, value + rng.choice([-64, -8, -1, 1, 8, 64, 4096])))


def clamp32(value):
    return max(-2**31, min(2**31 - 1, value))


def all_instructions(plan):
    streams = [(d.index, s) for d in plan.devices for s in (d.instructions, d.eval_instructions)]
    streams += [(-1 - t, template.instructions) for t, template in enumerate(plan.templates)]
    return [(owner, stream, i) for owner, stream in streams for i in range(len(stream))]


def edit_run(rng, plan, note):
    """Format 4: a device's runs of templates."""
    devices = [d for d in plan.devices if len(d.runs)]
    if not devices:
        return
    device = pick(rng, devices)
    index = rng.randrange(len(device.runs))
    run = device.runs[index]
    kind = rng.randrange(4)
    if kind == 0:
        note.append("drop run %d of device %d" % (index, device.index))
        del device.runs[index]
    elif kind == 1:
        note.append("duplicate run %d of device %d" % (index, device.index))
        device.runs.add().CopyFrom(run)
    else:
        field = pick(rng, ["template", "slot", "time_step", "micro_batch", "message_batch",
                           "step_micro_batch", "peer_offset"])
        value = near(rng, getattr(run, field))
        if field not in ("time_step", "message_batch"):
            value = clamp32(value)
        note.append("device %d run %d %s -> %d" % (device.index, index, field, value))
        setattr(run, field, value)


def edit_instruction(rng, plan, note):
    streams = all_instructions(plan)
    if not streams:
        return
    owner, stream, index = pick(rng, streams)
    ins = stream[index]
    kind = rng.randrange(12)
    if kind == 0:
        note.append("drop instruction %d (%s) of %s" % (index, ins.op, "device %d" % owner
                                                          if owner >= 0 else "template %d" % (-1 - owner)))
        del stream[index]
    elif kind == 1:
        note.append("duplicate instruction %d (%s)" % (index, ins.op))
        stream.add().CopyFrom(ins)
    elif kind == 2 and len(stream) > 1:
        other = rng.randrange(len(stream))
        note.append("swap instructions %d and %d" % (index, other))
        a, b = type(ins)(), type(ins)()
        a.CopyFrom(stream[index])
        b.CopyFrom(stream[other])
        stream[index].CopyFrom(b)
        stream[other].CopyFrom(a)
    elif kind == 3 and len(plan.devices) > 1:
        target = pick(rng, list(plan.devices))
        note.append("move instruction %d (%s) to device %d" % (index, ins.op, target.index))
        target.instructions.add().CopyFrom(ins)
        del stream[index]
    elif kind == 4:
        ops = sorted({i.op for _, s, j in streams for i in [s[j]]})
        op = pick(rng, ops)
        note.append("instruction %d op %s -> %s" % (index, ins.op, op))
        ins.op = op
    elif kind in (5, 6):
        ids = ins.inputs if kind == 5 or not ins.outputs else ins.outputs
        if len(ids) == 0:
            ids.append(0)
        at = rng.randrange(len(ids))
        value = rng.choice([rng.randrange(-2, len(plan.tensors) + 2), clamp32(near(rng, ids[at]))])
        note.append("instruction %d (%s) id %d -> %d" % (index, ins.op, ids[at], value))
        ids[at] = clamp32(value)
    elif kind == 7:
        ids = pick(rng, [ins.inputs, ins.outputs])
        if len(ids) and rng.random() < 0.5:
            note.append("instruction %d (%s) loses its last id" % (index, ins.op))
            del ids[len(ids) - 1]
        else:
            note.append("instruction %d (%s) gains an id" % (index, ins.op))
            ids.append(rng.randrange(len(plan.tensors)))
    elif kind in (8, 9):
        edit_attribute(rng, ins, index, note)
    elif kind == 10:
        field = pick(rng, ["min_step", "time_step", "stage", "micro_batch"])
        value = near(rng, getattr(ins, field))
        if field in ("stage", "micro_batch"):
            value = clamp32(value)
        note.append("instruction %d (%s) %s -> %d" % (index, ins.op, field, value))
        setattr(ins, field, value)
    else:
        field = pick(rng, ["last_slot", "drain"])
        note.append("instruction %d (%s) flips %s" % (index, ins.op, field))
        setattr(ins, field, not getattr(ins, field))


def edit_attribute(rng, ins, index, note):
    if not ins.attributes:
        note.append("instruction %d (%s) gains attribute axis" % (index, ins.op))
        attribute = ins.attributes.add()
        attribute.name, attribute.i = "axis", near(rng, 0)
        return
    attribute = pick(rng, list(ins.attributes))
    which = attribute.WhichOneof("value")
    kind = rng.randrange(4)
    if kind == 0:
        note.append("instruction %d (%s) drops attribute %s" % (index, ins.op, attribute.name))
        ins.attributes.remove(attribute)
    elif kind == 1 or which is None:
        note.append("instruction %d (%s) attribute %s becomes a string" %
                    (index, ins.op, attribute.name))
        attribute.s = "x"
    elif which == "i":
        value = near(rng, attribute.i)
        note.append("instruction %d (%s) attribute %s %d -> %d" %
                    (index, ins.op, attribute.name, attribute.i, value))
        attribute.i = value
    elif which == "f":
        value = rng.choice([float("nan"), float("inf"), -1.0, 0.0, 1e300, -attribute.f])
        note.append("instruction %d (%s) attribute %s -> %r" % (index, ins.op, attribute.name, value))
        attribute.f = value
    elif which == "ints":
        values = attribute.ints.values
        if len(values) and kind == 2:
            at = rng.randrange(len(values))
            value = near(rng, values[at])
            note.append("instruction %d (%s) attribute %s[%d] -> %d" %
                        (index, ins.op, attribute.name, at, value))
            values[at] = value
        elif len(values) and rng.random() < 0.5:
            note.append("instruction %d (%s) attribute %s shorter" % (index, ins.op, attribute.name))
            del values[len(values) - 1]
        else:
            note.append("instruction %d (%s) attribute %s longer" % (index, ins.op, attribute.name))
            values.append(near(rng, 1))
    else:
        note.append("instruction %d (%s) attribute %s becomes an int" %
                    (index, ins.op, attribute.name))
        attribute.i = near(rng, 1)


def edit_tensor(rng, plan, note):
    if not plan.tensors:
        return
    tensor = pick(rng, list(plan.tensors))
    kind = rng.randrange(10)
    if kind == 0:
        value = near(rng, tensor.offset)
        note.append("tensor %d offset %d -> %d" % (tensor.id, tensor.offset, value))
        tensor.offset = value
    elif kind in (1, 2) and len(tensor.shape):
        at = rng.randrange(len(tensor.shape))
        value = near(rng, tensor.shape[at])
        note.append("tensor %d shape[%d] %d -> %d" % (tensor.id, at, tensor.shape[at], value))
        tensor.shape[at] = value
        if kind == 2:  # and bytes to match, as an editor would
            count = 1
            for d in tensor.shape:
                count *= d
            tensor.bytes = max(-2**63, min(2**63 - 1, count * (8 if tensor.dtype == 1 else 4)))
    elif kind == 3:
        value = near(rng, tensor.bytes)
        note.append("tensor %d bytes %d -> %d" % (tensor.id, tensor.bytes, value))
        tensor.bytes = value
    elif kind == 4:
        value = rng.choice([0, 1, 2, 3, 7])
        note.append("tensor %d dtype %d -> %d" % (tensor.id, tensor.dtype, value))
        tensor.dtype = value
    elif kind == 5:
        value = rng.choice([0, 1, 2, 3, 4, 5, 9])
        note.append("tensor %d kind %d -> %d" % (tensor.id, tensor.kind, value))
        tensor.kind = value
    elif kind == 6:
        value = clamp32(near(rng, tensor.device if tensor.HasField("device") else 0))
        note.append("tensor %d device -> %d" % (tensor.id, value))
        tensor.device = value
    elif kind == 7 and tensor.HasField("initial"):  # where in the weights file
        field = pick(rng, ["offset", "size", "checksum"])
        value = max(0, min(2**64 - 1, near(rng, getattr(tensor.initial, field))))
        note.append("tensor %d initial %s -> %d" % (tensor.id, field, value))
        setattr(tensor.initial, field, value)
    elif kind == 7:
        note.append("tensor %d data cut to %d bytes" % (tensor.id, len(tensor.data) // 2))
        tensor.data = tensor.data[:len(tensor.data) // 2]
    elif kind == 8:
        value = clamp32(near(rng, tensor.id))
        note.append("tensor %d id -> %d" % (tensor.id, value))
        tensor.id = value
    else:
        field = pick(rng, ["slots", "slot_stride"])
        value = near(rng, getattr(tensor, field))
        if field == "slots":
            value = clamp32(value)
        note.append("tensor %d %s -> %d" % (tensor.id, field, value))
        setattr(tensor, field, value)


def edit_plan(rng, plan, note):
    kind = rng.randrange(12)
    if kind == 11:  # replicas sharing the first replica's stash (format 7)
        value = clamp32(near(rng, plan.replica_devices))
        note.append("replica_devices %d -> %d" % (plan.replica_devices, value))
        plan.replica_devices = value
    elif kind == 10:  # the weights file it names
        field = pick(rng, ["weights_file", "weights_bytes", "weights_stamp"])
        if field == "weights_file":
            value = rng.choice(["", "..", "../x.weights", "/etc/passwd", "a\0b", "other.weights"])
        else:
            value = max(0, min(2**64 - 1, near(rng, getattr(plan, field))))
        note.append("%s -> %r" % (field, value))
        setattr(plan, field, value)
    elif kind == 0:
        value = clamp32(near(rng, plan.loss))
        note.append("loss %d -> %d" % (plan.loss, value))
        plan.loss = value
    elif kind == 1:
        value = clamp32(near(rng, plan.micro_batches))
        note.append("micro_batches %d -> %d" % (plan.micro_batches, value))
        plan.micro_batches = value
    elif kind == 2 and len(plan.devices):
        device = pick(rng, list(plan.devices))
        value = near(rng, device.arena_bytes)
        note.append("device %d arena %d -> %d" % (device.index, device.arena_bytes, value))
        device.arena_bytes = value
    elif kind == 3 and len(plan.devices):
        at = rng.randrange(len(plan.devices))
        note.append("drop device %d" % at)
        del plan.devices[at]
    elif kind == 4 and len(plan.devices):
        note.append("duplicate device 0")
        plan.devices.add().CopyFrom(plan.devices[0])
    elif kind == 5 and len(plan.devices):
        device = pick(rng, list(plan.devices))
        value = rng.choice(["cuda", "tpu", ""])
        note.append("device %d backend -> %r" % (device.index, value))
        device.backend = value
    elif kind == 6:
        field = pick(rng, ["labels", "scores", "loss_device"])
        value = clamp32(near(rng, getattr(plan, field)))
        note.append("%s -> %d" % (field, value))
        setattr(plan, field, value)
    elif kind == 7 and len(plan.inputs):
        at = rng.randrange(len(plan.inputs))
        value = clamp32(near(rng, plan.inputs[at]))
        note.append("inputs[%d] -> %d" % (at, value))
        plan.inputs[at] = value
    elif kind == 8 and len(plan.outputs):
        output = pick(rng, list(plan.outputs))
        value = clamp32(near(rng, output.tensor))
        note.append("output %s tensor -> %d" % (output.name, value))
        output.tensor = value
    else:
        schedule = plan.schedule
        field = pick(rng, ["stages", "cycle", "offsets", "reduce_at", "live_versions"])
        if field in ("stages", "cycle"):
            value = near(rng, getattr(schedule, field))
            note.append("schedule.%s -> %d" % (field, value))
            setattr(schedule, field, value)
        else:
            values = getattr(schedule, field)
            if len(values):
                at = rng.randrange(len(values))
                values[at] = near(rng, values[at])
                note.append("schedule.%s[%d] -> %d" % (field, at, values[at]))
            else:
                values.append(near(rng, 0))
                note.append("schedule.%s gains %d" % (field, values[0]))


def mutate(rng, plan):
    note = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        area = rng.random()
        if area < 0.45:
            edit_instruction(rng, plan, note)
        elif area < 0.6:
            edit_run(rng, plan, note)
        elif area < 0.8:
            edit_tensor(rng, plan, note)
        else:
            edit_plan(rng, plan, note)
    return note


def classify(result):
    lines = result.stderr.decode(errors="replace").strip().splitlines()
    if result.returncode == 0:
        return "ran"
    if result.returncode == 1 and len(lines) == 1 and lines[0].startswith("cdp-run: error: "):
        return "refused"
    return "crash"


def try_plan(args, path, feeds):
    run_bin = os.path.join(args.build, "bin", "cdp-run")
    # No progress lines: a refusal is judged by being the only line.
    command = [run_bin, path, "--steps", "3", "--threads", "1", "--progress-every", "0"] + feeds
    try:
        result = subprocess.run(command, capture_output=True, timeout=args.timeout)
        return classify(result), result.returncode, result.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired:
        return "hang", None, ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--build", default=os.environ.get("CDP_BUILD_DIR", "build"))
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    args.build = os.path.abspath(args.build)
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(os.path.join(args.out, "edited"))
    schema = load_schema(args.out)
    seeds = make_seeds(args, args.out, schema)
    rng = random.Random(args.seed)
    jobs = []
    for n in range(args.count):
        source, feeds = seeds[n % len(seeds)]
        header, plan = read_plan(schema, source)
        note = mutate(rng, plan)
        path = os.path.join(args.out, "edited", "%04d.cdp" % n)
        with open(path, "wb") as f:
            f.write(seal(header, plan))
        # The seed's weights file beside the edited plans (once per seed).
        weights = os.path.basename(source) + ".weights"
        beside = os.path.join(args.out, "edited", weights)
        if os.path.exists(source + ".weights") and not os.path.exists(beside):
            os.symlink(os.path.join("..", weights), beside)
        jobs.append((n, os.path.basename(source), note, path, feeds))
    counts = {"ran": 0, "refused": 0, "crash": 0, "hang": 0}
    findings = os.path.join(args.out, "findings")
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = pool.map(lambda job: try_plan(args, job[3], job[4]), jobs)
        for (n, source, note, path, feeds), (verdict, code, stderr) in zip(jobs, results):
            counts[verdict] += 1
            if verdict in ("crash", "hang"):
                os.makedirs(findings, exist_ok=True)
                shutil.copy(path, findings)
                with open(os.path.join(findings, "%04d.json" % n), "w") as f:
                    json.dump({"seed": source, "edits": note, "verdict": verdict, "exit": code,
                               "stderr": stderr[-2000:], "feeds": feeds}, f, indent=1)
                print("%04d %s %s: %s: %s" % (n, verdict, source, "; ".join(note),
                                              stderr.strip().splitlines()[-1:]))
    print("mutate-plans: %d edited plans from %d seeds: %d ran, %d refused in one line, "
          "%d crashed, %d hung" % (args.count, len(seeds), counts["ran"], counts["refused"],
                                   counts["crash"], counts["hang"]))
    return 1 if counts["crash"] or counts["hang"] else 0


if __name__ == "__main__":
    sys.exit(main())
