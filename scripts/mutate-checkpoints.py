#!/usr/bin/python3
"""Edits checkpoints at random, re-seals them and resumes from each.

A checkpoint's checksums catch accidents, not edits: anyone can rewrite a
shard and seal it (and the manifest that names it) again. This script trains
small models under the strategies whose checkpoints hold state in flight
(cdp's delayed reductions, the chain's messages, 2bw's and cdp-mp's
micro-batches across the step boundary), checkpoints them, and writes COUNT
copies with one to three random edits each: the manifest's or the shard's
step changed to a nearby, negative or extreme value; a piece of state
dropped, renamed, shortened or lengthened; a message in flight dropped,
duplicated, retagged, readdressed, retyped, recounted, lengthened or
shortened; a reduction in flight dropped, retagged, its counts, flag, mean or
contributions changed. Each copy is sealed as cdp-run seals it and resumed
under a time limit. Every resume must either complete (exit 0) or be refused
in one line (`cdp-run: error: ...`, exit 1); anything else (a signal,
another exit code, several lines, the time limit) is a finding, kept with
its checkpoint, its edits and its output under OUT/findings.

Usage: scripts/mutate-checkpoints.py OUT [--count N] [--timeout S]
                                     [--seed S] [--build DIR] [--jobs J]
                                     [--case CONFIG:EDIT ...]
--case resumes from one fixed edit instead (EDIT: step=N, message-longer,
message-shorter, drop-message, retag-message, drop-reduction) and prints
its outcome and cdp-run's output.
"""
import concurrent.futures
import os
import random
import shutil
import struct
import subprocess
import sys

import hostile_runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIGS = {
    "cdp": ["--strategy", "cdp", "--devices", "2", "--stages", "2"],
    "cdp-chain": ["--strategy", "cdp", "--devices", "3", "--stages", "2", "--cdp-rule", "v1",
                  "--cdp-reduce", "chain"],
    "2bw": ["--strategy", "2bw", "--stages", "2", "--devices", "2", "--micro-batches", "4"],
    "cdp-mp": ["--strategy", "cdp-mp", "--stages", "2", "--micro-batches", "3"],
    "dp": ["--strategy", "dp", "--devices", "2"],
}
MODEL = "mlp4tied"
EXTREMES = [0, 1, -1, 2, 3, 7, 255, 2**31 - 1, -2**31, 2**62, 2**63 - 1, -2**63]
MANIFEST_MAGIC, SHARD_MAGIC = b"CDPCKPT5", b"CDPSHRD3"


def fnv1a(data):
    digest = 0xcbf29ce484222325  # FNV-1a 64, as cdp writes it
    for byte in data:
        digest = ((digest ^ byte) * 0x100000001b3) & 0xffffffffffffffff
    return digest


def sealed(data):
    return data + struct.pack("<Q", fnv1a(data))


class Reader:
    def __init__(self, data, at=0):
        self.data, self.at = data, at

    def get(self, fmt):
        value = struct.unpack_from("<" + fmt, self.data, self.at)[0]
        self.at += struct.calcsize("<" + fmt)
        return value

    def blob(self):
        size = self.get("Q")
        value = self.data[self.at:self.at + size]
        self.at += size
        return value


def blob(data):
    return struct.pack("<Q", len(data)) + data


def read_manifest(data):
    r = Reader(data[:-8], len(MANIFEST_MAGIC))
    m = {"plan": r.get("Q"), "seed": r.get("Q"), "data": r.blob()}
    m["files"] = [[r.blob(), r.get("Q"), r.get("q"), r.get("Q")] for _ in range(r.get("Q"))]
    m.update({"next": r.get("q"), "origin": r.get("q"), "devices": r.get("i"),
              "processes": r.get("i"), "shards": []})
    for _ in range(m["processes"]):
        m["shards"].append([r.blob(), r.get("Q"), r.get("Q")])
    return m


def write_manifest(m):
    out = MANIFEST_MAGIC + struct.pack("<QQ", m["plan"], m["seed"]) + blob(m["data"])
    out += struct.pack("<Q", len(m["files"]))
    for path, size, modified, digest in m["files"]:
        out += blob(path) + struct.pack("<QqQ", size, modified, digest)
    out += struct.pack("<qqii", m["next"], m["origin"], m["devices"], m["processes"])
    for name, size, digest in m["shards"]:
        out += blob(name) + struct.pack("<QQ", size, digest)
    return sealed(out)


def read_shard(data):
    r = Reader(data[:-8], len(SHARD_MAGIC))
    s = {"process": r.get("i"), "next": r.get("q"), "pieces": []}
    for _ in range(r.get("Q")):
        s["pieces"].append([r.blob(), r.blob()])
    s["flight"] = read_flight(r.blob())
    return s


def write_shard(s):
    out = SHARD_MAGIC + struct.pack("<iqQ", s["process"], s["next"], len(s["pieces"]))
    for name, data in s["pieces"]:
        out += blob(name) + blob(data)
    return sealed(out + blob(write_flight(s["flight"])))


def read_flight(data):
    """The in-process fabric's messages and reductions in flight."""
    if not data:
        return None
    r = Reader(data)
    f = {"devices": r.get("i"), "messages": [], "reductions": []}
    for _ in range(r.get("Q")):
        f["messages"].append([r.get("i"), r.get("i"), r.get("q"), r.get("i"), r.get("q"),
                              r.blob()])
    for _ in range(r.get("Q")):
        red = [r.get("q"), r.get("i"), r.get("i"), r.get("B"), r.blob()]
        red.append([r.blob() for _ in range(r.get("Q"))])
        f["reductions"].append(red)
    return f


def write_flight(f):
    if f is None:
        return b""
    out = struct.pack("<iQ", f["devices"], len(f["messages"]))
    for src, dst, tag, dtype, count, data in f["messages"]:
        out += struct.pack("<iiqiq", src, dst, tag, dtype, count) + blob(data)
    out += struct.pack("<Q", len(f["reductions"]))
    for tag, arrived, fetched, done, mean, parts in f["reductions"]:
        out += struct.pack("<qiiB", tag, arrived, fetched, done) + blob(mean)
        out += struct.pack("<Q", len(parts)) + b"".join(blob(p) for p in parts)
    return out


def near(rng, value):
    if rng.random() < 0.5:
        return rng.choice(EXTREMES)
    return value + rng.choice([-64, -8, -2, -1, 1, 2, 8, 64, 4096])


def resized(rng, data):
    """The bytes shortened or lengthened (by a float, a byte or much)."""
    change = rng.choice([-4, -1, 1, 4, 4096, -len(data)])
    return data[:len(data) + change] if change < 0 else data + b"\x01" * change


def edit_step(rng, manifest, shard, note):
    which = rng.choice(["manifest", "shard", "both"])
    value = near(rng, manifest["next"])
    value = max(-2**63, min(2**63 - 1, value))
    note.append("%s step %d -> %d" % (which, manifest["next"], value))
    if which != "shard":
        manifest["next"] = value
    if which != "manifest":
        shard["next"] = value


def edit_piece(rng, shard, note):
    pieces = shard["pieces"]
    at = rng.randrange(len(pieces))
    name = pieces[at][0].decode()
    kind = rng.randrange(3)
    if kind == 0:
        note.append("drop piece '%s'" % name)
        del pieces[at]
    elif kind == 1:
        note.append("rename piece '%s'" % name)
        pieces[at][0] = (name + "x").encode()
    else:
        note.append("resize piece '%s'" % name)
        pieces[at][1] = resized(rng, pieces[at][1])


def edit_message(rng, flight, note):
    messages = flight["messages"]
    if not messages:
        return False
    at = rng.randrange(len(messages))
    m = messages[at]
    kind = rng.randrange(8)
    if kind == 0:
        note.append("drop message %d (tag %d)" % (at, m[2]))
        del messages[at]
    elif kind == 1:
        field = rng.choice([0, 1])
        m[field] = rng.choice([m[field] ^ 1, -1, flight["devices"], 2**31 - 1])
        note.append("message %d %s -> %d" % (at, "from" if field == 0 else "to", m[field]))
    elif kind == 2:
        m[2] = near(rng, m[2])
        note.append("message %d tag -> %d" % (at, m[2]))
    elif kind == 3:
        m[3] = rng.choice([-1, 1, 2, 7, 2**31 - 1])
        note.append("message %d dtype -> %d" % (at, m[3]))
    elif kind == 4:
        m[4] = near(rng, m[4])
        note.append("message %d count -> %d" % (at, m[4]))
    elif kind == 5:
        note.append("message %d bytes resized" % at)
        m[5] = resized(rng, m[5])
    elif kind == 6:
        note.append("duplicate message %d" % at)
        messages.append(list(m))
    else:
        note.append("message %d count and bytes lengthened together" % at)
        m[4] += 1024
        m[5] += b"\x00" * 4096
    return True


def edit_reduction(rng, flight, note):
    reductions = flight["reductions"]
    if not reductions:
        return False
    at = rng.randrange(len(reductions))
    r = reductions[at]
    kind = rng.randrange(7)
    if kind == 0:
        note.append("drop reduction %d (tag %d)" % (at, r[0]))
        del reductions[at]
    elif kind == 1:
        r[0] = near(rng, r[0])
        note.append("reduction %d tag -> %d" % (at, r[0]))
    elif kind in (2, 3):
        field = kind - 1
        r[field] = rng.choice([0, 1, 2, -1, 3, 2**31 - 1])
        note.append("reduction %d %s -> %d" % (at, "arrived" if field == 1 else "fetched", r[field]))
    elif kind == 4:
        r[3] = 1 - r[3] if r[3] in (0, 1) else 0
        note.append("reduction %d done -> %d" % (at, r[3]))
    elif kind == 5:
        note.append("reduction %d mean resized" % at)
        r[4] = resized(rng, r[4])
    elif r[5]:
        part = rng.randrange(len(r[5]))
        note.append("reduction %d contribution %d resized" % (at, part))
        r[5][part] = resized(rng, r[5][part])
    else:
        note.append("reduction %d gains a contribution" % at)
        r[5].append(b"\x00" * 4)
    return True


def edit(rng, manifest, shard, note):
    flight = shard["flight"]
    kind = rng.randrange(6)
    if kind == 0:
        edit_step(rng, manifest, shard, note)
    elif kind == 1:
        edit_piece(rng, shard, note)
    elif flight is None or not (
            (kind in (2, 3) and edit_message(rng, flight, note)) or
            edit_reduction(rng, flight, note) or edit_message(rng, flight, note)):
        edit_piece(rng, shard, note)


def fixed_edit(name, manifest, shard):
    """The named edit of --case."""
    flight = shard["flight"]
    if name.startswith("step="):
        manifest["next"] = shard["next"] = int(name.split("=")[1])
    elif name == "message-longer":
        flight["messages"][0][5] += b"\x00" * 4096
    elif name == "message-shorter":
        flight["messages"][0][5] = flight["messages"][0][5][:-4]
    elif name == "drop-message":
        del flight["messages"][0]
    elif name == "retag-message":
        flight["messages"][0][2] += 1
    elif name == "drop-reduction":
        del flight["reductions"][0]
    else:
        sys.exit("mutate-checkpoints: unknown edit '%s'" % name)


def make_seeds(args, out):
    """Per strategy: the plan, its feeds and a checkpoint at step 3."""
    bin_dir = os.path.join(args.build, "bin")
    onnx = os.path.join(out, MODEL + ".onnx")
    subprocess.run([sys.executable, os.path.join(ROOT, "test", "Import", "make_models.py"),
                    MODEL, onnx], check=True, capture_output=True)
    import numpy as np
    rng = np.random.default_rng(0)
    np.save(os.path.join(out, "x.npy"), rng.standard_normal((48, 16)).astype(np.float32))
    np.save(os.path.join(out, "y.npy"), rng.integers(0, 4, 48).astype(np.int64))
    feeds = ["--feed", "x=" + os.path.join(out, "x.npy"),
             "--feed", "labels=" + os.path.join(out, "y.npy")]
    seeds = []
    for config, flags in CONFIGS.items():
        plan = os.path.join(out, config + ".cdp")
        subprocess.run([os.path.join(bin_dir, "cdp-compile"), onnx, "-o", plan,
                        "--optimizer", "adam"] + flags,
                       check=True, capture_output=True)
        checkpoint = os.path.join(out, config + ".ck")
        subprocess.run([os.path.join(bin_dir, "cdp-run"), plan, "--steps", "3",
                        "--checkpoint", checkpoint] + feeds, check=True, capture_output=True)
        seeds.append((config, plan, checkpoint))
    return seeds, feeds


def mutant(args, out, seed, index, rng, case=None):
    """Writes an edited copy of a seed's checkpoint; returns (folder, edits)."""
    config, _, checkpoint = seed
    manifest = read_manifest(open(os.path.join(checkpoint, "manifest.bin"), "rb").read())
    shard_name = manifest["shards"][0][0].decode()
    shard = read_shard(open(os.path.join(checkpoint, shard_name), "rb").read())
    note = [case] if case else []
    if case:
        fixed_edit(case, manifest, shard)
    else:
        for _ in range(rng.randint(1, 3)):
            edit(rng, manifest, shard, note)
    folder = os.path.join(out, "mutants", "%04d-%s" % (index, config))
    os.makedirs(folder)
    data = write_shard(shard)
    manifest["shards"][0][1:] = [len(data), fnv1a(data)]
    open(os.path.join(folder, shard_name), "wb").write(data)
    open(os.path.join(folder, "manifest.bin"), "wb").write(write_manifest(manifest))
    return folder, note


def resume(args, feeds, plan, folder):
    command = [os.path.join(args.build, "bin", "cdp-run"), plan, "--steps", "6",
               "--resume", folder] + feeds
    kind, err = hostile_runs.outcome(command, args.timeout)
    return ("ran" if kind == "ok" else kind), err


def main():
    parser = hostile_runs.arguments()
    parser.add_argument("--case", action="append", default=[])
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    seeds, feeds = make_seeds(args, args.out)
    rng = random.Random(args.seed)
    for index, case in enumerate(args.case):
        config, name = case.split(":", 1)
        seed = next(s for s in seeds if s[0] == config)
        folder, _ = mutant(args, args.out, seed, index, rng, name)
        outcome, err = resume(args, feeds, seed[1], folder)
        print("%s: %s\n%s" % (case, outcome, err.rstrip()))
    if args.case:
        return
    work = []
    for index in range(args.count):
        seed = seeds[index % len(seeds)]
        folder, note = mutant(args, args.out, seed, index, rng)
        work.append((seed, folder, note))
    counts = {"ran": 0, "refused": 0, "crashed": 0, "hung": 0}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        outcomes = list(pool.map(lambda w: resume(args, feeds, w[0][1], w[1]), work))
    for (seed, folder, note), (outcome, err) in zip(work, outcomes):
        counts[outcome] += 1
        if outcome in ("crashed", "hung"):
            finding = os.path.join(args.out, "findings", os.path.basename(folder))
            shutil.copytree(folder, finding)
            with open(os.path.join(finding, "what.txt"), "w") as f:
                f.write("%s\nplan %s\nedits: %s\n%s" % (outcome, seed[1], "; ".join(note), err))
            print("finding (%s): %s: %s" % (outcome, folder, "; ".join(note)), file=sys.stderr)
    print("mutate-checkpoints: %d edited checkpoints from %d seeds: %d ran, %d refused in one "
          "line, %d crashed, %d hung" % (args.count, len(seeds), counts["ran"],
                                         counts["refused"], counts["crashed"], counts["hung"]))


if __name__ == "__main__":
    main()
