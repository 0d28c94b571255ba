"""A plan file as protobuf text and back, with protoc: for tests that edit
a plan as a buggy compiler or an editor could, then give it a valid header
(so that cdp-run reads the edit, not a checksum failure)."""
import os
import struct
import subprocess


def _protoc(proto, mode, data):
    return subprocess.run(["protoc", "-I", os.path.dirname(proto), "--%s=cdp.plan.Plan" % mode,
                           proto], input=data, capture_output=True, check=True).stdout


def read(proto, path):
    """The plan's header (16 bytes) and its text."""
    data = open(path, "rb").read()
    return data[:16], _protoc(proto, "decode", data[32:]).decode()


def write(proto, path, header, text):
    payload = _protoc(proto, "encode", text.encode())
    digest = 0xcbf29ce484222325  # FNV-1a 64
    for byte in payload:
        digest = ((digest ^ byte) * 0x100000001b3) & 0xffffffffffffffff
    with open(path, "wb") as out:
        out.write(header + struct.pack("<QQ", len(payload), digest) + payload)
