#!/usr/bin/python3
"""Writes a copy of a plan whose first instruction of OP claims that its
operands are exact in FORMAT (narrow_operands), as a faulty compiler pass
could: cdp-run's CPU kernels must refuse the claim where it is false.

Usage: mark_narrow.py PLAN.proto IN.cdp OUT.cdp OP FORMAT
"""
import sys

import plan_text


def main():
    proto, source, target, op, format_ = sys.argv[1:6]
    header, text = plan_text.read(proto, source)
    at = text.index('op: "%s"' % op)
    mark = '\n    attributes {\n      name: "narrow_operands"\n      s: "%s"\n    }' % format_
    line_end = text.index("\n", at)
    plan_text.write(proto, target, header, text[:line_end] + mark + text[line_end:])


if __name__ == "__main__":
    main()
