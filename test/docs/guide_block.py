#!/usr/bin/python3
"""Compares a block of the user guide with a file a test just made.

Usage: guide_block.py GUIDE.md COMMAND_END FILE

The block is the indented output under the guide's first `    $ ` line that
ends with COMMAND_END (the tools' names are left out: lit rewrites them),
up to the next `    $ ` line or the end of the indented block. Prints
'guide block matches' or the first differing line, and exits non-zero on a
difference (so that an example cannot drift from what the tools print).
"""
import sys


def block(guide, command):
    lines = open(guide).read().split("\n")
    starts = [i for i, line in enumerate(lines)
              if line.startswith("    $ ") and line.endswith(command)]
    if not starts:
        sys.exit("guide_block.py: no command ending '%s' in %s" % (command, guide))
    out = []
    for line in lines[starts[0] + 1:]:
        if line.startswith("    $ ") or not line.startswith("    "):
            break
        out.append(line[4:])
    return out


def main():
    guide, command, path = sys.argv[1:4]
    expected = block(guide, command)
    actual = open(path).read().rstrip("\n").split("\n")
    for i, (want, got) in enumerate(zip(expected, actual)):
        if want != got:
            sys.exit("line %d differs: guide '%s', tools '%s'" % (i + 1, want, got))
    if len(expected) != len(actual):
        sys.exit("the guide shows %d lines, the tools wrote %d" % (len(expected), len(actual)))
    print("guide block matches")


main()
