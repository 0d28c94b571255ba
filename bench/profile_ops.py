#!/usr/bin/python3
"""Sums a `cdp-run --profile` file per op: instructions, ms per step, share.

Usage: bench/profile_ops.py PROFILE.json [BEFORE.json] [--top N]

With BEFORE.json (a profile of the same model from another build or with
other flags), prints both side by side, ops ordered by the larger time. The
times are the instructions' mean times per step as cdp-run measured them,
one instruction at a time; their sum is close to the step time on one
thread.
"""
import argparse
import collections
import json
import sys


def per_op(path):
    try:
        instructions = json.load(open(path))["instructions"]
    except (OSError, ValueError, KeyError) as error:
        sys.exit("profile_ops.py: %s is not a cdp-run --profile file (%s)" % (path, error))
    ms, count = collections.Counter(), collections.Counter()
    for instruction in instructions:
        ms[instruction["op"]] += instruction["ms"]
        count[instruction["op"]] += 1
    return ms, count


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("before", nargs="?")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    after_ms, after_n = per_op(args.profile)
    if not args.before:
        total = sum(after_ms.values())
        print("%-34s %5s %9s %6s" % ("op", "count", "ms/step", "share"))
        for op, ms in after_ms.most_common(args.top):
            print("%-34s %5d %9.4f %5.1f%%" % (op, after_n[op], ms, 100 * ms / total))
        print("%-34s %5d %9.4f" % ("all", sum(after_n.values()), total))
        return
    before_ms, before_n = per_op(args.before)
    ops = sorted(set(after_ms) | set(before_ms),
                 key=lambda op: -max(after_ms[op], before_ms[op]))
    print("%-34s %15s %15s" % ("op", "before ms (n)", "after ms (n)"))
    for op in ops[:args.top]:
        print("%-34s %9.4f (%3d) %9.4f (%3d)" % (op, before_ms[op], before_n[op],
                                                after_ms[op], after_n[op]))
    print("%-34s %9.4f (%3d) %9.4f (%3d)" % ("all", sum(before_ms.values()),
                                            sum(before_n.values()), sum(after_ms.values()),
                                            sum(after_n.values())))


if __name__ == "__main__":
    main()
