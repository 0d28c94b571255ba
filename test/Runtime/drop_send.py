#!/usr/bin/python3
"""Writes a copy of a plan with its first send (or first instruction of
OP) removed, so a peer would wait forever: re-encoded with protoc and given
a valid header, as a buggy compiler or an editor could write it.

Usage: drop_send.py PLAN.proto IN.cdp OUT.cdp [OP]
"""
import os
import struct
import subprocess
import sys


def main():
    proto, source, target = sys.argv[1:4]
    op = sys.argv[4] if len(sys.argv) > 4 else "send"
    data = open(source, "rb").read()
    include = os.path.dirname(proto)
    decode = ["protoc", "-I", include, proto]
    text = subprocess.run(decode[:1] + ["--decode=cdp.plan.Plan"] + decode[1:], input=data[32:],
                          capture_output=True, check=True).stdout.decode()
    at = text.index('op: "%s"' % op)
    start = text.rfind("instructions {", 0, at)
    end = text.index("\n  }\n", at) + len("\n  }\n")
    text = text[:start] + text[end:]
    payload = subprocess.run(decode[:1] + ["--encode=cdp.plan.Plan"] + decode[1:],
                             input=text.encode(), capture_output=True, check=True).stdout
    digest = 0xcbf29ce484222325  # FNV-1a 64
    for byte in payload:
        digest = ((digest ^ byte) * 0x100000001b3) & 0xffffffffffffffff
    with open(target, "wb") as out:
        out.write(data[:16] + struct.pack("<QQ", len(payload), digest) + payload)


if __name__ == "__main__":
    main()
