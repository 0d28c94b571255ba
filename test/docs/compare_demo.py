#!/usr/bin/python3
"""Compares the demo's epoch line with the one the user guide shows.

Usage: compare_demo.py USER_GUIDE.md DEMO_OUTPUT.txt [RESULTS.md]
Both hold a line 'epoch 1: N steps, loss L, T s, test accuracy A'. Prints
'demo matches the guide' when the steps are equal, the accuracies within
0.005 (half a point) and the losses within 0.01; otherwise both lines, and
exits 1. With RESULTS.md, its "The main job" section's test accuracy must
be within half a point of the demo's too.
"""
import re
import sys

LINE = re.compile(r"epoch 1: (\d+) steps, loss ([0-9.]+), [0-9.]+ s, test accuracy ([0-9.]+)")


def epoch_line(path):
    with open(path) as f:
        for line in f:
            match = LINE.search(line)
            if match:
                return line.strip(), int(match.group(1)), float(match.group(2)), float(
                    match.group(3))
    sys.exit("%s: no 'epoch 1: ...' line" % path)


def results_accuracy(path):
    text = open(path).read()
    section = text.split("## The main job", 1)[-1].split("\n## ", 1)[0]
    match = re.search(r"test accuracy ([0-9.]+)", section)
    if not match:
        sys.exit("%s: no test accuracy under '## The main job'" % path)
    return float(match.group(1).rstrip("."))


guide, demo = epoch_line(sys.argv[1]), epoch_line(sys.argv[2])
if not (guide[1] == demo[1] and abs(guide[3] - demo[3]) <= 0.005 and
        abs(guide[2] - demo[2]) <= 0.01):
    print("the guide shows: %s\nthe demo prints: %s" % (guide[0], demo[0]))
    sys.exit(1)
print("demo matches the guide")
if len(sys.argv) > 3:
    published = results_accuracy(sys.argv[3])
    if abs(published - demo[3]) > 0.005:
        print("results.md shows test accuracy %.4f, the demo %.4f" % (published, demo[3]))
        sys.exit(1)
    print("demo matches results.md")
