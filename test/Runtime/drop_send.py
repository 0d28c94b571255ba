#!/usr/bin/python3
"""Writes a copy of a plan with its first send (or first instruction of
OP) removed, so a peer would wait forever: re-encoded with protoc and given
a valid header, as a buggy compiler or an editor could write it.

Usage: drop_send.py PLAN.proto IN.cdp OUT.cdp [OP]
"""
import sys

import plan_text


def main():
    proto, source, target = sys.argv[1:4]
    op = sys.argv[4] if len(sys.argv) > 4 else "send"
    header, text = plan_text.read(proto, source)
    at = text.index('op: "%s"' % op)
    start = text.rfind("instructions {", 0, at)
    end = text.index("\n  }\n", at) + len("\n  }\n")
    plan_text.write(proto, target, header, text[:start] + text[end:])


if __name__ == "__main__":
    main()
