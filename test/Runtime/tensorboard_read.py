#!/usr/bin/python3
"""Reads TensorBoard event files as TensorBoard's reader does, without it:
TFRecords (8-byte little-endian length, its masked CRC-32C, the data, the
data's masked CRC-32C; both checked) holding Event protobufs, decoded from
the wire format. Then compares them with the run's --metrics lines.

Usage: tensorboard_read.py DIR [METRICS.jsonl]
Prints the file version, any SessionLog START with its step, TWICE for a
step written twice without a START before it, and one line per step: its
scalars by tag. With METRICS, also MATCH or MISMATCH: every
line's figures equal the events' (as float32), step for step.
"""
import glob
import json
import os
import struct
import sys

import numpy as np


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283  # the standard check value


def masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fields(data):
    """(field number, wire type, value) of a protobuf message."""
    i = 0
    while i < len(data):
        key, i = varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(data, i)
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        elif wire == 2:
            size, i = varint(data, i)
            value, i = data[i:i + size], i + size
        else:
            raise SystemExit("wire type %d" % wire)
        yield number, wire, value


def varint(data, i):
    value, shift = 0, 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def records(path):
    data = open(path, "rb").read()
    i = 0
    while i < len(data):
        header = data[i:i + 8]
        (size,) = struct.unpack("<Q", header)
        (crc,) = struct.unpack("<I", data[i + 8:i + 12])
        if crc != masked(header):
            raise SystemExit("%s: bad length CRC at byte %d" % (path, i))
        body = data[i + 12:i + 12 + size]
        (crc,) = struct.unpack("<I", data[i + 12 + size:i + 16 + size])
        if crc != masked(body):
            raise SystemExit("%s: bad data CRC at byte %d" % (path, i))
        yield body
        i += 16 + size


def events(folder):
    """Per step, its scalars; the file versions and START steps seen; the
    steps written twice. As TensorBoard's reader, a SessionLog START at
    step s drops the steps from s on that earlier files wrote (a resumed
    run replaces them)."""
    steps, versions, starts, twice = {}, [], [], []
    for path in sorted(glob.glob(os.path.join(folder, "events.out.tfevents.*"))):
        for body in records(path):
            step, scalars = 0, {}
            for number, _, value in fields(body):
                if number == 2:
                    step = value
                elif number == 3:
                    versions.append(value.decode())
                elif number == 7:  # session_log (6 is log_message)
                    starts.append(step)
                    steps = {k: v for k, v in steps.items() if k < step}
                elif number == 5:
                    for _, _, entry in fields(value):
                        tag, scalar = None, None
                        for n, _, v in fields(entry):
                            if n == 1:
                                tag = v.decode()
                            elif n == 2:
                                (scalar,) = struct.unpack("<f", v)
                        scalars[tag] = scalar
            if scalars:
                if step in steps:
                    twice.append(step)
                steps[step] = scalars
    return steps, versions, starts, twice


def main():
    steps, versions, starts, twice = events(sys.argv[1])
    print("versions", " ".join(versions))
    for step in starts:
        print("start", step)
    for step in twice:
        print("TWICE", step)
    for step in sorted(steps):
        print("step %d %s" % (step, " ".join(
            "%s=%.6g" % (tag, steps[step][tag]) for tag in sorted(steps[step]))))
    if len(sys.argv) > 2:
        ok = True
        lines = [json.loads(line) for line in open(sys.argv[2])]
        for line in lines:
            got = steps.get(line["step"], {})
            want = {k: v for k, v in line.items() if k != "step"}
            ok = ok and sorted(got) == sorted(want) and all(
                np.float32(want[k]) == np.float32(got[k]) for k in want)
        ok = ok and sorted(steps) == [line["step"] for line in lines]
        print("MATCH" if ok else "MISMATCH")


if __name__ == "__main__":
    main()
