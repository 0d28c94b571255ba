"""Compares two --metrics files: line count, losses, and whether the second's
samples/s are measured per line (distinct) rather than one run average."""
import json
import sys

one, two = ([json.loads(line) for line in open(path)] for path in sys.argv[1:3])
print("%d lines, losses equal: %s, distinct rates: %s" % (
    len(two), [x["loss"] for x in one] == [x["loss"] for x in two],
    len({x["samples_per_s"] for x in two}) > len(two) // 2))
